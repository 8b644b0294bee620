"""Prices follow the one "official endpoint" rule (ModelSpec.is_official_api), not "no URL"."""

from __future__ import annotations

import pytest

from kgen.agent.llm.models import parse_model
from kgen.agent.llm.usage import cost_usd, price_for


@pytest.mark.parametrize(("written", "bare"), [
    ("openai:gpt-5@https://api.openai.com/v1", "openai:gpt-5"),
    ("openai:gpt-4o-mini@https://api.openai.com", "openai:gpt-4o-mini"),
    ("openai:gpt-4o@https://api.openai.com:443/v1", "openai:gpt-4o"),
    ("anthropic:claude-sonnet-4-5@https://api.anthropic.com", "anthropic:claude-sonnet-4-5"),
])
def test_an_explicit_official_url_is_priced_like_the_bare_name(written, bare):
    spec = parse_model(written)
    assert spec.base_url is not None and spec.is_official_api
    assert price_for(spec) is not None and price_for(spec) == price_for(parse_model(bare))
    assert cost_usd(spec, 1_000_000, 0) == cost_usd(parse_model(bare), 1_000_000, 0)


@pytest.mark.parametrize("written", [
    "openai:gpt-5@http://api.openai.com/v1",  # plain http: not the provider's server
    "openai:gpt-5@https://api.openai.com:8443/v1",  # another port
    "openai:gpt-5@https://api.openai.com.example.net/v1",  # another host
    "anthropic:claude-sonnet-4-5@https://proxy.example.org",
])
def test_a_url_that_is_not_the_official_endpoint_gets_no_price(written):
    spec = parse_model(written)
    assert not spec.is_official_api
    assert price_for(spec) is None and cost_usd(spec, 1000, 1000) is None
