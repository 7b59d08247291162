"""Run every notebook top to bottom and store it with its outputs (``make notebooks``).

The notebooks are kept with their outputs so a reader browsing the repository sees the tables
and plots without running anything; the tests execute them again to check they still run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def execute(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    client.execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)  # run times: noise in every diff
    nbformat.write(notebook, path)
    print(f"executed {path.name}")


def main(names: list[str]) -> None:
    paths = [HERE / n for n in names] if names else sorted(HERE.glob("*.ipynb"))
    for path in paths:
        execute(path)


if __name__ == "__main__":
    main(sys.argv[1:])
