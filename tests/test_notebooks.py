"""The notebooks run top to bottom in a real Jupyter kernel, and are stored without outputs."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PYTHON_WARNING = re.compile(r"\b\w+Warning:")


def _load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("quickstart.ipynb", marks=[pytest.mark.spark, pytest.mark.slow]),
        pytest.param("streaming.ipynb", marks=[pytest.mark.spark, pytest.mark.slow]),
        "virtual_datasets.ipynb",
    ],
)
def test_notebook_runs_top_to_bottom(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel inherits it: its files land here
    notebook = _load(name)
    # Runs in notebooks/ as a user would; a failing cell raises CellExecutionError.
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()

    ran = [c for c in notebook.cells if c.cell_type == "code"]
    assert ran and all(c.execution_count is not None for c in ran)
    assert any(
        o.output_type == "display_data" and "image/png" in o.data for c in ran for o in c.outputs
    )
    warnings = [
        o.text
        for c in ran
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stderr" and PYTHON_WARNING.search(o.text)
    ]
    assert warnings == []  # a warning in a notebook is a warning every reader sees


@pytest.mark.parametrize("name", ["quickstart.ipynb", "streaming.ipynb", "virtual_datasets.ipynb"])
def test_notebook_is_stored_without_outputs(name: str) -> None:
    for cell in _load(name).cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
