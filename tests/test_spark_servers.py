"""The readiness probes of the Java servers the Spark tests start (no JVM needed here)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.http_server import serve_folder
from tests.support.spark_servers import StandaloneCluster


def _cluster_with_ui(url: str, tmp_path: Path) -> StandaloneCluster:
    ui_port = int(url.rsplit(":", 1)[1])
    return StandaloneCluster(None, None, 0, ui_port, tmp_path)  # type: ignore[arg-type]


def test_a_master_answering_html_has_no_alive_worker_yet(tmp_path: Path) -> None:
    # What a master not yet elected leader answered at /json/ in CI: its HTML page.
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "index.html").write_text('<!DOCTYPE html><html data-bs-theme="light">')
    with serve_folder(tmp_path) as url:
        assert _cluster_with_ui(url, tmp_path).alive_workers() == 0


def test_alive_workers_are_counted_from_the_masters_json(tmp_path: Path) -> None:
    (tmp_path / "json").mkdir()
    workers = [{"state": "ALIVE"}, {"state": "DEAD"}, {"state": "ALIVE"}]
    (tmp_path / "json" / "index.html").write_text(json.dumps({"workers": workers}))
    with serve_folder(tmp_path) as url:
        assert _cluster_with_ui(url, tmp_path).alive_workers() == 2
