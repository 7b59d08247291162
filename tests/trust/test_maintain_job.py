"""jobs/maintain.py: a dry run writes nothing and reports what the real run deletes; by default
GC spares in-flight writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from icechunk_spark import Repository
from tests.support.helpers import hints_written

ROOT = Path(__file__).resolve().parents[2]
BIG = b"x" * 64


def _maintain(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    # The job imports this checkout's package, not whichever one is installed.
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "maintain.py"), "--repo", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _repo_with_history(tmp_path: Path) -> Repository:
    repo = Repository.create(tmp_path.as_uri(), config={"inline_chunk_threshold_bytes": 8})
    for i in range(3):
        session = repo.writable_session()
        if i == 0:
            session.create_array("/a", shape=(4,), chunk_shape=(1,), dtype="uint8")
        session.set_chunk("/a", (i,), BIG)
        session.commit(f"write {i}")
    hints_written(repo)  # no hint write of ours lands while a test looks at the files
    return repo


def test_dry_run_writes_nothing(tmp_path):
    _repo_with_history(tmp_path)
    before = _files(tmp_path)
    done = _maintain(
        tmp_path.as_uri(),
        "--keep-last", "1", "--gc-days", "0", "--dry-run",
        "--manifests", str(ROOT / "conf" / "manifests.yaml"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "would repack" in done.stdout and "would expire 3 snapshots" in done.stdout
    assert _files(tmp_path) == before


def _gc_report(done: subprocess.CompletedProcess[str], verb: str) -> str:
    """The job's GC line after its verb: "N objects (B bytes): chunks=… manifests=…"."""
    assert done.returncode == 0, done.stderr
    prefix = f"maintain: gc {verb} "
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    return line[len(prefix) :]


def test_dry_run_reports_what_the_real_run_deletes(tmp_path):
    _repo_with_history(tmp_path)
    # Every file an hour old, the GC window 15 minutes: what the runs write themselves (the
    # expiry's and the fence's state files) stays, whatever the clock does meanwhile.
    hour_ago = time.time() - 3600
    for path in tmp_path.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))
    window = ("--keep-last", "1", "--gc-days", str(15 / 1440))

    dry = _gc_report(_maintain(tmp_path.as_uri(), *window, "--dry-run"), "would delete")
    before = _files(tmp_path)
    real = _gc_report(_maintain(tmp_path.as_uri(), *window), "deleted")
    gone = set(before) - set(_files(tmp_path))

    assert dry == real
    # ...and the real run's report is what vanished; the expired snapshots' files are in it.
    assert real.startswith(f"{len(gone)} objects ({sum(len(before[k]) for k in gone)} bytes)")
    assert {k.split("/")[0] for k in gone} == {"m", "s", "t", "x"}


def test_default_window_spares_a_write_in_flight(tmp_path):
    repo = _repo_with_history(tmp_path)
    session = repo.writable_session()
    session.set_chunk("/a", (3,), BIG)  # written, not yet committed
    done = _maintain(tmp_path.as_uri(), "--keep-last", "1")
    assert done.returncode == 0, done.stderr
    session.commit("after maintenance")
    reader = repo.readonly_session()
    assert [reader.get_chunk("/a", (i,)) for i in range(4)] == [BIG] * 4


def test_negative_gc_days_is_refused(tmp_path):
    _repo_with_history(tmp_path)
    done = _maintain(tmp_path.as_uri(), "--gc-days", "-1")
    assert done.returncode == 1
    assert "--gc-days must be >= 0" in done.stderr
