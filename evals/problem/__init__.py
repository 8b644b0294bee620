"""What is being solved: the KernelBench problem format and reading a problem's outputs, the catalog, sizes, input distributions and their layout, tolerances and policies."""
