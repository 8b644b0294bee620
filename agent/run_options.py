"""The options of one run, as saved in ``run.json`` so ``kgen resume`` continues the same run.

Keys are never part of them: providers read keys from the environment or the
config file when the run starts or resumes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, create_model

from kgen.backends.targets import UnknownTargetError, resolve_target
from kgen.core.option_table import OPTIONS, pydantic_fields

#: without a GPU, tuned variants cannot be ranked (no timings), so offline runs on a CPU
#: verify the known kernel and this many variants, once, instead of spending the budget
CPU_OFFLINE_VARIANTS = 2


class _RunOwnOptions(BaseModel):
    """The fields a run resolves for itself; every other field is an option the table
    (``kgen.core.option_table``) marks ``run="copied"``: same name, type, bounds and default."""

    model_config = ConfigDict(extra="forbid")

    request: str
    problem_file: str | None = None
    #: None: the backend the request names, else triton
    backend: str | None = None
    #: the knowledge base's location (a directory or a URL); None: $KGEN_HOME/kb
    kb: str | None = None
    kb_embedding: str | None = None

    @property
    def offline(self) -> bool:
        return not getattr(self, "models")  # noqa: B009 - a field of the derived class


class RunOptions(create_model("RunOptionFields", __base__=_RunOwnOptions, __module__=__name__,
                              **pydantic_fields(o for o in OPTIONS if o.run == "copied"))):
    """A run's options. Those a person sets are declared once, in ``kgen.core.option_table``; a
    ``run.json`` written before an option existed loads with that option's default."""


def local_target() -> str | None:
    """The kgen target of the local GPU, if there is one kgen knows."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return resolve_target(torch.cuda.get_device_name()).name
    except UnknownTargetError:
        return None
