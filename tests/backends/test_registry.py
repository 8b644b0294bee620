"""The backend registry: lookups, request words, requirements, targets, and the proof that it is
the one list of backends (a third entry reaches the request parser, the knowledge base and the
prompts with no other edit)."""

from __future__ import annotations

import importlib.util

import jinja2
import pytest

from kgen.backends import registry
from kgen.backends.registry import (
    DEFAULT_BACKEND,
    BackendInfo,
    UnknownBackendError,
    all_kernel_decorators,
    backend_for_word,
    backend_info,
    backend_words,
    get_backend,
    known_backends,
    missing_requirement,
    target_problem,
)
from kgen.backends.targets import DEFAULT_TARGET, all_targets, resolve_target
from kgen.backends.triton import TritonBackend


def _clear_caches() -> None:
    """Every cache built from the registry's entries."""
    from kgen.agent.llm import templates
    from kgen.knowledge_base import embedding

    registry._factory.cache_clear()
    embedding._backend_synonyms.cache_clear()
    embedding._decorator_words.cache_clear()
    templates._environment.cache_clear()


# ----------------------------------------------------------------------------------------
# Lookups and words
# ----------------------------------------------------------------------------------------


def test_known_backends_and_default():
    assert known_backends() == ["cute", "triton"]
    assert DEFAULT_BACKEND in known_backends()
    assert [b.name for b in registry.all_backend_info()] == known_backends()
    assert backend_info("Triton").label == "Triton"
    assert backend_info(" cute ").label == "CuTe DSL"
    assert get_backend("triton").name == "triton"


@pytest.mark.parametrize(
    ("word", "name"),
    [("CuTe DSL", "cute"), ("cute  dsl", "cute"), ("cutlass", "cute"), ("CuTeDSL", "cute"),
     ("cute-dsl", "cute"), ("Triton", "triton"), ("cuda", None), ("", None)],
)
def test_backend_for_word(word, name):
    assert backend_for_word(word) == name


def test_backend_words_cover_names_and_spellings():
    words = backend_words()
    assert words["triton"] == "triton" and words["cute"] == "cute"
    assert words["cutlass"] == "cute" and words["cute dsl"] == "cute"


def test_unknown_backend_lists_known_ones():
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'pallas'; known backends: cute, triton"):
        backend_info("pallas")
    with pytest.raises(UnknownBackendError, match="known backends: cute, triton"):
        get_backend("cuda")


def test_kernel_decorators_are_every_backends():
    decorators = all_kernel_decorators()
    assert {"triton.jit", "cutlass.cute.kernel", "cutlass.cute.jit"} <= decorators


# ----------------------------------------------------------------------------------------
# Requirements and targets
# ----------------------------------------------------------------------------------------

FAKE = BackendInfo(
    name="fakebackend", label="Fake DSL", words=("fakebackend", "fake dsl"),
    factory="kgen.backends.triton:TritonBackend", requires=("kgen_made_up_toolchain",),
    install="pip install kgen-made-up-toolchain", kernel_decorators=("fakedsl.kernel",),
    candidate_imports=("fakedsl",), runs_on_cpu=False, vendors=("nvidia",), min_nvidia_arch=90,
)


def test_missing_requirement_names_the_install_command(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", (*registry._BACKENDS, FAKE))
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "kgen_made_up_toolchain":
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    message = missing_requirement("fakebackend")
    assert message == ("the Fake DSL backend needs kgen_made_up_toolchain, which is not installed: "
                       "pip install kgen-made-up-toolchain")
    assert missing_requirement("triton") is None


def test_missing_requirement_of_an_unknown_backend_raises():
    with pytest.raises(UnknownBackendError):
        missing_requirement("pallas")


def test_cute_is_refused_for_amd_and_names_the_targets_it_can_use():
    message = target_problem("cute", resolve_target("mi300x"))
    assert message is not None
    assert message.startswith("the CuTe DSL backend does not compile for mi300x (AMD); targets it can use: ")
    usable = message.rsplit(": ", 1)[1].split(", ")
    assert "h100" in usable and "a100" in usable and "mi300x" not in usable
    assert target_problem("cute", resolve_target("h100")) is None
    assert target_problem("cute", resolve_target("a100")) is None


def test_triton_compiles_for_every_target():
    assert all(target_problem("triton", t) is None for t in all_targets())


def test_min_nvidia_arch_refuses_older_gpus(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", (*registry._BACKENDS, FAKE))
    message = target_problem("fakebackend", resolve_target("a100"))
    assert message is not None and "compute capability 80; it needs 90 or newer" in message
    assert target_problem("fakebackend", resolve_target("h100")) is None


def test_default_target_is_a_known_target():
    assert resolve_target(DEFAULT_TARGET).name == DEFAULT_TARGET


# ----------------------------------------------------------------------------------------
# One source: a third backend needs only its registry entry (and its prompt file)
# ----------------------------------------------------------------------------------------


class PallasBackend(TritonBackend):
    """A stand-in implementation: the registry only needs something to import by name."""

    name = "pallas"


PALLAS = BackendInfo(
    name="pallas", label="Pallas", words=("pallas", "jax pallas"),
    factory=f"{__name__}:PallasBackend", requires=("jax",), install="pip install jax",
    kernel_decorators=("jax.experimental.pallas.kernel",), candidate_imports=("jax", "jax.experimental.pallas"),
    runs_on_cpu=True, vendors=("nvidia", "amd"),
)


@pytest.fixture
def with_pallas(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", tuple(sorted((*registry._BACKENDS, PALLAS), key=lambda b: b.name)))
    _clear_caches()
    yield
    monkeypatch.undo()
    _clear_caches()


def test_a_registered_backend_is_read_from_requests(with_pallas):
    from kgen.agent.spec.catalog_matcher import parse_request
    from kgen.agent.spec.kernel_spec import KernelSpec

    spec = parse_request("Pallas softmax for H100")
    assert (spec.problem, spec.backend, spec.targets) == ("softmax", "pallas", ["h100"])
    assert parse_request("jax pallas softmax for h100").backend == "pallas"
    assert isinstance(get_backend("pallas"), PallasBackend)
    assert KernelSpec(request="r", problem="softmax", operation="s", backend="Pallas", targets=["h100"],
                      source="matcher").backend == "pallas"


def test_the_spec_validator_uses_the_registry(with_pallas):
    from pydantic import ValidationError

    from kgen.agent.spec.kernel_spec import KernelSpec

    with pytest.raises(ValidationError, match="unknown backend 'cuda'; known backends: cute, pallas, triton"):
        KernelSpec(request="r", problem="softmax", operation="s", backend="cuda", targets=["h100"], source="matcher")


def test_a_registered_backend_reaches_the_knowledge_base(with_pallas):
    from kgen.knowledge_base.embedding import tokenize
    from kgen.knowledge_base.retrieval import search_kernels

    assert tokenize("Pallas softmax") == ["pallas", "softmax"]

    class RecordingKb:
        asked: list[str] = []

        def kernel_summaries_near(self, text, n):
            return []

        def best_kernel_summaries(self, problem, backends, text):
            self.asked = list(backends)
            return []

        def kernels_by_id(self, ids):
            return []

    kb = RecordingKb()
    assert search_kernels(kb, "softmax", problem="softmax") == []
    assert kb.asked == ["cute", "pallas", "triton"]


def test_a_registered_backend_gets_prompts_from_its_own_file(with_pallas, monkeypatch, tmp_path):
    from kgen.agent.llm import templates
    from kgen.agent.llm.prompt_context import render_system
    from kgen.prompts import PROMPTS_DIR

    with pytest.raises(jinja2.TemplateNotFound, match="backend_pallas.j2"):
        render_system("pallas")
    (tmp_path / "backend_pallas.j2").write_text("- Pallas kernels are `pl.pallas_call`s.\n")

    def environment():
        env = jinja2.Environment(
            loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(tmp_path)), jinja2.FileSystemLoader(str(PROMPTS_DIR))]),
            undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        )
        env.globals["backend_label"] = templates.backend_label
        return env

    monkeypatch.setattr(templates, "_environment", environment)
    text = render_system("pallas")
    assert "You write Pallas kernels" in text
    assert "## Pallas\n\n- Pallas kernels are `pl.pallas_call`s.\n\n## How to answer" in text
    assert "`jax`, `jax.experimental.pallas` and pure helpers" in text


def test_unknown_backend_has_no_system_prompt():
    from kgen.agent.llm.prompt_context import render_system

    with pytest.raises(ValueError, match="known backends: cute, triton"):
        render_system("pallas")
