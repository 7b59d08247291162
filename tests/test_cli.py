"""The icechunk-spark command line, driven as a user would: in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from icechunk_spark import Repository
from tests.support.helpers import loaded_files

CONF = Path(__file__).resolve().parent.parent / "conf" / "manifests.yaml"


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "icechunk_spark.cli", *args], capture_output=True, text=True
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def run_json(*args: str):
    return json.loads(run(*args, "--json").stdout)


@pytest.fixture
def repo_url(tmp_path):
    url = (tmp_path / "repo").as_uri()
    run("init", url)
    repo = Repository.open(url)
    session = repo.writable_session()
    session.create_group("/", attributes={"title": "cli"})
    session.create_array("/grp/temp", shape=(4, 6), chunk_shape=(2, 3), dtype="float32")
    session.set_chunk("/grp/temp", (0, 0), b"\0" * 24)
    session.commit("first")
    session = repo.writable_session()
    session.set_chunk("/grp/temp", (1, 1), b"\1" * 24)
    session.commit("second")
    return url


def test_log_lists_snapshots_newest_first(repo_url):
    entries = run_json("log", repo_url)
    assert [e["message"] for e in entries] == ["second", "first", "Repository initialized"]
    assert run_json("log", repo_url, "-n", "1")[0]["message"] == "second"
    assert "second" in run("log", repo_url).stdout


def test_branch_and_tag_lifecycle(repo_url):
    first = run_json("log", repo_url)[1]["id"]
    assert set(run_json("branch", repo_url, "create", "dev", first)) == {"main", "dev"}
    assert run_json("branch", repo_url)["dev"] == first
    assert (
        run_json("branch", repo_url, "reset", "dev", "main")["dev"]
        == run_json("log", repo_url)[0]["id"]
    )
    assert "dev" not in run_json("branch", repo_url, "delete", "dev")
    assert run_json("tag", repo_url, "create", "v1", first) == {"v1": first}
    failed = run("tag", repo_url, "create", "v1", "main", ok=False)
    assert failed.returncode == 1 and "immutable" in failed.stderr
    assert run_json("tag", repo_url, "delete", "v1") == {}


def test_ls_show_diff_and_chunks(repo_url):
    rows = run_json("ls", repo_url)
    assert [r["path"] for r in rows] == ["/", "/grp/temp"]
    assert "temp  (4, 6) chunks (2, 3) float32" in run("ls", repo_url).stdout
    shown = run_json("show", repo_url, "/grp/temp")
    assert shown["zarr_json"]["shape"] == [4, 6] and shown["refs"] == 2
    first = run_json("log", repo_url)[1]["id"]
    assert run_json("show", repo_url, first)["message"] == "first"
    assert run_json("diff", repo_url, first, "main")["chunks_changed"] == {"/grp/temp": 1}
    assert run_json("chunks", repo_url) == {"/grp/temp": {"initialized": 2, "total": 4}}
    assert run_json("ls", repo_url, "--ref", first)[1]["refs"] == 1


def test_config_show_validate_and_set(repo_url, tmp_path):
    shown = run("config", repo_url, "show").stdout
    assert "coordinates" in shown
    assert run_json("config", repo_url, "validate", str(CONF)) == {"valid": True}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"chunk-manifests": {"rules": [{"target": "nowhere"}]}}))
    failed = run("config", repo_url, "validate", str(bad), ok=False)
    assert failed.returncode == 1 and "chunk-manifests.rules[0].target" in failed.stderr
    good = tmp_path / "good.yaml"
    good.write_text(
        yaml.safe_dump({"chunk-manifests": {"sets": [{"default": {"max-manifest-size": 10}}]}})
    )
    run("config", repo_url, "set", str(good))
    assert Repository.open(repo_url).manifest_config.set("default").max_manifest_size == 10


def test_expire_and_gc(repo_url):
    assert run_json("expire", repo_url, "--older-than", "2000-01-01T00:00:00") == []
    dry = run_json("gc", repo_url, "--days", "0", "--dry-run")
    assert dry["chunks_deleted"] == 0
    run_json("expire", repo_url, "--days", "0")
    done = run_json("gc", repo_url, "--days", "0")
    assert done["structures_deleted"] >= 1
    assert Repository.open(repo_url).readonly_session().get_chunk("/grp/temp", (1, 1)) == b"\1" * 24


def test_status_read_only_refuses_writers_until_set_back(repo_url):
    assert run_json("status", repo_url)["availability"] == "online"
    set_ro = run("status", repo_url, "--set", "read-only", "--reason", "moving to S3").stdout
    assert set_ro.startswith("read-only since ") and "moving to S3" in set_ro
    refused = run("tag", repo_url, "create", "v1", "main", ok=False)
    assert refused.returncode == 1 and "read-only since" in refused.stderr
    assert "moving to S3" in refused.stderr and refused.stderr.count("\n") == 1
    no_reason = run("status", repo_url, "--set", "read-only", ok=False)
    assert no_reason.returncode == 1 and "needs a reason" in no_reason.stderr
    assert run_json("status", repo_url, "--set", "online") == {
        "availability": "online",
        "reason": "",
        "since": run_json("status", repo_url)["since"],
    }
    run("tag", repo_url, "create", "v1", "main")


def test_squash_rewrites_a_range_into_one_snapshot(repo_url):
    repo = Repository.open(repo_url)
    for i in (1, 2):
        session = repo.writable_session()
        session.set_chunk("/grp/temp", (0, 1), bytes([i]) * 24)
        session.commit(f"write {i}")
    log = [s.id for s in repo.ancestry()]
    out = run_json("squash", repo_url, log[2], log[0], "-m", "squashed")
    assert [s.message for s in repo.ancestry()][:2] == ["squashed", "first"]
    assert repo.lookup_branch("main") == out["snapshot_id"]
    refused = run("squash", repo_url, log[-1], out["snapshot_id"], "-m", "x", ok=False)
    assert refused.returncode == 1 and "first of the repository" in refused.stderr


def test_errors_are_one_line_with_a_nonzero_exit(tmp_path, repo_url):
    missing = run("log", (tmp_path / "nothing").as_uri(), ok=False)
    assert missing.returncode == 1
    assert (
        missing.stderr.startswith("icechunk-spark: error: no repository")
        and missing.stderr.count("\n") == 1
    )
    assert "Traceback" not in missing.stderr
    unknown = run("log", repo_url, "nosuchbranch", ok=False)
    assert unknown.returncode == 1 and "not a branch, tag or snapshot" in unknown.stderr
    again = run("init", repo_url, ok=False)
    assert again.returncode == 1 and "a repository exists at" in again.stderr
    debug = run("log", (tmp_path / "nothing").as_uri(), "--debug", ok=False)
    assert "Traceback" in debug.stderr


def test_a_truncated_state_hint_does_not_stop_the_cli(repo_url, tmp_path):
    hint = tmp_path / "repo" / "icechunk.json"
    hint.write_bytes(hint.read_bytes()[:40])
    entries = run_json("log", repo_url)
    assert [e["message"] for e in entries] == ["second", "first", "Repository initialized"]


def test_chunks_plot_writes_a_png(repo_url, tmp_path):
    png = tmp_path / "inventory.png"
    counts = run_json("chunks", repo_url, "--array", "/grp/temp", "--plot", str(png))
    assert counts == {"/grp/temp": {"initialized": 2, "total": 4}}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    missing = run("chunks", repo_url, "--plot", str(png), ok=False)
    assert missing.returncode == 1 and "--plot needs --array" in missing.stderr


def test_gc_draws_progress_bars_on_stderr_and_keeps_stdout_json(repo_url):
    run_json("expire", repo_url, "--days", "0")
    proc = run("gc", repo_url, "--days", "0", "--json", "--progress")
    assert json.loads(proc.stdout)["structures_deleted"] >= 1
    for stage in ("reading snapshots", "listing objects", "deleting objects"):
        assert stage in proc.stderr
    assert "100%" in proc.stderr
    quiet = run("gc", repo_url, "--days", "0")  # stderr is a pipe here: no bars by default
    assert quiet.stderr == ""


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
def test_import_appends_only_new_files(tmp_path):
    import shutil

    from tests.virtual.netcdf_data import write_monthly_files

    (tmp_path / "all").mkdir()
    monthly = write_monthly_files(tmp_path / "all")
    data = tmp_path / "data"
    data.mkdir()
    for path in monthly.paths[:2]:
        shutil.copy(path, data)
    url = (tmp_path / "virtual").as_uri()
    pattern = str(data / "*.nc")

    first = run("import", url, pattern, "--group", "/tas", "--json", "--progress")
    assert json.loads(first.stdout)["new_files"] == 2
    assert "scanning files" in first.stderr and "writing manifests" in first.stderr
    assert run_json("import", url, pattern, "--group", "/tas")["committed"] is False
    shutil.copy(monthly.paths[2], data)
    third = run_json("import", url, pattern, "--group", "/tas", "-m", "march")
    assert (third["new_files"], third["files"]) == (1, 3)
    assert run_json("log", url, "-n", "1")[0]["message"] == "march"
    tas = {row["path"]: row for row in run_json("ls", url)}["/tas/tas"]
    assert tas["shape"][0] == 31 + 28 + 31

    nothing = run("import", url, str(tmp_path / "none" / "*.nc"), ok=False)
    assert nothing.returncode == 1 and "no files match" in nothing.stderr


def test_rewrite_manifests_repacks_under_a_new_config(repo_url, tmp_path):
    session = Repository.open(repo_url).writable_session()
    session.create_array("/grp/other", shape=(4,), chunk_shape=(2,), dtype="int8")
    session.set_chunk("/grp/other", (0,), b"\1\2")
    session.commit("another array")
    one_each = tmp_path / "one_each.yaml"
    one_each.write_text(
        yaml.safe_dump(
            {
                "chunk-manifests": {
                    "sets": [{"own": {"max-manifest-size": None, "max-arrays-per-manifest": 1}}],
                    "rules": [{"path": ".*", "target": "own"}],
                }
            }
        )
    )
    done = run("rewrite-manifests", repo_url, str(one_each), "--json", "--progress")
    assert json.loads(done.stdout)["manifests"] == 2
    assert "reading manifests" in done.stderr and "writing manifests" in done.stderr
    assert run_json("log", repo_url, "-n", "1")[0]["message"] == "rewrite manifests"
    assert "own:" in run("config", repo_url, "show").stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunk-manifests: {sets: [{own: {bogus: 1}}]}")
    refused = run("rewrite-manifests", repo_url, str(bad), ok=False)
    assert refused.returncode == 1 and "bogus" in refused.stderr


def test_progress_bars_show_on_a_terminal_even_one_reporting_no_size(repo_url):
    import os
    import pty

    run_json("expire", repo_url, "--days", "0")
    leader, follower = pty.openpty()  # a fresh pty reports 0 columns and 0 rows
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "icechunk_spark.cli", "gc", repo_url, "--days", "0"],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
        )
        os.close(follower)
        drawn = b""
        while chunk := _read_pty(leader):
            drawn += chunk
    finally:
        os.close(leader)
    assert proc.returncode == 0 and proc.stdout.startswith("deleted ")
    assert b"deleting objects" in drawn and b"100%" in drawn


def _read_pty(fd: int) -> bytes:
    import os

    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the writing side has closed
        return b""


@pytest.mark.parametrize(
    ("newer", "kind"),
    [
        ({"endian": "big", "contiguous": True}, "virtual"),  # stored alike: refs to both
        ({"zlib": True}, "native"),  # no one codec chain fits both: the values are copied
    ],
    ids=["stored-alike", "compressed"],
)
def test_import_a_folder_of_netcdf3_and_netcdf4_files_with_the_auto_parser(tmp_path, newer, kind):
    """An archive whose older files are NetCDF3 and newer NetCDF4 becomes one virtual
    dataset, each file read by its own parser (VirtualiZarr's), equal to xarray's reading."""
    import xarray as xr

    from tests.virtual.netcdf_data import write_series_file

    pytest.importorskip("virtualizarr", reason="the virtualizarr extra is not installed")
    data = tmp_path / "data"
    data.mkdir()
    write_series_file(data, 0, 2, "NETCDF3_CLASSIC")
    write_series_file(data, 2, 2, "NETCDF4", **newer)
    url = (tmp_path / "virtual").as_uri()
    done = run_json("import", url, str(data / "*.nc"), "--parser", "auto")
    assert (done["new_files"], done["committed"]) == (2, True)
    repo = Repository.open(url, authorize_virtual=[data.as_uri() + "/"])
    got = xr.open_zarr(repo.readonly_session().store, consolidated=False).load()
    files = loaded_files(sorted(data.glob("*.nc")))
    expected = xr.concat(files, dim="time").load()
    xr.testing.assert_equal(got.tas, expected.tas)
    assert got.time.values.tolist() == expected.time.values.tolist()
    refs = repo.readonly_session().chunk_refs("/tas")
    kinds = {
        "virtual" if r["virtual_path"] else "inline" if r["inline_data"] else "native"
        for r in refs.to_pylist()
    }
    assert kinds == {kind}


def test_import_with_a_parser_that_does_not_fit_is_refused_before_anything_is_made(tmp_path):
    from tests.virtual.netcdf_data import write_series_file

    pytest.importorskip("virtualizarr", reason="the virtualizarr extra is not installed")
    data = tmp_path / "data"
    data.mkdir()
    write_series_file(data, 0, 2, "NETCDF3_CLASSIC")
    url = (tmp_path / "virtual").as_uri()
    refused = run("import", url, str(data / "*.nc"), "--parser", "tiff", ok=False)
    assert refused.returncode == 1 and "looks like a netcdf3 file, not tiff" in refused.stderr
    default = run("import", url, str(data / "*.nc"), ok=False)  # kerchunk reads NetCDF4 only
    assert default.returncode == 1 and "not a NetCDF4/HDF5 file" in default.stderr
    assert not Repository.exists(url)
