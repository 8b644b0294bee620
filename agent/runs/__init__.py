"""Runs as a person meets them: starting and resuming, several backends, suites, summaries and reports."""
