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

score_mods that read tensors (mod_args) take them after kv_idx, in the
library function's order; make_mod_args() draws them for a problem.
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


def alibi_slopes(score, b, h, q_idx, kv_idx, slopes):
    """s + slopes[h]·(kv - q), slopes [H] f32."""
    return score + slopes[h].to(score.dtype) * (kv_idx - q_idx).to(score.dtype)


# rel_bias reads table[h, kv - q + REL_CENTER], the index clamped into the
# table as the kernels clamp every read.
REL_CENTER = 4095


def rel_bias(score, b, h, q_idx, kv_idx, table):
    """s + table[h, kv - q + 4095], table [H, 8191] f32."""
    col = (kv_idx - q_idx + REL_CENTER).clamp(0, table.shape[1] - 1)
    return score + table[h, col].to(score.dtype)


def key_bias(score, b, h, q_idx, kv_idx, bias):
    """s + bias[b, kv], bias [B, Nk] f32."""
    return score + bias[b, kv_idx].to(score.dtype)


SCORE_MODS = {f.__name__: f for f in (softcap30, alibi16, relbias, clamp, alibi_slopes,
                                      rel_bias, key_bias)}


def make_mod_args(name, b, h, hkv, nq, nk, device, gen=None):
    """Random tensors for score_mod `name` on a problem of these sizes, in
    its library function's order (test/gpu/score_mods.mlir); () for a
    score_mod that reads none. Slopes as ALiBi's geometric ones, scaled
    randomly; biases of a few units, so they move the softmax."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)
    if name == "alibi_slopes":
        geometric = torch.exp2(-8.0 * torch.arange(1, h + 1, device=device) / h)
        return (geometric * (0.5 + randn(h).abs()),)
    if name == "rel_bias":
        return (2 * randn(h, 2 * REL_CENTER + 1),)
    if name == "key_bias":
        return (2 * randn(b, nk),)
    return ()


def get(name):
    """The reference of score_mod `name` (a random program rnd<seed>_<i> of
    random_score_mods.py is rebuilt from its name); KeyError names the known
    ones. A function (a Python score_mod fa traces, its tensors captured)
    is its own reference."""
    if callable(name):
        return name
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


def apply(name, s, mod_args=()):
    """score_mod `name` (None: none) applied to scores s [B, H, Nq, Nk], each
    with its (b, h, q, kv) indices and the tensors it reads; in s's dtype,
    differentiable in s."""
    if name is None:
        return s
    bsz, heads, nq, nk = s.shape
    idx = lambda n, dim: torch.arange(n, device=s.device).view(  # noqa: E731
        [n if i == dim else 1 for i in range(4)])
    # In s's dtype: a captured float32 tensor would otherwise promote a
    # low-precision reference to float32.
    return get(name)(s, idx(bsz, 0), idx(heads, 1), idx(nq, 2), idx(nk, 3),
                     *[t.to(s.device) for t in mod_args]).to(s.dtype)


def flex_score_mod(name, mod_args=()):
    """score_mod `name` as FlexAttention takes it: its tensors captured."""
    fn = get(name)
    if not mod_args:
        return fn
    return lambda score, b, h, q_idx, kv_idx: fn(score, b, h, q_idx, kv_idx, *mod_args)


def derivative(name, s, mod_args=()):
    """d score_mod / d score at s (float64 tensor of [B, H, Nq, Nk]); ones for
    None."""
    if name is None:
        return torch.ones_like(s)
    with torch.enable_grad():
        x = s.detach().requires_grad_()
        (g,) = torch.autograd.grad(apply(name, x, mod_args).sum(), x)
    return g
