"""Kernel backends (Triton, CuTe DSL) behind one protocol, and the hardware target registry."""
