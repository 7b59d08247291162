"""Clone (a whole repository, across backends, killed and resumed, verified) and export (one
snapshot as plain Zarr v3 that zarr opens without icechunk-spark)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from icechunk_spark import AlreadyExistsError, FormatError, InvalidInputError, Repository
from icechunk_spark.export import export_zarr
from icechunk_spark.ops.clone import COPIED_PREFIXES, clone, copy_objects
from icechunk_spark.storage import Storage, open_storage

from .conftest import Backend, _make_backend
from .test_cli import run as cli


def storage_of(backend: Backend) -> Storage:
    return open_storage(backend.url, **backend.options)


def with_history(storage: Storage, chunks: int = 6) -> Repository:
    """Two commits on main (the second rewrites a chunk and adds a group), a tag, a branch."""
    repo = Repository.create(storage, config={"inline_chunk_threshold_bytes": 0})
    session = repo.writable_session("main")
    session.create_group("/", attributes={"title": "clone me"})
    session.create_array("/t", (chunks * 4,), (4,), "float32", dimension_names=["x"])
    for i in range(chunks):
        session.set_chunk_values("/t", (i,), np.arange(4, dtype="float32") + i)
    first = session.commit("first")
    session = repo.writable_session("main")
    session.set_chunk_values("/t", (0,), np.full(4, -1, dtype="float32"))
    session.create_group("/more")
    session.create_array("/more/m", (2, 2), (1, 2), "int16")
    session.set_chunk_values("/more/m", (1, 0), np.array([[7, 8]], dtype="int16"))
    session.commit("second")
    repo.create_tag("v1", first)
    repo.create_branch("dev", first)
    return repo


def objects(storage: Storage) -> dict[str, bytes]:
    return {
        info.key: storage.get(info.key)
        for prefix in COPIED_PREFIXES
        for info in storage.list(prefix)
    }


def same_repository(source: Storage, copy: Storage) -> None:
    """Object by object, then as a repository: refs, history, every chunk of every snapshot."""
    assert objects(copy) == objects(source)
    a, b = Repository.open(source), Repository.open(copy)
    sa, sb = a.state(), b.state()
    assert (sa.branches(), sa.tags(), set(sa.snapshots)) == (
        sb.branches(),
        sb.tags(),
        set(sb.snapshots),
    )
    for snapshot_id in sa.snapshots:
        ra, rb = (
            a.readonly_session(snapshot_id=snapshot_id),
            b.readonly_session(snapshot_id=snapshot_id),
        )
        for node in ra.list_nodes():
            assert rb.get_node(node.path).zarr_json == node.zarr_json
            if node.meta is not None:
                for coord in map(tuple, ra.chunk_coords(node.path).tolist()):
                    assert rb.get_chunk(node.path, coord) == ra.get_chunk(node.path, coord)


@pytest.mark.parametrize(
    ("src", "dst"),
    [("memory", "local"), ("local", "s3"), ("s3", "gcs"), ("gcs", "azure"), ("azure", "local")],
)
def test_clone_across_backends(request: pytest.FixtureRequest, tmp_path: Path, src, dst) -> None:
    source = storage_of(_make_backend(src, request, tmp_path / "src"))
    destination = storage_of(_make_backend(dst, request, tmp_path / "dst"))
    with_history(source)
    summary = clone(source, destination, workers=4)
    assert summary.objects_already_there == 0 and summary.snapshots == 3
    same_repository(source, destination)
    with pytest.raises(AlreadyExistsError, match="exists at"):
        clone(source, destination)


def test_an_object_that_did_not_arrive_whole_is_caught_and_recopied(tmp_path: Path) -> None:
    source = open_storage((tmp_path / "src").as_uri())
    destination = open_storage((tmp_path / "dst").as_uri())
    with_history(source)

    def short_copier(batches):
        for batch in batches:
            copy_objects(source, destination, batch)
            yield len(batch)
        last = batches[-1][-1]
        destination.put(last.key, source.get(last.key)[:-1])  # one object cut short

    with pytest.raises(FormatError, match="did not arrive whole"):
        clone(source, destination, copier=short_copier)
    assert not Repository.exists(destination), "an unverified clone must not be a repository"
    summary = clone(source, destination)
    assert summary.objects_copied == 1  # only the short one
    same_repository(source, destination)


def test_a_killed_clone_resumes_and_matches_object_by_object(tmp_path: Path) -> None:
    """A real SIGKILL of the command in the middle of copying, then the same command again."""
    src_dir, dst_dir = tmp_path / "src", tmp_path / "dst"
    source = open_storage(src_dir.as_uri())
    with_history(source, chunks=400)
    command = [
        sys.executable,
        "-m",
        "icechunk_spark.cli",
        "clone",
        src_dir.as_uri(),
        dst_dir.as_uri(),
    ]
    proc = subprocess.Popen(
        [*command, "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline, seen = time.monotonic() + 60, 0
    while time.monotonic() < deadline and proc.poll() is None and seen < 40:
        chunks = dst_dir / "c"
        seen = len(list(chunks.glob("[!.]*"))) if chunks.exists() else 0  # not temporaries
        time.sleep(0.005)
    assert proc.poll() is None, "the clone finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    destination = open_storage(dst_dir.as_uri())
    assert not Repository.exists(destination)
    done = json.loads(cli(*command[3:], "--json").stdout)
    assert done["objects_already_there"] >= seen and done["objects_copied"] > 0
    same_repository(source, destination)


# -- export ------------------------------------------------------------------------------------
READ_WITH_PLAIN_ZARR = """
import json, sys, zarr
group = zarr.open_group(zarr.storage.LocalStore(sys.argv[1], read_only=True), mode="r")
out = {
    "title": group.attrs["title"],
    "t": group["t"][:].tolist(),
    "m": group["more/m"][:].tolist(),
    "icechunk_spark imported": any(m.startswith("icechunk_spark") for m in sys.modules),
}
print(json.dumps(out))
"""


def test_export_is_plain_zarr_that_zarr_opens_alone(tmp_path: Path) -> None:
    repo = with_history(open_storage((tmp_path / "repo").as_uri()))
    out = tmp_path / "export"
    summary = json.loads(
        cli("export", repo.storage.url, out.as_uri(), "--snapshot", "main", "--json").stdout
    )
    assert summary["chunks"] == 7 and summary["virtual_chunks"] == 0
    proc = subprocess.run(
        [sys.executable, "-I", "-c", READ_WITH_PLAIN_ZARR, str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["icechunk_spark imported"] is False
    assert got["title"] == "clone me"
    expected = (np.arange(4) + np.arange(6)[:, None]).ravel().astype("float32")
    expected[:4] = -1  # the second commit's chunk
    assert got["t"] == expected.tolist()
    assert got["m"] == [[0, 0], [7, 8]]
    tagged = tmp_path / "v1"
    export_zarr(repo.readonly_session(tag="v1"), open_storage(tagged.as_uri()))
    assert not (tagged / "more").exists()  # the tag's snapshot, not main's


def test_export_refuses_virtual_chunks_unless_materialized(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    source_file = data / "values.bin"
    source_file.write_bytes(np.arange(8, dtype="<f8").tobytes())
    container = data.as_uri() + "/"
    repo = Repository.create(
        (tmp_path / "repo").as_uri(),
        config={"virtual_chunk_containers": {container: {}}},
        authorize_virtual=[container],
    )
    session = repo.writable_session("main")
    session.create_group("/")
    session.create_array("/v", (8,), (4,), "float64")
    session.set_virtual_ref("/v", (0,), source_file.as_uri(), 0, 32)
    session.set_virtual_ref("/v", (1,), source_file.as_uri(), 32, 32)
    session.commit("virtual")
    out = open_storage((tmp_path / "out").as_uri())
    with pytest.raises(InvalidInputError, match="2 virtual chunks"):
        export_zarr(repo.readonly_session("main"), out)
    assert not list(out.list(""))  # nothing written
    summary = export_zarr(repo.readonly_session("main"), out, materialize=True)
    assert summary.virtual_chunks == 2
    import zarr

    exported = zarr.open_array(zarr.storage.LocalStore(tmp_path / "out", read_only=True), path="v")
    assert exported[:].tolist() == list(np.arange(8.0))
    by_cli = tmp_path / "by-cli"
    refused = cli("export", repo.storage.url, by_cli.as_uri(), ok=False)
    assert refused.returncode == 1 and "--materialize" in refused.stderr
    cli("export", repo.storage.url, by_cli.as_uri(), "--materialize", "--authorize", container)
    again = zarr.open_array(zarr.storage.LocalStore(by_cli, read_only=True), path="v")
    assert again[:].tolist() == list(np.arange(8.0))


def test_export_refuses_a_destination_holding_a_store(tmp_path: Path) -> None:
    repo = with_history(open_storage((tmp_path / "repo").as_uri()))
    out = open_storage((tmp_path / "out").as_uri())
    export_zarr(repo.readonly_session("main"), out)
    with pytest.raises(AlreadyExistsError):
        export_zarr(repo.readonly_session("main"), out)
