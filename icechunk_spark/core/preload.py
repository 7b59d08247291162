"""Background preload of chosen manifests when a session starts (seed 000's ``preload``).

Opening never waits: the fetches run on a background thread into the repository's manifest cache,
whose entries are futures, so a read needing a manifest being preloaded waits for that fetch
instead of starting a second one. Failures are logged, never raised into a user's read.
"""

from __future__ import annotations

import logging
import threading

from ..splitting import Preload
from .manifest_cache import ManifestCache
from .snapshot import SnapshotView

log = logging.getLogger(__name__)


def manifests_to_preload(view: SnapshotView, preload: Preload) -> list[str]:
    """Manifest ids of selected arrays, small enough, at most ``max_manifests``, in path order."""
    sizes: dict[str, int] = {}
    chosen: list[str] = []
    for node in sorted(view.nodes.values(), key=lambda n: n.path):
        for manifest in node.manifests:
            sizes[manifest.manifest_id] = sizes.get(manifest.manifest_id, 0) + manifest.ref_count
            if preload.selects(node.path) and manifest.manifest_id not in chosen:
                chosen.append(manifest.manifest_id)
    limit = preload.max_manifest_size
    chosen = [m for m in chosen if limit is None or sizes[m] <= limit]
    return chosen[: preload.max_manifests] if preload.max_manifests is not None else chosen


def start_preload(
    view: SnapshotView, preload: Preload, cache: ManifestCache
) -> threading.Thread | None:
    wanted = [m for m in manifests_to_preload(view, preload) if not cache.is_cached(m)]
    if not wanted:
        return None
    # Not a daemon: a daemon thread stopped inside pyarrow at interpreter exit aborts the
    # process ("FATAL: exception not rethrown"); preloads are small and bounded, so exit
    # simply waits for them.
    thread = threading.Thread(target=_fetch_all, args=(wanted, cache), name="icechunk-preload")
    thread.start()
    return thread


def _fetch_all(manifest_ids: list[str], cache: ManifestCache) -> None:
    for manifest_id in manifest_ids:
        try:
            cache.get(manifest_id)
        except Exception:  # a preload is a hint: the user's own read will report the error
            log.warning("preloading manifest %s failed", manifest_id, exc_info=True)
