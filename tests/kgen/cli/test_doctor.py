"""`kgen doctor` on this machine: what it finds, what it says a run will do, and no secrets."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models_list_server import ModelsListServer
from rich.console import Console

from kgen.cli.doctor import collect_diagnosis, render_diagnosis
from kgen.core.settings import load_settings

SECRET = "sk-test-Zq8vTopSecretValue"
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU plan")




def rendered(diagnosis) -> str:
    buffer = io.StringIO()
    render_diagnosis(diagnosis, Console(file=buffer, width=200))
    return buffer.getvalue()


def kgen(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("KGEN_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=120,
        env={**clean, "KGEN_HOME": str(home), "COLUMNS": "200", **env},
    )


@no_gpu
def test_without_gpu_or_model_doctor_says_offline_and_cpu_interpreter(home):
    d = collect_diagnosis(load_settings())
    assert not d.gpu.available and d.targets == ["h100"]
    assert d.plan[0].startswith("offline mode (no model configured)")
    assert any("Triton's CPU interpreter" in line and "cross-compiled for h100" in line for line in d.plan)
    assert d.packages["torch"] == torch.__version__ and d.provider_keys == {"openai": "no", "anthropic": "no"}
    text = rendered(d)
    assert "offline mode" in text and "none visible to torch" in text
    # an optional package kgen can use but this machine lacks is named as such (CI installs
    # every one the quick start names, so there may be none)
    assert ("not installed" in text) == any(version is None for version in d.packages.values())


@no_gpu
def test_configured_targets_and_cuda_without_gpu_are_reported(home):
    d = collect_diagnosis(load_settings({"targets": ["b200", "mi300x"], "device": "cuda"}))
    assert d.targets == ["b200", "mi300x"]
    assert any("no CUDA GPU" in issue for issue in d.issues)


def test_the_plan_names_the_policies_a_run_sets(home):
    assert not any("judged under" in line for line in collect_diagnosis(load_settings(), offline=True).plan)
    d = collect_diagnosis(load_settings({"torch_ops": "library"}), offline=True)
    assert "every candidate is judged under precision as each problem declares, torch ops library" in d.plan


def test_env_key_shows_as_yes_env_and_never_its_text(home, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    # offline: a test never sends a key to a real provider (endpoints: test_doctor_endpoints.py)
    d = collect_diagnosis(load_settings({"models": ["openai:gpt-5*2"]}), offline=True)
    assert d.provider_keys["openai"] == "yes (env)" and d.provider_keys["anthropic"] == "no"
    assert any("openai:gpt-5*2" in line for line in d.plan)
    assert not any("key" in issue for issue in d.issues)
    assert SECRET not in rendered(d) and SECRET not in d.model_dump_json()


def test_config_file_key_shows_as_yes_config(home):
    (home / "config.toml").write_text(f"anthropic_api_key = '{SECRET}'\n")
    d = collect_diagnosis(load_settings())
    assert d.provider_keys["anthropic"] == "yes (config)"
    assert SECRET not in rendered(d) and SECRET not in d.model_dump_json()


def test_a_hosted_model_without_key_is_an_issue_but_a_local_server_is_not(home):
    d = collect_diagnosis(load_settings({"models": [
        "anthropic:claude-sonnet-4-5", "openai:qwen2.5-coder@http://127.0.0.1:8000/v1",
    ]}), offline=True)
    key_issues = [issue for issue in d.issues if "API key" in issue]
    assert len(key_issues) == 1 and "ANTHROPIC_API_KEY" in key_issues[0]


def test_a_malformed_model_string_is_an_issue_naming_it(home):
    d = collect_diagnosis(load_settings({"models": ["gpt-5"]}))
    assert any("bad model 'gpt-5'" in issue for issue in d.issues)


def test_a_broken_cuda_probe_becomes_a_line_not_a_crash(home, monkeypatch):
    def broken() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    d = collect_diagnosis(load_settings())
    assert any("CUDA driver initialization failed" in issue for issue in d.issues)
    assert "CUDA driver initialization failed" in rendered(d)


def test_on_an_h100_the_plan_says_it_is_the_target_and_timings_are_measured(home, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    d = collect_diagnosis(load_settings())
    assert d.gpu.available and d.gpu.target == "h100" and d.targets == ["h100"]
    assert "GPU: NVIDIA H100 80GB HBM3 → target h100; kernels verified and timed on it" in d.plan
    on_cpu = collect_diagnosis(load_settings({"device": "cpu"}))
    assert any(line.startswith("device = cpu: kernels verified in Triton's CPU interpreter") for line in on_cpu.plan)


def test_doctor_does_not_create_the_knowledge_base(home):
    d = collect_diagnosis(load_settings())
    assert d.knowledge_base.location == str(home / "kb") and d.knowledge_base.exists is False
    assert not (home / "kb").exists()


def test_doctor_reports_the_knowledge_base_contents(home):
    store = pytest.importorskip("kgen.knowledge_base.store")
    store.KnowledgeBase.open(str(home / "kb"))
    d = collect_diagnosis(load_settings())
    assert d.knowledge_base.error is None and d.knowledge_base.mode == "embedded"
    assert isinstance(d.knowledge_base.kernels, int) and isinstance(d.knowledge_base.guidance, int)


# --------------------------------------------------------------------------------------
# `kgen doctor`
# --------------------------------------------------------------------------------------


@no_gpu
def test_kgen_doctor_prints_the_plan_and_no_key(home):
    out = kgen(home, "doctor", OPENAI_API_KEY=SECRET)
    assert out.returncode == 0, out.stderr
    assert "offline mode (no model configured)" in out.stdout and "CPU interpreter" in out.stdout
    assert "yes (env)" in out.stdout
    assert SECRET not in out.stdout + out.stderr


def test_kgen_doctor_json_is_the_diagnosis_without_the_key(home):
    # a loopback server, not the real API: doctor sends the key to the model's endpoint
    with ModelsListServer(models=["gpt-5"]) as server:
        model = f"openai:gpt-5@{server.openai_base_url}#OPENAI_API_KEY"
        out = kgen(home, "doctor", "--json", KGEN_MODELS=model, OPENAI_API_KEY=SECRET)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["models"] == [model] and data["provider_keys"]["openai"] == "yes (env)"
    assert data["endpoints"][0]["status"] == "ok" and data["unusable_models"] == []
    assert server.models_requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in out.stdout + out.stderr


def test_kgen_doctor_with_a_broken_config_exits_2_with_one_line(home):
    (home / "config.toml").write_text("budjet = 3\n")
    out = kgen(home, "doctor")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: {home / 'config.toml'}:1: unknown key 'budjet' (did you mean 'budget'?)"
    ]
