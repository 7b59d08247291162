"""Reader processes for the seed-001 scenario: read the whole cube again and again."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import xarray as xr

from icechunk_spark import Repository


def read_until_stopped(
    url: str, ready_path: str, stop_path: str, deadline: float
) -> dict[str, Any]:
    """Open the branch and read the whole cube until ``stop_path`` exists.

    Time step ``i`` of ``v`` holds the value ``i + 1`` everywhere, so a read that mixed two
    snapshots shows a wrong value, a fill value, or sizes that disagree.
    """
    repo = Repository.open(url)
    lengths: list[int] = []
    torn: list[str] = []
    while time.time() < deadline:
        stopping = os.path.exists(stop_path)  # read once more after the last commit
        ds = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)
        values = ds["v"].values
        steps = values.shape[0]
        expected = np.arange(1, steps + 1, dtype=np.float32)[:, None, None]
        if ds.sizes["time"] != steps or not np.array_equal(
            values, np.broadcast_to(expected, values.shape)
        ):
            torn.append(f"{steps} steps, values {np.unique(values)[:8]}")
        lengths.append(steps)
        open(ready_path, "a").close()
        if stopping:
            break
    return {"lengths": lengths, "torn": torn}
