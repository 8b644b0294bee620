"""What is being solved: the KernelBench problem format, the catalog, sizes, input distributions, tolerances and policies."""
