"""Talking to models: providers, recorded calls, usage and cost, structured output, code extraction, prompts."""
