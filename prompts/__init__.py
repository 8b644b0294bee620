"""Prompt templates, kept as Jinja text files beside this module rather than strings in code."""

from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent
