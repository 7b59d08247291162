"""Files are combined in time order, not name order, and overlapping times are refused (issue
26, item 4): as ``xr.open_mfdataset(files, combine="by_coords")`` does.

The two ways users hit it: a later-named file repeating earlier times (duplicated, unsorted
times), and a back-filled earlier day named last (it landed at the end). Both through
``import_netcdf`` and the ``icechunk-spark import`` CLI (the Spark job:
tests/spark/test_virtual_ingest.py).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from icechunk_spark import CoordinateOrderError, InvalidInputError, Repository
from icechunk_spark.cli import main
from icechunk_spark.virtual import import_netcdf
from icechunk_spark.virtual.ordering import Span, coordinate_path, order_spans, span_of

from .conftest import NUMCODECS_WARNING, RepoFactory
from .netcdf_data import write_days

pytestmark = pytest.mark.filterwarnings(NUMCODECS_WARNING)


def mfdataset(paths: list[Path]) -> xr.Dataset:
    """xarray's documented reading of many files: ordered by their time coordinate."""
    with xr.open_mfdataset(
        paths,
        combine="by_coords",
        data_vars="minimal",
        coords="minimal",
        compat="override",
        join="exact",
        combine_attrs="override",
    ) as ds:
        return ds.load()


def import_files(make_repo: RepoFactory, folder: Path, paths: list[Path]) -> Repository:
    repo = make_repo([folder.as_uri() + "/"])
    session = repo.writable_session()
    import_netcdf(session, [p.as_uri() for p in paths], concat_dim="time")
    session.commit("import")
    return repo


def reading(repo: Repository) -> xr.Dataset:
    return xr.open_zarr(repo.readonly_session().store, consolidated=False).load()


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--json"])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def two_days(data_dir: Path) -> list[Path]:
    """tas_a.nc: 2024-03-02, tas_b.nc: 2024-03-03 (each in its own 'days since')."""
    return [
        write_days(data_dir / "tas_a.nc", "2024-03-02"),
        write_days(data_dir / "tas_b.nc", "2024-03-03"),
    ]


def test_a_back_filled_earlier_day_named_last_lands_in_time_order(
    data_dir: Path, make_repo: RepoFactory, two_days: list[Path]
) -> None:
    paths = [*two_days, write_days(data_dir / "tas_z_backfill.nc", "2024-03-01")]
    ours = reading(import_files(make_repo, data_dir, paths))
    xr.testing.assert_identical(ours, mfdataset(paths))
    assert [str(t)[:10] for t in ours.time.values] == ["2024-03-01", "2024-03-02", "2024-03-03"]


def test_a_later_named_file_repeating_earlier_times_is_refused(
    data_dir: Path, make_repo: RepoFactory, two_days: list[Path]
) -> None:
    paths = [*two_days, write_days(data_dir / "tas_c.nc", "2024-03-03")]  # tas_b's day again
    with pytest.raises(CoordinateOrderError, match=r"tas_b\.nc.*tas_c\.nc.*2024-03-03") as caught:
        import_files(make_repo, data_dir, paths)
    assert caught.value.files == (paths[1].as_uri(), paths[2].as_uri())
    assert "monotonic global indexes" in str(caught.value)
    # Stricter than xarray, which merges the two files into one day (docs/operations.md).
    assert mfdataset(paths).sizes["time"] == 2


@pytest.mark.parametrize(
    ("starts", "xarray_refuses"), [("2024-03-02", True), ("2024-03-03", False)]
)
def test_overlapping_times_are_refused(
    data_dir: Path, make_repo: RepoFactory, starts: str, xarray_refuses: bool
) -> None:
    """b.nc starts inside a.nc's 03-01..03-03, or on its last day (a boundary time
    repeated: xarray keeps both, a time index that does not strictly increase)."""
    paths = [
        write_days(data_dir / "a.nc", "2024-03-01", days=3),
        write_days(data_dir / "b.nc", starts, days=2),
    ]
    if xarray_refuses:
        with pytest.raises(ValueError, match="monotonic global indexes"):
            mfdataset(paths)
    with pytest.raises(CoordinateOrderError, match=rf"a\.nc.*b\.nc.*{starts}"):
        import_files(make_repo, data_dir, paths)


def test_cli_reruns_place_a_back_filled_day_and_refuse_a_repeated_one(
    tmp_path: Path, data_dir: Path, two_days: list[Path]
) -> None:
    url = (tmp_path / "repo").as_uri()
    pattern = str(data_dir / "*.nc")
    code, out, err = cli("import", url, pattern)
    assert code == 0, err
    repo = Repository.open(url, authorize_virtual=[data_dir.as_uri() + "/"])
    first = repo.lookup_branch("main")

    # A file repeating tas_b's day arrives: refused, naming both files; nothing committed.
    repeated = write_days(data_dir / "tas_c.nc", "2024-03-03")
    code, out, err = cli("import", url, pattern)
    assert code == 1 and out == ""
    assert "tas_b.nc" in err and "tas_c.nc" in err and "2024-03-03" in err, err
    assert repo.lookup_branch("main") == first
    repeated.unlink()

    # An earlier day arrives, named last: the rebuild puts it first.
    backfill = write_days(data_dir / "tas_z_backfill.nc", "2024-03-01")
    code, out, err = cli("import", url, pattern)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    assert (result["new_files"], result["files"]) == (1, 3)
    xr.testing.assert_identical(reading(repo), mfdataset([*two_days, backfill]))


# -- the shared rules (virtual.ordering), on spans as the importers and Spark's driver see them
DAYS = "days since 2024-03-01"


def day_span(file: str, values: list[float], units: str = DAYS) -> Span:
    return span_of(file, np.array(values, "f8"), {"units": units, "calendar": "standard"})


def test_files_are_ordered_by_their_first_time_in_common_units() -> None:
    spans = [
        day_span("b", [0, 1], "days since 2024-03-05"),  # 03-05, 03-06
        day_span("a", [48, 72], "hours since 2024-03-01"),  # 03-03, 03-04
        day_span("c", [6]),  # 03-07
    ]
    assert order_spans(spans, "time") == [1, 0, 2]
    # Appending: the dataset ends on 03-02 (its own units): the files follow it.
    assert order_spans(spans, "time", after=day_span("dataset", [1])) == [1, 0, 2]


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0, 2, 1], "2024-03-03 00:00:00 (2.0 days since 2024-03-01) followed by 2024-03-02"),
        ([0, 1, 1], "2024-03-02 00:00:00 (1.0 days since 2024-03-01) twice"),
        ([0, np.nan], "a missing (NaN) value"),
    ],
)
def test_a_file_whose_own_times_do_not_increase_is_refused(values: list[float], shown: str) -> None:
    with pytest.raises(CoordinateOrderError, match=r"'f'.*does not increase") as caught:
        order_spans([day_span("f", values)], "time")
    assert shown in str(caught.value) and caught.value.files == ("f",)


def test_an_append_must_start_after_the_dataset_ends() -> None:
    held = day_span("dataset", [9])  # the dataset's last time: 03-10
    for late in ([9, 10], [2]):  # repeats its last day; back-fills an earlier one
        with pytest.raises(CoordinateOrderError, match="not after the last 'time' the dataset"):
            order_spans([day_span("new", [20]), day_span("late", late)], "time", after=held)


def test_files_without_values_or_without_the_coordinate() -> None:
    empty = span_of("e", np.array([], "f8"), {"units": DAYS})
    assert order_spans([day_span("b", [5]), empty, day_span("a", [1])], "time") == [1, 2, 0]
    assert order_spans([None, None], "time") == [0, 1]  # nothing to order by: as given
    with pytest.raises(InvalidInputError, match="'b' has no coordinate 'time' though other"):
        order_spans([day_span("a", [1]), None], "time", names=["a", "b"])


def test_units_and_calendars_must_be_comparable() -> None:
    with pytest.raises(InvalidInputError, match="units 'm'"):
        order_spans(
            [
                span_of("a", np.array([1]), {"units": "km"}),
                span_of("b", np.array([2]), {"units": "m"}),
            ],
            "x",
        )
    noleap = span_of("b", np.array([2.0]), {"units": DAYS, "calendar": "noleap"})
    with pytest.raises(InvalidInputError, match="calendar 'noleap'"):
        order_spans([day_span("a", [1]), noleap], "time")


def test_the_coordinate_is_the_shallowest_array_named_like_the_dimension() -> None:
    dims = {"/g/time": ("time",), "/time": ("time",), "/tas": ("time", "x"), "/x": ("x",)}
    assert coordinate_path(dims, "time") == "/time"
    assert coordinate_path({"/tas": ("time",)}, "time") is None


def test_the_spark_driver_orders_file_summaries_by_time(
    data_dir: Path, two_days: list[Path]
) -> None:
    """What the Spark ingest's driver does (without Spark): executors' summaries carry
    each file's first and last time; placing them orders the files by it."""
    from icechunk_spark.virtual.file_rows import scan_file
    from icechunk_spark.virtual.placement import place

    def unused(*args: Any) -> Any:
        raise AssertionError("a new dataset has nothing held to read")

    paths = [*two_days, write_days(data_dir / "tas_z_backfill.nc", "2024-03-01")]
    containers: dict[str, dict[str, Any]] = {data_dir.as_uri() + "/": {}}
    summaries = [scan_file(p.as_uri(), "time", "/", containers)[1] for p in paths]
    spans = [s.span for s in summaries]
    assert [(s.first, s.last, s.units) for s in spans if s is not None] == [
        (0, 0, f"days since {day} 00:00:00") for day in ("2024-03-02", "2024-03-03", "2024-03-01")
    ]
    placement = place(summaries, {}, "time", unused, unused)
    tas = {s.file.rsplit("/", 1)[-1]: s.chunks for s in placement.shifts if s.array == "/tas"}
    assert tas == {"tas_z_backfill.nc": 0, "tas_a.nc": 1, "tas_b.nc": 2}


def test_labels_that_are_strings_order_like_numbers() -> None:
    """A concat dimension labelled by strings (ensemble members, vlen strings: objects)."""
    m = [span_of(f, np.array(v, object), {}) for f, v in (("b", ["m3", "m4"]), ("a", ["m1", "m2"]))]
    assert [s.disorder for s in m] == [None, None] and order_spans(m, "member") == [1, 0]
    assert span_of("c", np.array(["m2", "m1"], object), {}).disorder == "'m2' followed by 'm1'"
