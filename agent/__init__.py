"""The agent: LangGraph graph, state and nodes, LLM providers, spec parsing, search policy."""
