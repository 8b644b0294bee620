"""Where untrusted code runs: boxed child processes, warm workers, their lifecycle, scratch folders and the in-box guard."""
