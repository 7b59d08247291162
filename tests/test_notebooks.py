"""The notebooks run top to bottom in a real Jupyter kernel, and are stored with their outputs
(``make notebooks``), so a reader browsing the repository sees the tables and plots."""

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
        pytest.param("sql_on_arrays.ipynb", marks=[pytest.mark.spark, pytest.mark.slow]),
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


NOTEBOOK_NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_is_stored_with_its_outputs(name: str) -> None:
    code = [c for c in _load(name).cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), "run it top to bottom: make notebooks"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
