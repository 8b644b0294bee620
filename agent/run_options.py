"""The options of one run, as saved in ``run.json`` so ``kgen resume`` continues the same run.

Keys are never part of them: providers read keys from the environment or the
config file when the run starts or resumes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kgen.settings import default_of

#: without a GPU, tuned variants cannot be ranked (no timings), so offline runs on a CPU
#: verify the known kernel and this many variants, once, instead of spending the budget
CPU_OFFLINE_VARIANTS = 2


class RunOptions(BaseModel):
    """A run's options. An option a person sets has its default declared once, on
    ``kgen.settings.Settings`` (``default_of``); the ones here are the run's own."""

    model_config = ConfigDict(extra="forbid")

    request: str
    problem_file: str | None = None
    models: list[str] = Field(default_factory=list)
    #: None: the backend the request names, else triton
    backend: str | None = None
    #: empty: the local GPU's target, else h100
    targets: list[str] = Field(default_factory=list)
    device: Literal["auto", "cpu", "cuda"] = default_of("device")
    budget: int = Field(default=default_of("budget"), ge=1)
    generations: int = Field(default=default_of("generations"), ge=1)
    time_s: float | None = Field(default=default_of("time_s"), gt=0)
    max_cost_usd: float | None = Field(default=default_of("max_cost_usd"), ge=0)
    kb: str | None = None
    kb_embedding: str | None = None
    eval_timeout_s: float = Field(default=default_of("eval_timeout_s"), gt=0)
    train_check: bool = default_of("train_check")
    #: seeds the search's random choices (mutation moves); verification always draws fresh seeds
    seed: int = 0
    #: write the winners to the knowledge base
    persist: bool = True
    #: one model call's deadline (every attempt included) and its retries of failed attempts
    llm_timeout_s: float = Field(default=default_of("llm_timeout_s"), gt=0)
    llm_retries: int = Field(default=default_of("llm_retries"), ge=0)

    @property
    def offline(self) -> bool:
        return not self.models


def local_target() -> str | None:
    """The kgen target of the local GPU, if there is one kgen knows."""
    import torch

    from kgen.backends.targets import UnknownTargetError, resolve_target

    if not torch.cuda.is_available():
        return None
    try:
        return resolve_target(torch.cuda.get_device_name()).name
    except UnknownTargetError:
        return None
