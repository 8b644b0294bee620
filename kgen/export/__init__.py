"""`kgen export`: a verified kernel leaves kgen as an installable package of PyTorch custom ops.

``sources.py`` finds what a run or a kernel file holds and whether it was verified;
``problem_signature.py`` reads the problem as an op (arguments, dtypes, layouts, outputs);
``package.py`` writes the package, whose runtime is ``op_runtime.py`` copied verbatim and
whose ``manifest.json`` is ``manifest.py``'s model.
"""
