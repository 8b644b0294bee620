"""`kgen train-check`: a tiny Llama trained stock and with kgen's kernels swapped in, curves compared.

One concern per module: the model (`model.py`), the token stream (`tokens.py`), the swaps
(`swaps.py`), the training loop (`loop.py`), the comparison (`compare.py`) and the result
(`report.py`); `run_check` in `check.py` puts them together.
"""
