"""Every model call of a run goes through one path: counted, saved, and paid for once.

A run's cost limit (``--max-cost``) and its ``usage.json`` are only as good as the count of
its calls, and an audit of a run is only as good as the prompts and replies kept in its
directory. When each caller did its own bookkeeping, one forgot: the call that writes a
reference problem for an operation outside the catalog was neither counted nor saved. So
the spec reading, the reference problem and every candidate ask through
:class:`RecordedClient`, which counts each completion in a :class:`UsageLedger` and writes
its prompt, reply and usage into the run directory before handing the reply back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kgen.agent.usage import UsageLedger

if TYPE_CHECKING:
    from kgen.agent.providers import Completion, LLMClient
    from kgen.agent.run_directory import RunDirectory


def call_files(n: int) -> tuple[str, str, str]:
    """(prompt, reply, usage) file names of call ``n`` (from 1) in a folder: ``prompt.md``,
    ``reply.md``, ``usage.json`` for the first, ``prompt_2.md``, ... after it (a spec reading's
    repair request, a reference problem's second attempt)."""
    suffix = "" if n == 1 else f"_{n}"
    return f"prompt{suffix}.md", f"reply{suffix}.md", f"usage{suffix}.json"


def prompt_text(system: str, user: str) -> str:
    return f"# system\n\n{system}\n\n# user\n\n{user}"


class RecordedClient:
    """An ``LLMClient`` stand-in (``label``, ``complete``) that counts and saves every call.

    Call n writes its prompt before asking (so a call that fails still shows what was
    asked), then its usage (the completion, text included) and its reply, under ``folder`` of
    the run directory. When that call's reply is already on disk, the model is not asked
    again: a step that re-runs on resume was cut short before its state (and its usage) was
    checkpointed, so the saved completion is reused *and* counted — paid once, counted once.

    ``connect`` makes the real client only when a call must really be made, so reusing a
    saved reply needs no key or server.
    """

    def __init__(self, label: str, connect: Callable[[], LLMClient], run: RunDirectory, folder: str,
                 ledger: UsageLedger | None = None) -> None:
        self.label = label
        self.ledger = ledger if ledger is not None else UsageLedger()
        self._connect = connect
        self._run = run
        self._folder = folder.rstrip("/")
        self._calls = 0
        self._lock = threading.Lock()

    def complete(self, system: str, user: str, *, max_tokens: int, temperature: float) -> Completion:
        with self._lock:
            self._calls += 1
            n = self._calls
        prompt_name, reply_name, usage_name = (f"{self._folder}/{name}" for name in call_files(n))
        saved = self._saved(reply_name, usage_name)
        if saved is not None:
            return saved
        self._run.write(prompt_name, prompt_text(system, user))
        completion = self._connect().complete(system, user, max_tokens=max_tokens, temperature=temperature)
        self.ledger.add(completion)
        self._run.write(usage_name, completion.model_dump_json(indent=1))  # before the reply: see _saved
        self._run.write(reply_name, completion.text)
        return completion

    def _saved(self, reply_name: str, usage_name: str) -> Completion | None:
        """The completion saved for this call, counted; None when the call was never answered.

        The reply is written last, so a reply on disk means its usage is too; a run directory
        from before usage was saved per call has the reply only, reused but not counted.
        """
        from kgen.agent.providers import Completion

        reply = self._run.file(reply_name)
        if not reply.is_file():
            return None
        text = reply.read_text()
        try:
            completion = Completion.model_validate_json(self._run.file(usage_name).read_text())
        except (OSError, ValidationError):
            return Completion(text=text, model=self.label, input_tokens=0, output_tokens=0,
                              cost_usd=None, seconds=0.0, finish_reason=None)
        self.ledger.add(completion)
        return completion.model_copy(update={"text": text})
