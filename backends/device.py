"""Where candidates run: the CPU (Triton's interpreter, CuTe compiled only) or the GPU.

A person names a device as a word ("auto", "cpu" or "cuda": a flag, ``KGEN_DEVICE``, an API
argument). :func:`resolve_device` turns that word into a :class:`Device` once, at the start of
a run or an evaluation, asking torch whether a GPU is there; everything after it (the agent's
evaluation options, the verifier's request, the worker pool, the backends) is handed the
resolved value and asks it, never the word again.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal, get_args

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError

from kgen.errors import KgenUsageError

#: what a person may ask for (a flag, a setting); "auto" is a GPU when torch sees one, else the CPU
DeviceChoice = Literal["auto", "cpu", "cuda"]


class Device(str, Enum):
    """A resolved device. Its value is the word torch and kgen's JSON files use, so a
    result, a request and a saved run read the same as before there was a type."""

    CPU = "cpu"
    CUDA = "cuda"

    @property
    def is_gpu(self) -> bool:
        return self is Device.CUDA

    def __str__(self) -> str:
        return self.value


def _word_or_device(value: object) -> DeviceChoice | Device:
    """A resolved :class:`Device` as it is; anything else must be one of the words, and stays
    a word: "cuda" is only a device once :func:`resolve_device` has found the GPU."""
    if isinstance(value, Device):
        return value
    if value in get_args(DeviceChoice):
        return str(value)  # type: ignore[return-value]
    choices = get_args(DeviceChoice)
    raise PydanticCustomError(
        "literal_error", "Input should be {expected}",
        {"expected": ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"},
    )


#: a device as options carry it: the person's word until :func:`resolve_device` has checked it
#: on this machine, then the :class:`Device` itself, passed on without asking torch again
DeviceOption = Annotated[DeviceChoice | Device, PlainValidator(_word_or_device)]

def resolve_device(requested: DeviceChoice | Device = "auto") -> Device:
    """The device a person's word stands for on this machine; a device resolved before is
    returned as it is. "cuda" without a GPU that torch can see is a usage error."""
    if isinstance(requested, Device):
        return requested
    if requested not in ("auto", "cpu", "cuda"):
        raise KgenUsageError(f"unknown device {requested!r}: expected auto, cpu or cuda")
    if requested == "cpu":
        return Device.CPU
    import torch

    if torch.cuda.is_available():
        return Device.CUDA
    if requested == "cuda":
        raise KgenUsageError("--device cuda: no CUDA GPU is visible to torch on this machine")
    return Device.CPU
