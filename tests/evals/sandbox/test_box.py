"""The sandbox: secrets never reach the child, the network is gone where the OS allows."""

import os

from kgen.evals.sandbox.box import (
    SandboxLimits,
    network_isolation_prefix,
    run_python_module,
    scrubbed_environment,
)


def test_credentials_are_scrubbed():
    env = scrubbed_environment(
        {"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "a", "HF_TOKEN": "t",
         "KGEN_SECRET_THING": "s", "CUDA_VISIBLE_DEVICES": "0", "AWS_SECRET_ACCESS_KEY": "k", "RANDOM": "r"}
    )
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}


def test_child_sees_no_keys_and_runs_in_its_own_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    script = tmp_path / "probe_env.py"
    script.write_text("import os, json; print(json.dumps({'key': os.environ.get('OPENAI_API_KEY'), 'cwd': os.getcwd()}))")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    box = tmp_path / "box"
    outcome = run_python_module("probe_env", [], SandboxLimits(timeout_s=30), workdir=box)
    assert outcome.returncode == 0, outcome.stderr_tail
    assert '"key": null' in outcome.stdout_tail
    assert str(box) in outcome.stdout_tail


def test_network_is_unreachable_when_isolation_is_available(tmp_path, monkeypatch):
    if not network_isolation_prefix():
        import pytest

        pytest.skip("this OS does not allow a new network namespace")
    script = tmp_path / "probe_net.py"
    script.write_text(
        "import socket\ns = socket.socket()\ns.settimeout(2)\n"
        "try:\n    s.connect(('127.0.0.1', 9))\n    print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outcome = run_python_module("probe_net", [], SandboxLimits(timeout_s=30), workdir=tmp_path / "box")
    assert outcome.network_isolated
    assert "refused 101" in outcome.stdout_tail  # ENETUNREACH: not even loopback exists


def test_megabytes_of_output_are_cut_to_a_tail(tmp_path, monkeypatch):
    script = tmp_path / "chatty.py"
    script.write_text("import sys\nfor i in range(200000):\n    print('x' * 50, i)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outcome = run_python_module("chatty", [], SandboxLimits(timeout_s=60, output_tail_bytes=1000), workdir=tmp_path / "box")
    assert outcome.stdout_bytes > 10_000_000
    assert len(outcome.stdout_tail) <= 1001
    assert outcome.stdout_tail.rstrip().endswith("199999")
