"""fa's forward and backward as torch.library custom ops, for torch.compile.

    fa::attention_fwd(q, k, v, bundle, mask, window_left, window_right, scale,
                      mma, deterministic, score_mod, allow_tf32) -> (o, lse)
    fa::attention_bwd(q, k, v, o, do, lse, bundle, mask, window_left,
                      window_right, scale, deterministic, score_mod,
                      allow_tf32) -> (dq, dk, dv)

Dynamo and AOTAutograd see only these ops and their fake implementations
(shapes and dtypes); the ctypes launch and the stream query run in the real
implementations, outside traced code. `bundle` is fa.Bundle.id; `mask` is
"none", "causal", "causal_bottom_right" or "window"; `mma` and `score_mod` are
"" for none; `scale` None means 1/sqrt(D); `allow_tf32` lets float32 calls
take TF32 kernels (fa.attention resolves it while tracing). attention_fwd is
differentiable in q, k, v through attention_bwd (register_autograd); LSE is
not.
"""
from typing import Optional, Tuple

import torch

from . import _backward, _bundles, _empty_like_layout, _forward, _mask

_registered = False


def _mask_args(mask, window_left, window_right):
    return (mask == "causal", mask == "causal_bottom_right",
            (window_left, window_right) if mask == "window" else None)


def register():
    """Defines the ops once per process (torch >= 2.4 has custom_op)."""
    global _registered
    if _registered or not hasattr(torch.library, "custom_op"):
        return
    _registered = True

    @torch.library.custom_op("fa::attention_fwd", mutates_args=(), device_types="cuda")
    def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bundle: int,
                      mask: str, window_left: int, window_right: int, scale: Optional[float],
                      mma: str, deterministic: bool, score_mod: str,
                      allow_tf32: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        # Strided views go to the kernels as they are (O in q's layout);
        # _forward copies only what the kernel cannot take.
        return _forward(q, k, v, _bundles[bundle],
                        _mask_args(mask, window_left, window_right), scale, mma or None,
                        score_mod or None, tf32=allow_tf32)

    @attention_fwd.register_fake
    def _(q, k, v, bundle, mask, window_left, window_right, scale, mma, deterministic,
          score_mod, allow_tf32):
        # O in q's layout, as the real implementation's (_empty_like_layout).
        rows = q.shape[:-1]
        order = sorted(range(3), key=lambda i: -q.stride(i))
        o = q.new_empty([q.shape[i] for i in order] + [v.shape[-1]]).permute(
            *[order.index(i) for i in range(3)], 3)
        return o, q.new_empty(rows, dtype=torch.float32)

    @torch.library.custom_op("fa::attention_bwd", mutates_args=(), device_types="cuda")
    def attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      do: torch.Tensor, lse: torch.Tensor, bundle: int, mask: str,
                      window_left: int, window_right: int, scale: Optional[float],
                      deterministic: bool, score_mod: str,
                      allow_tf32: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # Strided views go to the kernels as they are (dQ, dK, dV in q's,
        # k's, v's layouts); a fallback to contiguous copies is put back in
        # those layouts, the fake's.
        grads = _backward(q, k, v, o, do, lse.contiguous(), _bundles[bundle],
                          _mask_args(mask, window_left, window_right), scale, deterministic,
                          score_mod or None, tf32=allow_tf32)
        out = []
        for g, ref in zip(grads, (q, k, v)):
            want = _empty_like_layout(ref, ref.shape[-1])
            if g.stride() != want.stride():
                want.copy_(g)
                g = want
            out.append(g)
        return tuple(out)

    @attention_bwd.register_fake
    def _(q, k, v, o, do, lse, bundle, mask, window_left, window_right, scale, deterministic,
          score_mod, allow_tf32):
        # In the layouts of q, k, v, as the real implementation's.
        def like(t):
            order = sorted(range(3), key=lambda i: -t.stride(i))
            return t.new_empty([t.shape[i] for i in order] + [t.shape[-1]]).permute(
                *[order.index(i) for i in range(3)], 3)
        return like(q), like(k), like(v)

    def setup_context(ctx, inputs, output):
        (q, k, v, bundle, mask, left, right, scale, _mma, deterministic, score_mod,
         allow_tf32) = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (bundle, mask, left, right, scale, deterministic, score_mod, allow_tf32)
        ctx.mark_non_differentiable(lse)

    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.fa.attention_bwd(q, k, v, o, do, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None

    attention_fwd.register_autograd(backward, setup_context=setup_context)


def attention(q, k, v, bundle, mask_args, scale, mma, deterministic, score_mod,
              allow_tf32=False):
    """fa.attention's (O, LSE) through the custom op (what torch.compile
    traces)."""
    if not _registered:
        raise RuntimeError("fa: torch.compile of fa.attention needs torch.library.custom_op "
                           "(PyTorch 2.4 or later); this is PyTorch %s" % torch.__version__)
    mask, (left, right) = _mask(*mask_args)
    return torch.ops.fa.attention_fwd(q, k, v, bundle.id, mask, left, right,
                                      None if scale is None else float(scale), mma or "",
                                      deterministic, score_mod or "", bool(allow_tf32))
