"""The chunk inventory (seed 003's MetaArrays) from manifests, at every snapshot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from icechunk_spark import InvalidInputError, Repository, Session
from icechunk_spark.inventory import (
    chunk_counts,
    chunk_inventory,
    labelled_inventory,
    missing_chunks,
    plot_inventory,
)

GRID = (10, 4, 6)  # chunks along time, lat, lon
CHUNKS = (73, 5, 10)  # 730 days (2021-2022), 20 lats, 60 lons
SHAPE = tuple(g * c for g, c in zip(GRID, CHUNKS, strict=True))


def make_cube(session: Session) -> None:
    session.create_group("/")
    session.create_group("/cube")
    session.create_array(
        "/cube/tas",
        SHAPE,
        CHUNKS,
        "float32",
        fill_value=float("nan"),
        dimension_names=["time", "lat", "lon"],
    )
    session.create_array(
        "/cube/time",
        (SHAPE[0],),
        (SHAPE[0],),
        "float64",
        dimension_names=["time"],
        attributes={"units": "days since 2021-01-01", "calendar": "standard"},
    )
    session.create_array("/cube/lat", (SHAPE[1],), (SHAPE[1],), "float32", dimension_names=["lat"])
    session.create_array("/cube/lon", (SHAPE[2],), (SHAPE[2],), "float32", dimension_names=["lon"])
    session.set_chunk_values("/cube/time", (0,), np.arange(SHAPE[0], dtype="f8"))
    session.set_chunk_values("/cube/lat", (0,), np.linspace(-47.5, 47.5, SHAPE[1], dtype="f4"))
    session.set_chunk_values("/cube/lon", (0,), np.arange(SHAPE[2], dtype="f4") * 3)


def checkerboard(commit: int) -> np.ndarray:
    """Chunks written by commit ``commit`` (0..4): two time chunks, black squares only."""
    i, j, k = np.indices(GRID)
    mask: np.ndarray = ((i + j + k) % 2 == 0) & (i // 2 == commit)
    return mask


@pytest.fixture(scope="module")
def history(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Repository, list[str], list[np.ndarray]]:
    repo = Repository.create(tmp_path_factory.mktemp("inventory").as_uri())
    session = repo.writable_session()
    make_cube(session)
    snapshots, expected = [session.commit("empty cube")], [np.zeros(GRID, bool)]
    chunk = np.zeros(CHUNKS, "f4").tobytes()
    for commit in range(5):
        session = repo.writable_session()
        for coord in np.argwhere(checkerboard(commit)):
            session.set_chunk("/cube/tas", tuple(coord), chunk)
        mask = expected[-1] | checkerboard(commit)
        if commit == 4:  # a deletion is an inventory change too
            session.delete_chunk("/cube/tas", (0, 0, 0))
            mask = mask.copy()
            mask[0, 0, 0] = False
        snapshots.append(session.commit(f"checkerboard part {commit}"))
        expected.append(mask)
    return repo, snapshots, expected


def test_inventory_at_every_snapshot(
    history: tuple[Repository, list[str], list[np.ndarray]],
) -> None:
    repo, snapshots, expected = history
    for snapshot, mask in zip(snapshots, expected, strict=True):
        session = repo.readonly_session(snapshot_id=snapshot)
        np.testing.assert_array_equal(chunk_inventory(session, "/cube/tas"), mask)
        np.testing.assert_array_equal(session.chunk_inventory("/cube/tas"), mask)
        assert chunk_counts(session)["/cube/tas"] == (int(mask.sum()), int(np.prod(GRID)))
    i, j, k = np.indices(GRID)
    final = expected[-1]
    assert final.sum() == ((i + j + k) % 2 == 0).sum() - 1


def test_inventory_includes_uncommitted_changes(
    history: tuple[Repository, list[str], list[np.ndarray]],
) -> None:
    repo, _, expected = history
    session = repo.writable_session()
    session.set_chunk("/cube/tas", (0, 0, 1), b"x" * 4)
    session.delete_chunk("/cube/tas", (9, 3, 0))
    want = expected[-1].copy()
    want[0, 0, 1], want[9, 3, 0] = True, False
    np.testing.assert_array_equal(chunk_inventory(session, "/cube/tas"), want)


def test_labelled_inventory_answers_do_we_have_2022_for_this_box(
    history: tuple[Repository, list[str], list[np.ndarray]],
) -> None:
    repo, snapshots, expected = history
    session = repo.readonly_session()
    inventory = labelled_inventory(session, "/cube/tas")
    assert inventory.dims == ("time", "lat", "lon")
    assert str(inventory["time"].dtype).startswith("datetime64")
    assert inventory["time"].values[0] == np.datetime64("2021-02-06")  # centre of days 0..72
    box = inventory.sel(time=slice("2022", "2022"), lat=slice(-10, 40), lon=slice(0, 100))
    # time chunks 5..9 have their centres in 2022; lat centres -40,-15,10,35; lon 13.5,43.5,73.5
    np.testing.assert_array_equal(box.values, expected[-1][5:10, 2:4, 0:3])
    assert not bool(box.all())  # the checkerboard leaves holes
    assert inventory.attrs["initialized_chunks"] == int(expected[-1].sum())
    assert inventory["lat_first"].values[0] == pytest.approx(-47.5)
    earlier = labelled_inventory(repo.readonly_session(snapshot_id=snapshots[2]), "/cube/tas")
    assert not bool(earlier.sel(time=slice("2022", "2022")).any())  # only 2021 written then


def test_labelled_inventory_without_coordinate_arrays(tmp_path: Path) -> None:
    repo = Repository.create(tmp_path.as_uri())
    session = repo.writable_session()
    session.create_group("/")
    session.create_array("/a", (10, 10), (4, 5), "int8")
    session.set_chunk("/a", (2, 1), b"\0" * 20)
    inventory = labelled_inventory(session, "/a")
    assert inventory.dims == ("dim_0", "dim_1")
    np.testing.assert_array_equal(inventory["dim_0"].values, [1.5, 5.5, 8.5])
    assert bool(inventory.sel(dim_0=8.5, dim_1=7.0))


def test_missing_chunks_in_a_region(
    history: tuple[Repository, list[str], list[np.ndarray]],
) -> None:
    repo, _, expected = history
    session = repo.readonly_session()
    region = (slice(73 * 2, 73 * 4), slice(0, 7), slice(None))  # time chunks 2-3, lat 0-1
    missing = missing_chunks(session, "/cube/tas", region)
    want = np.argwhere(~expected[-1][2:4, 0:2, :]) + np.array([2, 0, 0])
    np.testing.assert_array_equal(missing, want)
    in_chunks = missing_chunks(session, "/cube/tas", (slice(2, 4), slice(0, 2)), in_chunks=True)
    np.testing.assert_array_equal(in_chunks, want)
    assert len(missing_chunks(session, "/cube/tas")) == (~expected[-1]).sum()
    with pytest.raises(InvalidInputError):
        missing_chunks(session, "/cube/tas", (slice(0, 10, 2),))


def test_plot_inventory_writes_a_png(
    history: tuple[Repository, list[str], list[np.ndarray]], tmp_path: Path
) -> None:
    from PIL import Image

    repo, _, _ = history
    out = plot_inventory(
        repo.readonly_session(), "/cube/tas", tmp_path / "inv.png", dims=(1, 2), index={0: 3}
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as image:
        assert image.size == (600, 450)
        assert image.format == "PNG"
    with pytest.raises(InvalidInputError):
        plot_inventory(repo.readonly_session(), "/cube/time", tmp_path / "x.png")
