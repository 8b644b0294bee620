"""The agent: runs/ (start, resume, several backends, suites, summaries and reports) drive
search/ (the LangGraph graph, its typed state and nodes, the policy and archive), which asks
spec/ (request -> spec) and llm/ (models, recorded calls, prompts); candidates.py,
run_directory.py and run_options.py are the vocabulary they share."""
