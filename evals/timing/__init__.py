"""Measured speed: GPU timing, baselines and their cache, deferred-work detection, speed-of-light."""
