"""The training check (``kgen eval --train-check``): train with the candidate's gradient.

Why
---
A gradient kernel can match the reference within the verifier's tolerance on
the inputs it is shown and still train a model wrongly. The known case
(SOL-ExecBench's fused embedding-grad + RMSNorm backward) summed embedding
gradients in bf16. With uniform token ids every row collects a few
contributions and the error stays at bf16 rounding; real text is Zipf
distributed, so the rows of the hottest tokens collect hundreds to thousands
of contributions per step, and once a bf16 running sum is ~256x one
contribution, adding the next one no longer changes it. Those rows learn
from a gradient that is far too small and training drifts away from the
fp32 run. AdamW divides each step by the gradient's running RMS, which hides
a uniformly shrunk gradient again, so this check trains with plain SGD,
where the step is proportional to the gradient.

The model
---------
Everything in this file is the harness (trusted torch)::

    ids    ~ Zipf(vocab, 1.1) per token, hot ids spread by a random permutation
    target = teacher[id]                        a fixed random token->token map
    x      = emb_bf16[ids]                                  bf16 (N, dim)
    rstd   = rsqrt(mean(x^2) + eps)                         fp32 (N,)
    h      = (x * rstd * norm_w_bf16).bf16()                bf16 (N, dim)
    loss   = cross_entropy(h @ head, target)                fp32 head (dim, vocab)

``emb`` and ``norm_w`` are fp32 master weights with bf16 copies for the
forward, as mixed-precision training keeps them; the gradient of a bf16
activation is bf16 and parameter gradients are fp32. The head is a fixed
random readout (not trained): a trainable head learns the token map by itself
at these sizes and absorbs most of the embedding's gradient error, so with
it the loss hardly shows what the embedding learned. The loss can only fall
through the embedding and the norm weight, which is what is under test.

The head's backward, and the backward of whatever part the problem does not
cover, are explicit torch math. The covered part is computed by calling the
model under test with the problem's own input convention (``TRAINING_PROBLEMS``):

* ``embedding_backward``: ``model(grad_x_bf16, ids) -> grad_emb`` (fp32);
  grad_x from a torch RMSNorm backward.
* ``rmsnorm_backward``: ``model(grad_h, x, norm_w_bf16, rstd) -> (grad_x, grad_norm_w)``;
  grad_emb is then an fp32 ``index_add`` of grad_x here.
* ``fused_embedding_rmsnorm_backward``:
  ``model(grad_h, ids, emb_bf16, norm_w_bf16, rstd) -> (grad_emb, grad_norm_w)``.

The same training (same initial weights, same batches) runs twice: once with
the reference ``Model`` giving that gradient, once with the candidate's
``ModelNew``. Both loss curves are smoothed with a trailing mean over
``smooth`` steps and the check fails when the largest relative gap
``max_t |L_cand(t) - L_ref(t)| / L_ref(t)`` exceeds ``bound``.

Sizes
-----
The Triton CPU interpreter runs one kernel program in 1-3 ms (the seed
embedding kernel runs one program per token; the seed RMSNorm kernel costs
2-7 ms per row), so a CPU check can afford ~10 thousand candidate-processed
tokens. What exposes bf16 accumulation is the number of contributions a hot
row collects *in one call*, so the CPU configuration spends that budget on
few large batches rather than many small ones: 6 SGD steps of 2048 tokens
over 32 ids (the hottest collects ~600 contributions per call; vocab 32,
dim 64, lr 1), over which the loss falls from ~4 to ~1.4 (rmsnorm_backward:
256 tokens per step, as its kernel is the slow one and its gradient has no
hot rows). One CPU check takes ~7-30 s. On a GPU (``steps=None`` picks by
device) the batch is 16384 tokens over 8192 ids (the hottest collects
~2,500 contributions per call), dim 256, for 300 steps, smoothed over 5.

How the bound was chosen
------------------------
Largest relative loss gap (smooth=1) at ``TRAINING_PROBLEMS``' CPU sizes,
harness seeds 0 / 1 / 2, Triton kernels in the CPU interpreter (TRITON_INTERPRET=1):

=====================================================  ==========================
gradient                                               gap, seeds 0 / 1 / 2
=====================================================  ==========================
reference Model vs itself (all three problems)         0 / 0 / 0
seed Triton embedding_backward (fp32 atomics)          0 / 0 / 0
seed Triton rmsnorm_backward (fp32 partials)           2.4e-3 / 1.8e-3 / 1.4e-3
bf16-accumulating embedding kernel (the fixture)       2.3e-1 / 2.7e-1 / 1.3e-1
same accumulation in torch, rounding to nearest even   7.3e-2 / 8.8e-2 / 4.0e-2
fused embedding+RMSNorm, bf16 accumulation (torch)     7.0e-2 / 8.5e-2 / 4.0e-2
=====================================================  ==========================

Over seeds 0-9, the round-to-nearest bf16 accumulation's smallest gap is
4.0e-2 and a torch emulation of the seed RMSNorm kernel's interpreter
rounding (below) has its largest at 2.4e-3. ``bound = 1e-2`` (a 1% loss gap)
sits ~4x above the worst correct kernel and ~4x below the mildest bf16
accumulation (13x below the fixture as the interpreter runs it).

A correct kernel differs from the reference only by fp32 summation order and
bf16 output rounding, and the forward's bf16 copy of the master weights
absorbs most of that: the embedding kernel's gap is exactly 0. The RMSNorm
seed kernel's is not, for a reason of the interpreter's own: Triton 3.9's
interpreter casts fp32 to bf16 by truncation (round toward zero; GPUs round
to nearest even, and ``fp_downcast_rounding="rtne"`` does not change it), so
under the interpreter its bf16 grad_x and grad_weight are ~2^-9 too small,
a uniform 0.2% shrink of the gradient. The same truncation makes the bf16
fixture worse under the interpreter than on a GPU (a truncating running sum
stalls at ~128 contributions instead of ~256), which is why the
round-to-nearest emulation is the row the bound is set against.

GPU sizes were not run on a GPU. A torch emulation of the first 60 of the
300 GPU steps on CPU (seed 0) gave 0 for an fp32 index_add in shuffled token
order (nondeterministic atomics) and 2.1e-1 for round-to-nearest bf16
accumulation (the loss 9.35 -> 4.87 over those steps); the curves meet again
later, as the hot rows eventually learn, which is why the check takes the
largest gap over the run rather than the final one.

What this check does not catch: errors a few times below the bound. An
RMSNorm backward accumulating grad_weight in bf16 gives gaps of ~5e-4 at the
CPU sizes (256 rows per step); the verifier's larger size sets catch that one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

from kgen.evals.problem.format import LoadedProblem, ProblemInfo, load_problem

Part = Literal["embedding", "rmsnorm", "fused"]


class TrainConfig(BaseModel):
    """Sizes and hyperparameters of one training run."""

    vocab: int
    dim: int
    tokens: int  # tokens per step (one batch, one call of the model under test)
    steps: int
    lr: float = 1.0
    emb_init_std: float = 0.3
    label_noise: float = 0.0  # fraction of targets replaced by a random Zipf token
    zipf_exponent: float = 1.1
    eps: float = 1e-6
    smooth: int = 1  # trailing-mean window over steps, applied to both curves
    bound: float = 1e-2  # largest relative loss gap a correct gradient may show


class TrainSpec(BaseModel):
    part: Part
    cpu: TrainConfig
    cuda: TrainConfig


_CPU_EMBEDDING = TrainConfig(vocab=32, dim=64, tokens=2048, steps=6)
_GPU = TrainConfig(vocab=8192, dim=256, tokens=16384, steps=300, smooth=5)

#: Problems this check can train, by catalog name: which part of the model the
#: problem's Model/ModelNew computes the backward of, and the run's sizes.
TRAINING_PROBLEMS: dict[str, TrainSpec] = {
    "embedding_backward": TrainSpec(part="embedding", cpu=_CPU_EMBEDDING, cuda=_GPU),
    # the seed RMSNorm kernel costs ~3 ms per row in the interpreter: smaller batches
    "rmsnorm_backward": TrainSpec(
        part="rmsnorm", cpu=_CPU_EMBEDDING.model_copy(update={"tokens": 256}), cuda=_GPU
    ),
    "fused_embedding_rmsnorm_backward": TrainSpec(part="fused", cpu=_CPU_EMBEDDING, cuda=_GPU),
}


class TrainCheckResult(BaseModel):
    applicable: bool
    passed: bool
    message: str
    steps: int = 0
    bound: float = 0.0
    reference_losses: list[float] = Field(default_factory=list)
    candidate_losses: list[float] = Field(default_factory=list)
    max_relative_gap: float = 0.0
    worst_step: int = -1
    seed: int = 0
    seconds: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict)


def training_spec(name: str) -> TrainSpec | None:
    return TRAINING_PROBLEMS.get(name)


def default_config(name: str, device: torch.device | str) -> TrainConfig | None:
    """The problem's training sizes on this device: small for the CPU interpreter, real on a GPU."""
    spec = training_spec(name)
    if spec is None:
        return None
    return spec.cuda if torch.device(device).type == "cuda" else spec.cpu


def train_check_sizes(info: ProblemInfo, device: torch.device | str) -> dict[str, int] | None:
    """Size constants to load the problem at for the check (None: no training check).

    Only the vocabulary is baked into a model at construction (embedding_backward's
    ``Model(num_embeddings)``); the other sizes follow the tensors the harness
    passes. Loading at these sizes makes ``get_init_inputs()`` fit the training model.
    """
    cfg = default_config(info.name, device)
    if cfg is None:
        return None
    wanted = {"VOCAB": cfg.vocab, "DIM": cfg.dim, "N_TOKENS": cfg.tokens, "ROWS": cfg.tokens, "HIDDEN": cfg.dim}
    return {k: v for k, v in wanted.items() if k in info.sizes}


def load_train_problem(info: ProblemInfo, device: torch.device | str) -> LoadedProblem | None:
    """The problem loaded at ``train_check_sizes``: build Model and ModelNew from its init inputs."""
    sizes = train_check_sizes(info, device)
    return None if sizes is None else load_problem(info.path, sizes)


# -- data and initial weights -------------------------------------------------------------------


def _zipf(n: int, probs: torch.Tensor, perm: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return perm[torch.multinomial(probs, n, replacement=True, generator=gen)]


def _make_data(cfg: TrainConfig, seed: int):
    gen = torch.Generator().manual_seed(seed)
    probs = torch.arange(1, cfg.vocab + 1, dtype=torch.float64).pow(-cfg.zipf_exponent)
    perm = torch.randperm(cfg.vocab, generator=gen)
    teacher = torch.randperm(cfg.vocab, generator=gen)
    n = cfg.steps * cfg.tokens
    ids = _zipf(n, probs, perm, gen)
    targets = teacher[ids]
    if cfg.label_noise > 0:
        noisy = torch.rand(n, generator=gen) < cfg.label_noise
        targets = torch.where(noisy, _zipf(n, probs, perm, gen), targets)
    emb = cfg.emb_init_std * torch.randn(cfg.vocab, cfg.dim, generator=gen)
    norm_w = 1.0 + 0.1 * torch.randn(cfg.dim, generator=gen)
    head = torch.randn(cfg.dim, cfg.vocab, generator=gen) / math.sqrt(cfg.dim)
    shape = (cfg.steps, cfg.tokens)
    return ids.view(shape), targets.view(shape), (emb, norm_w, head)


# -- the training loop ----------------------------------------------------------------------------


class CandidateFailure(Exception):
    """The model under test raised or returned something unusable during training."""


def _rmsnorm_backward(grad_h, x, w, rstd):
    g, xf, wf = grad_h.float(), x.float(), w.float()
    r = rstd.unsqueeze(-1)
    x_hat = xf * r
    gw = g * wf
    grad_x = r * (gw - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True))
    return grad_x, (g * x_hat).sum(dim=0)


def _outputs(value: Any, count: int, where: str) -> list[torch.Tensor]:
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(items) != count or not all(isinstance(t, torch.Tensor) for t in items):
        raise CandidateFailure(f"forward returned {len(items)} value(s) {where}, expected {count} tensor(s)")
    return items


def _checked(t: torch.Tensor, shape: tuple[int, ...], name: str, where: str) -> torch.Tensor:
    if tuple(t.shape) != shape:
        raise CandidateFailure(f"{name} has shape {tuple(t.shape)} {where}, expected {shape}")
    t = t.float()
    if not bool(torch.isfinite(t).all()):
        raise CandidateFailure(f"{name} has NaN/Inf values {where}")
    return t


def _covered_backward(part: Part, model: Callable[..., Any], grad_h, x, ids, emb_b, w_b, rstd, cfg, where):
    """grad_emb and grad_norm_w (fp32), the problem's part computed by ``model``."""
    n, vocab, dim = ids.shape[0], cfg.vocab, cfg.dim
    if part == "embedding":
        grad_x, grad_w = _rmsnorm_backward(grad_h, x, w_b, rstd)
        (out,) = _outputs(model(grad_x.to(torch.bfloat16), ids.clone()), 1, where)
        return _checked(out, (vocab, dim), "grad_weight", where), grad_w
    if part == "rmsnorm":
        out_x, out_w = _outputs(model(grad_h.clone(), x.clone(), w_b.clone(), rstd.clone()), 2, where)
        grad_x = _checked(out_x, (n, dim), "grad_x", where)
        grad_w = _checked(out_w, (dim,), "grad_weight", where)
        return torch.zeros(vocab, dim, device=x.device).index_add_(0, ids, grad_x), grad_w
    out_e, out_w = _outputs(model(grad_h.clone(), ids.clone(), emb_b.clone(), w_b.clone(), rstd.clone()), 2, where)
    return _checked(out_e, (vocab, dim), "grad_emb_weight", where), _checked(out_w, (dim,), "grad_norm_weight", where)


def _train(part: Part, model: Callable[..., Any], cfg: TrainConfig, data, device: torch.device) -> list[float]:
    ids_all, targets_all, init = data
    emb, norm_w, head = (p.to(device, copy=True) for p in init)
    losses: list[float] = []
    for step in range(cfg.steps):
        ids, targets = ids_all[step].to(device), targets_all[step].to(device)
        n = ids.shape[0]
        emb_b, w_b = emb.to(torch.bfloat16), norm_w.to(torch.bfloat16)
        x = emb_b[ids]
        rstd = torch.rsqrt(x.float().pow(2).mean(dim=-1) + cfg.eps)
        h = (x.float() * rstd.unsqueeze(-1) * w_b.float()).to(torch.bfloat16)
        logits = h.float() @ head
        losses.append(float(torch.nn.functional.cross_entropy(logits, targets)))
        grad_logits = torch.softmax(logits, dim=-1)
        grad_logits[torch.arange(n, device=device), targets] -= 1.0
        grad_logits /= n
        grad_h = (grad_logits @ head.T).to(torch.bfloat16)
        where = f"at training step {step}"
        try:
            grad_emb, grad_w = _covered_backward(part, model, grad_h, x, ids, emb_b, w_b, rstd, cfg, where)
        except CandidateFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - untrusted code
            text = str(exc).strip().splitlines()
            raise CandidateFailure(
                f"forward raised {type(exc).__name__} {where}: {text[0] if text else ''}".rstrip(": ")
            ) from exc
        emb -= cfg.lr * grad_emb
        norm_w -= cfg.lr * grad_w
    return losses


def _smoothed(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def loss_gap(reference: list[float], candidate: list[float], window: int = 1) -> tuple[float, int]:
    """Largest relative gap of the smoothed curves, and the step where it is."""
    ref, cand = _smoothed(reference, window), _smoothed(candidate, window)
    gaps = [abs(c - r) / abs(r) if math.isfinite(c) else math.inf for r, c in zip(ref, cand, strict=True)]
    if not gaps:
        return 0.0, -1
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[worst], worst


def train_check(
    problem: LoadedProblem | ProblemInfo,
    candidate_model: Callable[..., Any],
    reference_model: Callable[..., Any],
    device: torch.device | str,
    *,
    steps: int | None = None,
    seed: int = 0,
    config: TrainConfig | None = None,
) -> TrainCheckResult:
    """Train the same model twice, with the reference's and with the candidate's gradient.

    ``problem``: the problem the models come from. For problems whose models are
    built for a vocabulary (embedding_backward), pass the ``LoadedProblem`` they
    were built from, best ``load_train_problem(info, device)``: its ``VOCAB`` is
    used. ``steps=None``: the device's default; ``config`` overrides the sizes.
    Exceptions and unusable outputs of the candidate fail the check; the
    reference is trusted.
    """
    started = time.monotonic()
    info = problem.info if isinstance(problem, LoadedProblem) else problem
    device = torch.device(device)
    spec = training_spec(info.name)
    if spec is None:
        return TrainCheckResult(
            applicable=False,
            passed=True,
            message=f"no training check for {info.name} ({info.kind} problem): "
            f"only {', '.join(sorted(TRAINING_PROBLEMS))} have a training model",
            seed=seed,
        )
    cfg = (config or default_config(info.name, device)).model_copy()
    if isinstance(problem, LoadedProblem) and "VOCAB" in problem.sizes:
        cfg.vocab = problem.sizes["VOCAB"]  # the models were built for this vocabulary
    if steps is not None:
        cfg.steps = steps
    data = _make_data(cfg, seed)

    def result(passed: bool, message: str, ref: list[float], cand: list[float], gap: float, worst: int):
        return TrainCheckResult(
            applicable=True,
            passed=passed,
            message=message,
            steps=cfg.steps,
            bound=cfg.bound,
            reference_losses=ref,
            candidate_losses=cand,
            max_relative_gap=gap,
            worst_step=worst,
            seed=seed,
            seconds=time.monotonic() - started,
            config=cfg.model_dump(),
        )

    with torch.no_grad():
        try:
            reference_losses = _train(spec.part, reference_model, cfg, data, device)
        except CandidateFailure as exc:  # the harness was handed mismatched models
            raise ValueError(
                f"the reference model fails the training harness ({exc}); build both models "
                f"from load_train_problem(info, device).get_init_inputs()"
            ) from exc
        try:
            candidate_losses = _train(spec.part, candidate_model, cfg, data, device)
        except CandidateFailure as exc:
            return result(False, f"training check failed: {exc}", reference_losses, [], math.inf, -1)
    gap, worst = loss_gap(reference_losses, candidate_losses, cfg.smooth)
    summary = (
        f"{cfg.steps} SGD steps of {cfg.tokens} Zipf tokens (vocab {cfg.vocab}, dim {cfg.dim}, "
        f"seed {seed}): reference loss {reference_losses[0]:.3f} -> {reference_losses[-1]:.3f}, "
        f"candidate -> {candidate_losses[-1]:.3f}; largest relative loss gap {gap:.2e} "
        f"at step {worst} (bound {cfg.bound:.0e})"
    )
    if not gap <= cfg.bound:  # also catches NaN
        return result(
            False,
            f"training divergence: training with the candidate's gradient drifts away from "
            f"training with the reference's ({summary}); low-precision (bf16) accumulation "
            f"of a gradient that sums many contributions does this",
            reference_losses,
            candidate_losses,
            gap,
            worst,
        )
    return result(True, f"training matches the reference: {summary}", reference_losses, candidate_losses, gap, worst)


def run_train_check(
    info: ProblemInfo,
    model_new: type,
    device: torch.device | str,
    *,
    steps: int | None = None,
    seed: int = 0,
) -> TrainCheckResult:
    """Load the problem at the training sizes, build both models, run the check."""
    problem = load_train_problem(info, device)
    if problem is None:
        return train_check(info, torch.nn.Identity(), torch.nn.Identity(), device, steps=steps, seed=seed)
    device = torch.device(device)
    init = problem.get_init_inputs()
    reference = problem.model_class(*init).to(device)
    try:
        candidate = model_new(*init)
        if isinstance(candidate, torch.nn.Module):
            candidate = candidate.to(device)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        return TrainCheckResult(
            applicable=True,
            passed=False,
            message=f"training check failed: ModelNew(*init_inputs) raised {type(exc).__name__}: {exc}",
            seed=seed,
        )
    return train_check(problem, candidate, reference, device, steps=steps, seed=seed)
