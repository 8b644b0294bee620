"""The verifier's child process: its entry point and one module per stage."""
