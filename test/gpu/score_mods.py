"""PyTorch references of the score_mods in test/gpu/score_mods.mlir: the one
place the GPU tests (test_score_mod.py, test_every_kernel.py) and the
benchmark (bench/bench.py --score-mod) take them from. Keep the two files in
step.

Each function has FlexAttention's score_mod signature, score_mod(score, b, h,
q_idx, kv_idx) -> score, with `score` the score after the scale and the
indices integer tensors, so the same function is

- the float64 reference (score float64) and the same math in the inputs'
  precision (score float16 / bfloat16), applied to whole [B, H, Nq, Nk] score
  tensors with broadcast indices (apply());
- FlexAttention's score_mod (score float32, scalar index tensors under vmap).

Index arithmetic is done on the integers and converted to the score's dtype
afterwards (as the kernels do in float32), so a low-precision reference does
not round positions such as q_idx = 1001 before taking a distance.
"""
import torch


def softcap30(score, b, h, q_idx, kv_idx):
    """30·tanh(s/30)."""
    return 30 * torch.tanh(score / 30)


def alibi16(score, b, h, q_idx, kv_idx):
    """s - slope_h·|q - kv|, slope_h = 2^(-8(h+1)/16)."""
    slope = torch.exp2(-0.5 * (h + 1).to(score.dtype))
    return score - slope * (q_idx - kv_idx).abs().to(score.dtype)


def relbias(score, b, h, q_idx, kv_idx):
    """s + 0.5·tanh(0.05·(q - kv))."""
    return score + 0.5 * torch.tanh(0.05 * (q_idx - kv_idx).to(score.dtype))


def clamp(score, b, h, q_idx, kv_idx):
    """max(s, -1.5) up to 2, then 2 + 0.1·(s - 2)."""
    return torch.where(score > 2, 2 + 0.1 * (score - 2), score.clamp(min=-1.5))


SCORE_MODS = {f.__name__: f for f in (softcap30, alibi16, relbias, clamp)}


def get(name):
    """The reference of score_mod `name` (a random program rnd<seed>_<i> of
    random_score_mods.py is rebuilt from its name); KeyError names the known
    ones."""
    import random_score_mods
    try:
        return SCORE_MODS.get(name) or SCORE_MODS.setdefault(
            name, random_score_mods.lookup(name) or SCORE_MODS[name])
    except KeyError:
        raise KeyError("no reference for score_mod %r (test/gpu/score_mods.py has %s)" %
                       (name, ", ".join(sorted(SCORE_MODS)))) from None


def known(name):
    """Whether `name` has a reference (a named one or a random program)."""
    try:
        get(name)
        return True
    except KeyError:
        return False


def apply(name, s):
    """score_mod `name` (None: none) applied to scores s [B, H, Nq, Nk], each
    with its (b, h, q, kv) indices; in s's dtype, differentiable."""
    if name is None:
        return s
    bsz, heads, nq, nk = s.shape
    idx = lambda n, dim: torch.arange(n, device=s.device).view(  # noqa: E731
        [n if i == dim else 1 for i in range(4)])
    return get(name)(s, idx(bsz, 0), idx(heads, 1), idx(nq, 2), idx(nk, 3))


def derivative(name, s):
    """d score_mod / d score at s (float64 tensor of [B, H, Nq, Nk]); ones for
    None."""
    if name is None:
        return torch.ones_like(s)
    with torch.enable_grad():
        x = s.detach().requires_grad_()
        (g,) = torch.autograd.grad(apply(name, x).sum(), x)
    return g
