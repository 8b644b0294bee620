"""The search: the LangGraph graph and its nodes, the policy, the archive, operators, mutation and sweeps."""
