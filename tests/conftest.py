"""CI has no GPU: kernels run in Triton's CPU interpreter, chosen before triton is imported.

Also the session's real Chroma server on loopback, for knowledge-base tests in both modes, and
how the suite is spread over processes (pytest-xdist, ``-n auto`` in pyproject.toml)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


#: Test processes at most. The suite is mostly one busy core per test (the interpreter, a
#: verifier child), so one process per core nearly halves CI's time on its two cores; each
#: also holds torch and its verifier children (a few GB at worst), which a many-core machine
#: multiplies, hence a cap.
MAX_TEST_PROCESSES = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(os.cpu_count() or 1, MAX_TEST_PROCESSES))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory) -> Iterator[str]:
    """URL of a real Chroma server on loopback, for the whole session."""
    # the script chromadb installed beside this interpreter, else whatever PATH has
    beside = Path(sys.executable).parent / "chroma"
    chroma = str(beside) if beside.is_file() else shutil.which("chroma")
    if chroma is None:
        pytest.fail("the `chroma` command (installed with chromadb) is not on PATH")
    port = _free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    log = open(data / "server.log", "w")
    process = subprocess.Popen(
        [chroma, "run", "--path", str(data / "db"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import chromadb

        deadline = time.monotonic() + 60
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"chroma server did not start: {(data / 'server.log').read_text()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
