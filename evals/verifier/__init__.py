"""The verifier's child process: its entry point, the context its stages share, one module per stage, and the trials and checks the stages run."""
