"""An exact fp32 scatter (one add per token, in random and in sequential order) of the fused
embedding + RMSNorm backward on repeated-id inputs, judged by kgen's compare_output against fp64:
it fails the elementwise bound in most orders. Run on a CPU: python docs/gpu_runs/library/fp32_scatter_against_the_bound.py"""
import torch
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.evals.checks.compare import compare_output
p = load_problem(resolve_problem("fused_embedding_rmsnorm_backward").path)
torch.manual_seed(1)
grad_out, ids, emb, nw, rstd = p.get_inputs()
ids = torch.full_like(ids, int(ids[0]))  # repeated_id: every token on one id
rstd = torch.rsqrt(emb[ids].float().pow(2).mean(-1) + 1e-6)
ref64 = p.model_class()(grad_out.double(), ids, emb.double(), nw.double(), rstd.double())
def kernel_like(order, fp32_partials=1):
    g, w = grad_out.float(), nw.float()
    x = emb[ids].float(); r = rstd.unsqueeze(-1)
    xh = x * r; gw = g * w
    gx = r * (gw - xh * (gw * xh).mean(-1, keepdim=True))
    table = torch.zeros(emb.shape, dtype=torch.float32)
    for t in order.tolist():  # one fp32 add per token, in this order (what atomics do)
        table[ids[t]] += gx[t]
    return table
import time
for trial in range(3):
    order = torch.randperm(ids.numel())
    t0 = time.time(); out = kernel_like(order)
    c = compare_output(0, out, ref64[0])
    print(trial, f"{time.time()-t0:.0f}s", "passed" if c.passed else "FAILED", c.mismatched_count, f"rel_l2 {c.rel_l2_error:.3g} max_abs {c.max_abs_error:.3g}")
seq = kernel_like(torch.arange(ids.numel()))
c = compare_output(0, seq, ref64[0]); print("sequential", c.passed, c.mismatched_count, c.max_abs_error)
