"""A real Ray head on loopback for the tests: started by the test, stopped by its pid.

`ray start --head --block` in a session of its own; stopped by SIGTERM to that one process
(it ends the processes it started), then SIGKILL to whatever of its group is left: nothing
else on the machine is touched (no `ray stop`, which ends every Ray process of the user).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: how long a head may take to accept drivers (CI's two cores also run other tests)
START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ray_command() -> str:
    found = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    return found


@contextmanager
def ray_head(folder: Path, cpus: int = 4) -> Iterator[str]:
    """A head with ``cpus`` CPUs and no GPU; yields its address (``127.0.0.1:PORT``)."""
    port = _free_port()
    folder.mkdir(parents=True, exist_ok=True)
    # Ray's sockets live under its temp dir, and a socket path may not pass 107 bytes: a
    # pytest folder (".../popen-gw0/ray-head0/...") is too deep, so a short one of its own
    short = Path(tempfile.mkdtemp(prefix="kray-", dir="/tmp"))
    log = (folder / "head.log").open("w")
    # no token authentication: a driver in the test connects as an unconfigured one would
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(
        [ray_command(), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={cpus}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
         f"--ray-client-server-port={_free_port()}", f"--temp-dir={short}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        _wait_until_up(address, proc, folder / "head.log")
        yield address
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of its group still there
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()
        shutil.rmtree(short, ignore_errors=True)


def _wait_until_up(address: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last: list[str] = []
    probe = [sys.executable, "-c", "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "ray.shutdown()", address]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Ray head exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            answer = subprocess.run(probe, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            last = [f"the probe hung 30 s: {(exc.stderr or b'')[-1500:]!r}"]
            continue
        if answer.returncode == 0:
            return
        last = answer.stderr.strip().splitlines()[-1:] if answer.stderr.strip() else []
        time.sleep(1.0)
    raise RuntimeError(f"the Ray head did not come up in {START_TIMEOUT_S:g} s (last probe: {last}): "
                       f"{log.read_text()[-2000:]}")
