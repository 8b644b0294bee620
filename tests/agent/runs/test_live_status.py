"""The live status line while models think: its clock moves and it names the model being
waited on, for which candidates, and for how long of how long, with no event to push it.

Real calls through the real SDKs to a loopback server that never answers feed the display;
the clock is the test's (a fake one, to step time without waiting) or Rich's own refresh.
"""

from __future__ import annotations

import io
import re
import threading
import time

import pytest
from llm_server import Reply
from rich.console import Console

from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import ProviderError, make_client
from kgen.cli.display import RunStatusLine
from kgen.cli.run import LiveProgress


def _waiting_call(llm_server, purpose: str, timeout_s: float):
    """A call to the silent server in a thread, once it is on the board of calls in flight."""
    from kgen.agent.llm.model_calls import calls_in_flight

    llm = make_client(parse_model(f"openai:gpt-test@{llm_server.openai_base_url}#OPENAI_API_KEY"),
                      api_key="sk-test", timeout_s=timeout_s, max_retries=0)

    def ask() -> None:
        with pytest.raises(ProviderError):
            llm.complete("s", "u", max_tokens=5, temperature=0, purpose=purpose)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any(c.purpose == purpose for c in calls_in_flight()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread


def test_the_status_line_clock_and_wait_advance_while_a_model_call_waits(llm_server):
    llm_server.respond_with("openai", lambda request: Reply.silent())
    thread = _waiting_call(llm_server, "g0-c01", timeout_s=3)
    offset = [0.0]
    line = RunStatusLine(clock=lambda: time.monotonic() + offset[0])
    line.event("generation 0: 2 candidate(s) (generate)")
    before = line.text()
    offset[0] = 125.0  # no event in between: only the clock moves
    after = line.text()
    host = f"127.0.0.1:{llm_server.port}"
    assert before.startswith("0 s · generation 0: 2 candidate(s) (generate)"), before
    assert f"waiting on openai:gpt-test@{host} for g0-c01: 0 s of 3 s (deadline)" in before
    assert after.startswith("2 m 05 s · generation 0"), after
    assert f"waiting on openai:gpt-test@{host} for g0-c01: 2 m 05 s of 3 s" in after
    assert "OPENAI_API_KEY" not in after  # the label's key variable is not the status line's
    thread.join(10)
    offset[0] = 0.0
    assert "waiting on" not in line.text()  # the call ended: off the board


def test_the_live_spinner_redraws_the_clock_and_the_wait_without_new_events(llm_server):
    """Rich's own refresh draws the line again and again while the model is silent: the
    frames show the wait growing, 0 s, 1 s, 2 s, with no progress line in between."""
    llm_server.respond_with("openai", lambda request: Reply.silent())
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, width=250, color_system=None)
    with LiveProgress(console) as progress:
        progress("generation 0: 1 candidate(s) (generate)")
        _waiting_call(llm_server, "g0-c01", timeout_s=2.6).join(10)
    text = output.getvalue()
    waits = set(re.findall(r"waiting on openai:gpt-test@[\d.:]+ for g0-c01: (\d) s of 2 s", text))
    assert {"0", "1", "2"} <= waits, text[-2000:]
    clocks = set(re.findall(r"(\d) s · generation 0: 1 candidate", text))
    assert {"0", "1", "2"} <= clocks, text[-2000:]
