"""The in-box guard: the candidate's own processes, file writes outside the box, sockets and
lingering threads are refused and recorded; writes inside the box are not."""

import subprocess
import sys
import textwrap

GUARDED_CHILD = textwrap.dedent(
    """
    import json, sys, pathlib
    from kgen.evals.sandbox.guard import CandidateGuard
    box, candidate = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    guard = CandidateGuard(candidate, [box, pathlib.Path("/dev")])  # as the verifier sets it up
    guard.install()
    import importlib.util
    spec = importlib.util.spec_from_file_location("cand", candidate)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outcomes = {}
    for name in module.ACTIONS:
        with guard:
            try:
                getattr(module, name)(box)
                outcomes[name] = "ran"
            except PermissionError:
                outcomes[name] = "refused"
    print(json.dumps({"outcomes": outcomes, "violations": [v.action for v in guard.violations]}))
    """
)

CANDIDATE = textwrap.dedent(
    """
    import os, socket, subprocess, threading, time
    ACTIONS = ["spawn", "write_outside", "write_inside", "connect", "linger", "compute"]

    def spawn(box):
        subprocess.run(["true"])

    def write_outside(box):
        open("/tmp/kgen-guard-test-outside.txt", "w").write("x")

    def write_inside(box):
        (box / "ok.txt").write_text("fine")

    def connect(box):
        socket.create_connection(("127.0.0.1", 9), timeout=1)

    def linger(box):
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()

    def compute(box):
        sum(range(1000))
    """
)


def test_guard_refuses_the_candidates_own_escapes(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    candidate = tmp_path / "candidate.py"
    candidate.write_text(CANDIDATE)
    out = subprocess.run(
        [sys.executable, "-c", GUARDED_CHILD, str(box), str(candidate)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    import json

    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outcomes"]["spawn"] == "refused"
    assert report["outcomes"]["write_outside"] == "refused"
    assert report["outcomes"]["write_inside"] == "ran"
    assert report["outcomes"]["connect"] == "refused"
    assert report["outcomes"]["compute"] == "ran"
    assert sorted(report["violations"]) == ["file", "network", "process", "thread"]


def test_packages_installed_inside_the_standard_librarys_folder_are_not_the_standard_library():
    """Where Python is installed under /usr/local, site-packages sits inside the standard
    library's folder: Triton's frames there must still count as a package's, so Triton building
    its launcher with gcc is Triton's work, not the candidate starting a process."""
    from kgen.evals.sandbox.guard import is_standard_library

    stdlib, packages = ("/usr/local/lib/python3.12",), ("/usr/local/lib/python3.12/site-packages",)
    assert is_standard_library("/usr/local/lib/python3.12/subprocess.py", stdlib, packages)
    assert not is_standard_library("/usr/local/lib/python3.12/site-packages/triton/runtime/build.py", stdlib, packages)
    assert not is_standard_library("/srv/kernels/candidate.py", stdlib, packages)
    import subprocess as stdlib_module

    assert is_standard_library(stdlib_module.__file__)
    assert not is_standard_library(__file__)
