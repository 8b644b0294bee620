"""Measured speed: GPU timing and when it stops, the run's cache of device figures, deferred-work
detection, speed-of-light, the GPU's neighbours and identity."""
