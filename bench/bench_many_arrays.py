"""Thousands of arrays in one commit (icechunk#2348: 5,760 arrays took over 10 minutes), then
commits touching one of them (the median of seven); beside Icechunk in the same run.

    .venv/bin/python bench/bench_many_arrays.py [--arrays 5760] [--repeat 1]

Each side runs bench/many_arrays_side.py in a process of its own (Icechunk in bench/.venv312,
built by `make bench`): the same zarr-python calls inside the same timers, local disk. A third
row creates the same arrays through our own API (no zarr-python), to show what the engine
itself costs. Figures are the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDE = HERE / "many_arrays_side.py"
ICECHUNK_PYTHON = HERE / ".venv312" / "bin" / "python"
COLUMNS = ("create_and_write_s", "first_commit_s", "total_s", "touch_one_commit_s")


def run_side(python: Path | str, *args: str) -> dict[str, float]:
    proc = subprocess.run(
        [str(python), str(SIDE), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arrays", type=int, default=5760)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    n = str(args.arrays)
    sides: list[tuple[Path | str, list[str]]] = [
        (sys.executable, ["--system", "ours", "--arrays", n]),
        (sys.executable, ["--system", "ours", "--arrays", n, "--native"]),
    ]
    if ICECHUNK_PYTHON.exists():
        sides.append((ICECHUNK_PYTHON, ["--system", "icechunk", "--arrays", n]))
    else:
        print("bench/.venv312 is missing (make bench builds it): no Icechunk column")
    rows = []
    for python, side_args in sides:
        runs = [run_side(python, *side_args) for _ in range(args.repeat)]
        rows.append([runs[0]["system"], *(statistics.median(r[c] for r in runs) for c in COLUMNS)])
    print(f"\n{args.arrays} arrays of one chunk each, local disk (median of {args.repeat})")
    header = ["system", "create+write s", "first commit s", "total s", "touch-one commit s"]
    widths = [max(len(h), 18) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        cells = [row[0], *(f"{v:.3f}" for v in row[1:])]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))


if __name__ == "__main__":
    main()
