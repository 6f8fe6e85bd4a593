"""Attention sinks: fa.attention(q, k, v, ..., sinks=t).

A sink is a learnable logit per query head that joins every row's softmax
denominator without a value (docs/ABI.md "Attention sinks"):
O = sum_j e^(s_j - m) v_j / (e^(t_h - m) + sum_j e^(s_j - m)), and the LSE
counts it. The kernels are the bundle's with the config field `sinks`
(fa-aot --config fwd:bf16:d128:causal:sinks, or compiled on demand like
other configs), launched by fa_attention_{forward,backward}_sinks; the
backward's d_sinks is t.grad. A decode step (few query rows) takes the
bundle's split-KV kernels with sinks (`...:splitkv:sinks`, packed GQA
first; with the call's score_mod and mask_mod) where it has them and
splitting pays: the partials are computed
without the sinks and the merge joins them
(fa_attention_forward_splitkv_sinks).
"""
import ctypes

from ._runtime import BWD, FWD, BackwardArgs, FaError, ForwardArgs

_function = None


def check_sinks(sinks, q):
    """FaError unless `sinks` is a float32 tensor [H] on q's device."""
    import torch
    if not isinstance(sinks, torch.Tensor):
        raise FaError(1, "fa: sinks must be a float32 torch tensor [H], got %s"
                      % type(sinks).__name__)
    if sinks.dtype != torch.float32:
        raise FaError(1, "fa: sinks.dtype is %s, expected torch.float32" % sinks.dtype)
    heads = q.shape[1] if q.dim() in (3, 4) else None
    layout = "[Tq,H,D]" if q.dim() == 3 else "[B,H,Nq,D]"
    if sinks.dim() != 1 or sinks.shape[0] != heads:
        raise FaError(1, "fa: sinks.shape is %s, expected [%s] (one logit per query head of "
                      "q %s, q.shape %s)" % (list(sinks.shape), heads, layout, list(q.shape)))
    if sinks.device != q.device:
        raise FaError(1, "fa: sinks are on %s and q on %s; expected one CUDA device"
                      % (sinks.device, q.device))


def aligned(t):
    """t, or a copy where it is not contiguous and 16-byte aligned (the
    runtime's rule for sinks)."""
    import torch
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.detach().clone(memory_format=torch.contiguous_format)


def _split_forward(q, k, v, o, lse, sinks, b, mask_args, scale, tf32=False, score_mod=None,
                   mod_args=(), mask_mod=None):
    """Whether the bundle's split-KV kernels with sinks computed O and LSE:
    a decode shape (few query rows; the packed-GQA kernel first, as the
    plain forward plan does) where the bundle has them and splitting pays.
    The split partials are computed without the sinks; the merge joins
    them (docs/ABI.md "Attention sinks")."""
    import torch
    from . import _launch, _mod_arg_array, _packs_gqa, _splitkv_plan, _tensor
    options = dict(sinks=True, tf32=tf32, score_mod=score_mod, mask_mod=mask_mod,
                   mod_args=mod_args)
    split = _packs_gqa(q, k) and _splitkv_plan(q, k, v, o, lse, b, mask_args, scale,
                                               packed=True, **options)
    if not split:
        split = _splitkv_plan(q, k, v, o, lse, b, mask_args, scale, **options)
    if not split:
        return False
    kernel, template, splits, nbytes = split
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    args = ForwardArgs.from_buffer_copy(template)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse)):
        getattr(args, name).data = t.data_ptr()
    s = _tensor(aligned(sinks))
    _launch(b.lib, b.lib.fa_attention_forward_splitkv_sinks, kernel, args, q,
            workspace.data_ptr(), nbytes, splits, _mod_arg_array(mod_args), len(mod_args),
            ctypes.byref(s))
    return True


def forward(q, k, v, sinks, b, mask_args, scale, mma, tf32=False, score_mod=None,
            mod_args=(), mask_mod=None):
    """O and LSE (allocated here) of the forward with sinks [H] f32 (tf32:
    TF32 kernels allowed, float32 q; score_mod and mask_mod names, their
    tensors in mod_args)."""
    import torch
    from . import (_capability, _check_mod_arg_count, _launch, _mask, _mod_arg_array, _tensor,
                   softmax_scale)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    # The split kernels are mma.sync ones.
    if mma in (None, "mma_sync") and _split_forward(q, k, v, o, lse, sinks, b, mask_args,
                                                    scale, tf32, score_mod, mod_args, mask_mod):
        return o, lse
    mask, win = _mask(*mask_args)
    kernel = b.find(FWD, q.dtype, q.shape[-1], v.shape[-1], mask, win, _capability(q), mma,
                    k.shape[-2], score_mod=score_mod, mask_mod=mask_mod, sinks=True,
                    allow_tf32=tf32)
    if score_mod is not None or mask_mod is not None:
        _check_mod_arg_count(b, kernel, score_mod, mod_args, mask_mod)
    args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], softmax_scale(q.shape[-1], scale))
    s = _tensor(aligned(sinks))
    _launch(b.lib, b.lib.fa_attention_forward_sinks, kernel, args, q,
            _mod_arg_array(mod_args), len(mod_args), ctypes.byref(s))
    return o, lse


def backward(q, k, v, o, do, lse, sinks, b, mask_args, scale, deterministic, tf32=False,
             score_mod=None, mod_args=(), mask_mod=None):
    """dQ, dK, dV and d_sinks (allocated here) of the forward with sinks."""
    import torch
    from . import (_capability, _check_mod_arg_count, _launch, _mask, _mod_arg_array, _tensor,
                   softmax_scale)
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    mask, win = _mask(*mask_args)
    kernel = b.find(BWD, q.dtype, q.shape[-1], v.shape[-1], mask, win, _capability(q), None,
                    k.shape[-2], deterministic, score_mod, mask_mod, sinks=True,
                    allow_tf32=tf32)
    if score_mod is not None or mask_mod is not None:
        _check_mod_arg_count(b, kernel, score_mod, mod_args, mask_mod)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    dsinks = torch.empty(sinks.shape, dtype=torch.float32, device=q.device)
    args = BackwardArgs(*[_tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv, delta,
                                                 dq_accum)], softmax_scale(q.shape[-1], scale))
    s, ds = _tensor(aligned(sinks)), _tensor(dsinks)
    _launch(b.lib, b.lib.fa_attention_backward_sinks, kernel, args, q,
            _mod_arg_array(mod_args), len(mod_args), ctypes.byref(s), ctypes.byref(ds))
    return dq, dk, dv, dsinks


def _make_function():
    import torch

    class SinkAttentionFunction(torch.autograd.Function):
        """O, LSE = attention(Q, K, V, sinks); gradients to q, k, v and the
        sinks through the bundle's bwd kernels. LSE is not differentiable."""

        @staticmethod
        def forward(ctx, q, k, v, sinks, b, mask_args, scale, mma, deterministic, tf32,
                    score_mod, mod_args, mask_mod):
            o, lse = forward(q, k, v, sinks.detach(), b, mask_args, scale, mma, tf32,
                             score_mod, mod_args, mask_mod)
            ctx.save_for_backward(q, k, v, o, lse, sinks)
            ctx.args = (b, mask_args, scale, deterministic, tf32, score_mod, mod_args, mask_mod)
            ctx.mark_non_differentiable(lse)
            ctx.set_materialize_grads(False)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            if do is None:  # O does not reach the loss
                return (None,) * 13
            q, k, v, o, lse, sinks = ctx.saved_tensors
            dq, dk, dv, dsinks = backward(q, k, v, o, do, lse, sinks.detach(), *ctx.args)
            return (dq, dk, dv, dsinks) + (None,) * 9

    return SinkAttentionFunction


def attention(q, k, v, sinks, b, mask_args, scale, mma, deterministic, score_mod, mod_args,
              tf32=False, mask_mod=None):
    """fa.attention with sinks: O, LSE (tf32: TF32 kernels allowed; a
    score_mod and a mask_mod, names or Python functions, with the tensors
    they read)."""
    import torch
    from . import _mod_args_for, _mods
    global _function
    check_sinks(sinks, q)
    score_mod, mask_mod, tensors = _mods(score_mod, mask_mod, mod_args)
    tensors = _mod_args_for(tensors, q)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, sinks)):
        if _function is None:
            _function = _make_function()
        return _function.apply(q, k, v, sinks, b, mask_args, scale, mma, deterministic, tf32,
                               score_mod, tensors, mask_mod)
    return forward(q, k, v, sinks, b, mask_args, scale, mma, tf32, score_mod, tensors, mask_mod)
