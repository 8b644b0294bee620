"""Many problems at once: suite discovery, tables and charts, and the harness self-test."""
