"""Nothing left behind: a signal to kgen, or kgen's death, ends its verifier children.

Each case starts a real ``kgen eval`` on a candidate that never returns, waits for the
sandboxed verifier child, records every descendant while kgen lives (the child runs in a
session of its own, so it is found by parent links, never by name), signals kgen, and
requires every recorded process gone within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgen.evals.sandbox import lifecycle as process_lifecycle
from kgen.evals.sandbox.lifecycle import (
    install_signal_handlers,
    kill_registered,
    live_groups,
    register,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
HANGS = FIXTURES / "candidates" / "relu_hangs.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process; None once it is gone (a zombie counts as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[1]), fields[0]) if fields[0] not in ("Z", "X") else None


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            parents[int(entry)] = stat[0]
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _run_script(script: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A Python script in a process of its own, with this checkout importable: an ending signal
    is remembered for the rest of a process, so each case gets a fresh one."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _start_kgen_on_a_hung_candidate(tmp_path: Path) -> tuple[subprocess.Popen, set[int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgen.cli", "eval", str(RELU), str(HANGS), "--device", "cpu", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = _descendants(proc.pid)
        if any("kgen.evals.verifier.child" in _cmdline(pid) for pid in children):
            time.sleep(1.0)  # let it get into the candidate's loop
            return proc, _descendants(proc.pid) | children
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"the verifier child never appeared: {err[-2000:]}")


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if _stat(pid) is not None}
        time.sleep(0.1)
    return alive


@pytest.mark.parametrize(
    ("sig", "codes"),
    [(signal.SIGTERM, {143}), (signal.SIGHUP, {129}), (signal.SIGINT, {130})],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_to_kgen_ends_its_verifier_child(tmp_path, sig, codes):
    proc, children = _start_kgen_on_a_hung_candidate(tmp_path)
    assert children, "no descendant recorded"
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = _wait_gone(children, 10)
    assert not left, f"still running after {sig.name}: {[_cmdline(p) for p in left]}"
    assert proc.returncode in codes, (proc.returncode, err[-1500:])
    assert f"{sig.name} received; stopped 1 verifier process" in err, err[-1500:]


def test_killing_kgen_outright_still_ends_its_verifier_child(tmp_path):
    """SIGKILL runs no handler: the child's parent-death signal and watchdog end it."""
    proc, children = _start_kgen_on_a_hung_candidate(tmp_path)
    proc.kill()
    proc.communicate(timeout=20)
    left = _wait_gone(children, 10)
    assert not left, f"orphans after SIGKILL: {[_cmdline(p) for p in left]}"


def test_the_watchdog_ends_a_child_whose_parent_is_gone(tmp_path):
    """Without the parent-death signal (not Linux, or an intermediate process), the watchdog
    alone notices: a grandchild started with a watchdog on its vanished parent kills its group."""
    script = tmp_path / "orphan.py"
    script.write_text(
        "import os, sys, time\n"
        "from kgen.evals.sandbox.lifecycle import start_parent_watchdog\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    parent = os.getppid()\n"
        "    start_parent_watchdog(parent, interval_s=0.1)\n"
        "    print(os.getpid(), flush=True)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(1.0)\n"  # the grandchild's watchdog is running; now its parent goes
    )
    done = _run_script(script)
    grandchild = int(done.stdout.split()[0])
    assert not _wait_gone({grandchild}, 5), "the watchdog did not end the orphan"


def test_the_registry_kills_a_registered_group_and_forgets_it():
    from kgen.evals.sandbox import worker_pool
    worker_pool.close()  # a spare an earlier test's evaluation kept is registered too
    assert live_groups() == {}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    register(proc.pid, "a sleeper")
    try:
        assert proc.pid in live_groups()
        assert kill_registered() == ["a sleeper"]
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert proc.pid not in live_groups()
        assert kill_registered() == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_handlers_install_once_and_only_in_the_main_thread():
    import threading

    saved = {signum: signal.getsignal(signum) for signum in process_lifecycle.ENDING_SIGNALS}
    saved_state = (process_lifecycle._installed, dict(process_lifecycle._previous))
    process_lifecycle._installed, process_lifecycle._previous = False, {}  # as in a fresh process
    try:
        results = []
        thread = threading.Thread(target=lambda: results.append(install_signal_handlers()))
        thread.start()
        thread.join()
        assert results == [False] and not process_lifecycle._installed
        assert install_signal_handlers() is True
        handler = signal.getsignal(signal.SIGTERM)
        assert handler is process_lifecycle._on_signal
        assert install_signal_handlers() is True
        assert signal.getsignal(signal.SIGTERM) is handler  # idempotent: not wrapped twice
        assert process_lifecycle._previous[signal.SIGTERM] is saved[signal.SIGTERM]  # chains to what was there
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)
        process_lifecycle._installed, process_lifecycle._previous = saved_state[0], saved_state[1]


def _evaluate_in_a_thread(tmp_path: Path):
    """``evaluate()`` of the hung candidate in a thread of this process; the verifier's pid."""
    import threading

    from kgen.evals.harness import EvalOptions, evaluate

    before = _descendants(os.getpid())
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=evaluate(
        RELU, HANGS, EvalOptions(device="cpu", n_seeds=1, timeout_s=120, prestart=False))), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        child = next((p for p in _descendants(os.getpid()) - before if "kgen.evals.verifier.child" in _cmdline(p)), None)
        if child is not None:
            time.sleep(1.0)  # into the candidate's loop
            return thread, box, child
        time.sleep(0.2)
    pytest.fail("the verifier child never appeared")


def test_a_verifier_kgen_ends_while_stopping_is_inconclusive_not_a_crash(tmp_path):
    """What the signal handler does (``kill_registered``) while a thread waits on the child:
    the waiting evaluation says kgen stopped it, and a resumed run does not keep it."""
    thread, box, _child = _evaluate_in_a_thread(tmp_path)
    assert kill_registered("kgen received SIGTERM")
    thread.join(30)
    result = box["result"]
    assert result.verdict.value == "inconclusive" and result.inconclusive.value == "stopped", result.reason
    assert result.cut_short and "kgen received SIGTERM" in result.reason


def test_a_verifier_killed_from_outside_is_a_harness_fault(tmp_path):
    """SIGKILL from elsewhere (the host's out-of-memory killer, an operator): no verdict."""
    thread, box, child = _evaluate_in_a_thread(tmp_path)
    os.kill(child, signal.SIGKILL)
    thread.join(30)
    result = box["result"]
    assert result.verdict.value == "inconclusive" and result.inconclusive.value == "worker_killed", result.reason
    assert not result.cut_short and result.rejection is None


# A Ctrl-C landing where Python drops a handler's exception, then what kgen does next. Each such
# place: a __del__, a weakref callback (in a real run, inside an import), an after-fork hook (seen
# in CI: logging's, as a verifier started; there kgen's handler does not raise at all). Run in a
# process of its own: the signal is remembered for the rest of that process.
SWALLOWED = """
import os, signal, sys, subprocess, time, weakref
from pathlib import Path
from kgen.evals.sandbox.lifecycle import install_signal_handlers, register
from kgen.evals.sandbox.box import SandboxLimits, run_python_module

install_signal_handlers()

def interrupt_here():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100000):  # the handler runs here, where its exception is dropped
        pass

{drop}
print("went on", flush=True)
late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
register(late.pid, "a late sleeper")  # started as kgen stops: killed at once
print("late child", late.wait(timeout=10), flush=True)
from kgen.evals.sandbox import worker_pool
worker_pool.prestart(worker_pool.WorkerSpec(device="cpu", backend="triton"))  # refused: kgen is stopping
worker_pool.close()  # returns: the refused start ended the future it waits on
print("spares closed", flush=True)
box = Path(sys.argv[1])
try:
    run_python_module("kgen.evals.verifier.child", [], SandboxLimits(timeout_s=60), workdir=box)
except KeyboardInterrupt:
    print("no verifier:", not box.exists(), flush=True)
    raise
"""

DROPS = {
    "__del__": "class Dropped:\n    def __del__(self):\n        interrupt_here()\nDropped()",
    "weakref callback": ("class Target:\n    pass\ntarget = Target()\n"
                         "ref = weakref.ref(target, lambda _: interrupt_here())\ndel target"),
    "after-fork hook": ("os.register_at_fork(after_in_parent=interrupt_here)\n"
                        "subprocess.run([sys.executable, '-c', 'pass'], preexec_fn=lambda: None)"),
}


@pytest.mark.parametrize("drop", list(DROPS.values()), ids=list(DROPS))
def test_an_interrupt_python_swallowed_still_stops_kgen_before_its_next_verifier(tmp_path, drop):
    script = tmp_path / "swallowed.py"
    script.write_text(SWALLOWED.replace("{drop}", drop))
    done = _run_script(script, str(tmp_path / "box"), timeout=120)
    assert done.stdout.splitlines() == ["went on", f"late child {-signal.SIGKILL}", "spares closed",
                                        "no verifier: True"], done
    # kgen's own stop going on as designed, not an error: Python's "Exception ignored" is not shown
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.count("Traceback") == 1 and done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr
    assert done.returncode == -signal.SIGINT  # the KeyboardInterrupt went on up, as Ctrl-C does


def test_what_python_drops_otherwise_is_still_printed(tmp_path):
    """Only an ending signal's own exception goes unprinted: a __del__ that fails, or one that
    raises KeyboardInterrupt itself before any signal, is shown as Python shows it."""
    script = tmp_path / "dropped.py"
    script.write_text(
        "from kgen.evals.sandbox.lifecycle import install_signal_handlers\n"
        "install_signal_handlers()\n"
        "class Broken:\n"
        "    def __del__(self):\n"
        "        raise ValueError('a broken __del__')\n"
        "class Interrupting:\n"
        "    def __del__(self):\n"
        "        raise KeyboardInterrupt('raised by the program, not a signal')\n"
        "Broken()\n"
        "Interrupting()\n"
        "print('done', flush=True)\n"
    )
    done = _run_script(script)
    assert done.returncode == 0 and done.stdout == "done\n", done
    assert done.stderr.count("Exception ignored") == 2, done.stderr
    assert "a broken __del__" in done.stderr and "raised by the program, not a signal" in done.stderr


def test_an_ending_signal_the_program_ignored_before_kgen_stops_nothing_after_it(tmp_path):
    """SIGTERM ignored before kgen's handler: the children go, kgen goes on and may verify again."""
    script = tmp_path / "ignored.py"
    script.write_text(
        "import os, signal, subprocess, sys\n"
        "from kgen.evals.sandbox.lifecycle import install_signal_handlers, register, raise_if_ending\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "install_signal_handlers()\n"
        "first = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "register(first.pid, 'first')\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print('first', first.wait(timeout=10), flush=True)\n"
        "raise_if_ending()\n"
        "second = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.2)'], start_new_session=True)\n"
        "register(second.pid, 'second')\n"
        "print('second', second.wait(timeout=10), flush=True)\n"
    )
    done = _run_script(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"first {-signal.SIGKILL}", "second 0"]


# The signal lands while the sandbox starts its verifier (in an after-fork hook, as seen in CI with
# logging's): the handler does not raise there, where Python would drop the exception and leave the
# hook half done; the verifier registered after it is killed and the sandbox raises it.
DURING_START = """
import os, signal, sys, time
from pathlib import Path
from kgen.evals.sandbox.lifecycle import install_signal_handlers, live_groups
from kgen.evals.sandbox.box import SandboxLimits, run_python_module

install_signal_handlers()
dropped = []
kgens_hook = sys.unraisablehook
def recording(unraisable):
    dropped.append(unraisable.exc_type.__name__)
    kgens_hook(unraisable)
sys.unraisablehook = recording

def interrupt_here():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100000):
        pass

os.register_at_fork(after_in_parent=interrupt_here)
started = time.monotonic()
try:
    run_python_module("kgen.evals.verifier.child", [], SandboxLimits(timeout_s=60), workdir=Path(sys.argv[1]))
except KeyboardInterrupt:
    print("interrupted", "dropped:", dropped, "live:", live_groups(), "quick:", time.monotonic() - started < 20,
          flush=True)
"""


def test_a_signal_while_a_verifier_starts_is_raised_once_it_is_killed_not_dropped(tmp_path):
    script = tmp_path / "during_start.py"
    script.write_text(DURING_START)
    done = _run_script(script, str(tmp_path / "box"), timeout=120)
    assert done.stdout.splitlines() == ["interrupted dropped: [] live: {} quick: True"], done
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_a_signal_in_code_run_from_a_string_is_raised_at_the_next_checkpoint(tmp_path):
    """exec() of a string (dataclasses and namedtuple build their methods so, during imports): a
    KeyboardInterrupt that leaves such code makes CPython end the process by SIGINT at exit,
    whatever exit code follows, so kgen's handler leaves it for the next checkpoint."""
    script = tmp_path / "in_exec.py"
    script.write_text(
        "import sys\n"
        "from kgen.evals.sandbox.lifecycle import install_signal_handlers, raise_if_ending\n"
        "install_signal_handlers()\n"
        "exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(100000):\\n    pass\\n'\n"
        "     'print(\"the string ran to its end\", flush=True)\\n')\n"
        "try:\n"
        "    raise_if_ending()\n"
        "except KeyboardInterrupt:\n"
        "    print('raised at the checkpoint', flush=True)\n"
        "    sys.exit(130)\n"
    )
    done = _run_script(script)
    assert done.stdout.splitlines() == ["the string ran to its end", "raised at the checkpoint"], done
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
