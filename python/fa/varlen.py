"""fa.attention_varlen: attention over a batch of sequences of different
lengths packed along the token axis (flash-attn's flash_attn_varlen_func).

The kernels are the bundle's varlen forwards (wgmma) and backwards (wgmma, or
mma.sync for head dims without a wgmma backward; fa-aot config field
`varlen`, sm_90a; docs/ABI.md "Varlen"), or, where
fa's compiler is installed, ones compiled on first use (fa.jit).
"""
import ctypes

from . import jit
from ._runtime import (BWD, DTYPE_NAMES, FWD, MASKS, FaError, KernelQuery, VarlenArgs,
                       VarlenBackwardArgs, check)

_INVALID = 1  # FA_ERROR_INVALID_ARGUMENT


def _fail(message):
    raise FaError(_INVALID, "fa.attention_varlen: " + message)


def _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k):
    import torch
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            _fail("%s must be a packed [total_tokens, heads, head_dim] tensor, got %s"
                  % (name, tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__))
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype != torch.int32:
            _fail("%s must be a 1-D int32 tensor of batch + 1 offsets, got %s"
                  % (name, "%s %s" % (cu.dtype, tuple(cu.shape))
                     if isinstance(cu, torch.Tensor) else type(cu).__name__))
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0] or cu_seqlens_q.shape[0] < 2:
        _fail("cu_seqlens_q has %d offsets and cu_seqlens_k %d; both need batch + 1 >= 2"
              % (cu_seqlens_q.shape[0], cu_seqlens_k.shape[0]))
    for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q),
                    ("cu_seqlens_k", cu_seqlens_k)):
        if not t.is_cuda or t.device != q.device:
            _fail("%s is on %s; q, k, v and cu_seqlens must be on one CUDA device (q: %s)"
                  % (name, t.device, q.device))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            _fail("%s has dtype %s; q, k and v must be float16 or bfloat16, all alike (q: %s)"
                  % (name, t.dtype, q.dtype))
    if k.shape[:2] != v.shape[:2]:
        _fail("k %s and v %s must have the same tokens and key heads"
              % (tuple(k.shape), tuple(v.shape)))
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        _fail("q has %d heads and k %d; the query heads must be a multiple of the key heads"
              % (q.shape[1], k.shape[1]))
    if q.shape[2] != k.shape[2]:
        _fail("q's head dim %d differs from k's %d" % (q.shape[2], k.shape[2]))


def _host_offsets(cu):
    """The offsets as a ctypes int32 array (one device-to-host copy)."""
    host = cu.to("cpu").contiguous()
    return (ctypes.c_int32 * host.shape[0]).from_buffer_copy(host.numpy().tobytes()), host


def _check_offsets(lib, cu_q, cu_k, total_q, total_k, max_q, max_k):
    """fa_varlen_check_seqlens on host copies; returns whether every sequence
    has as many queries as keys (where top-left and bottom-right causal
    masks agree)."""
    hq, tq = _host_offsets(cu_q)
    hk, tk = _host_offsets(cu_k)
    status = lib.fa_varlen_check_seqlens(hq, hk, len(hq) - 1, total_q, total_k, max_q, max_k)
    if status:
        check(lib, status)
    return bool((tq == tk).all())


def _mask_of(causal, causal_top_left, window_size):
    """(mask, (left, right)) with flash-attn's meaning: causal and windows
    aligned bottom-right, per sequence."""
    left, right = (int(window_size[0]), int(window_size[1]))
    if causal_top_left:
        if causal or (left, right) != (-1, -1):
            _fail("causal_top_left excludes causal and window_size")
        return "causal", (-1, -1)
    if causal:
        if left < 0:
            return "causal_bottom_right", (-1, -1)
        return "window", (left, 0)
    if (left, right) != (-1, -1):
        return "window", (left, right)
    return "none", (-1, -1)


def _find(b, dtype, d, dv, mask, window, capability, max_seqlen_k, direction=FWD,
          sinks=False):
    """The loaded bundles' varlen kernel for the query (with attention sinks
    or without), else one compiled now (where fa-aot is installed); None
    when neither."""
    key = ("varlen", direction, dtype, d, dv, mask, window, capability, max_seqlen_k, sinks)
    if key in b._cache:
        return b._cache[key]
    from . import _dtype_code
    q = KernelQuery(direction, _dtype_code(dtype), d, dv, MASKS[mask], window[0], window[1],
                    capability, 0, None, None, int(sinks))
    found = b._search(q, max_seqlen_k, find=b.lib.fa_kernel_find_varlen)
    miss = b._miss[1] if b._miss else None
    if found is None and b.jit and jit.find_compiler() is not None:
        found = _compile(b, q, mask, window, capability, max_seqlen_k)
    b._cache[key] = found
    if found is None:
        b._varlen_miss = miss or "no bundle loaded"
    return found


def _mma(direction, d, dv):
    """The varlen forward runs on wgmma; the backward on wgmma where its
    warp-specialised kernel exists (jit.WGMMA_HEAD_DIMS), else on mma.sync."""
    if direction == BWD and (d, dv or d) not in jit.WGMMA_HEAD_DIMS["bwd"]:
        return "mma_sync"
    return "wgmma"


def _compile(b, query, mask, window, capability, max_seqlen_k):
    mma = _mma(query.direction, query.head_dim, query.head_dim_v)
    config = jit.config_text(query.direction, DTYPE_NAMES[query.dtype], query.head_dim,
                             query.head_dim_v, mask, window, capability, mma,
                             wide_rows=not query.sinks) + ":varlen" + \
        (":sinks" if query.sinks else "")
    handle = b._load(jit.compile_bundle(config))
    out = ctypes.c_void_p()
    status = b.lib.fa_kernel_find_varlen(handle, ctypes.byref(query), max_seqlen_k,
                                         ctypes.byref(out))
    if status:
        b.lib.fa_bundle_free(handle)
        check(b.lib, status)
    b._handles.append(handle)
    return out


def _kernel(b, q, v, mask, window, max_seqlen_k, equal_lengths, direction=FWD, sinks=False):
    import torch
    from . import _capability
    d, dv, cap = q.shape[2], v.shape[2], _capability(q)
    kernel = _find(b, q.dtype, d, dv, mask, window, cap, max_seqlen_k, direction, sinks)
    if kernel is None and mask == "causal_bottom_right" and equal_lengths:
        # Every sequence has as many queries as keys: the corners agree.
        kernel = _find(b, q.dtype, d, dv, "causal", window, cap, max_seqlen_k, direction,
                       sinks)
    if kernel is None:
        config = "%s:%s:d%d:%s:%s:varlen%s" % (
            "bwd" if direction == BWD else "fwd",
            "bf16" if q.dtype == torch.bfloat16 else "f16", d, mask,
            _mma(direction, d, dv), ":sinks" if sinks else "")
        raise FaError(2, "fa.attention_varlen: no varlen kernel for %s (%s); build it with "
                      "fa-aot -o DIR --config %s and load DIR too, or install fa-aot for JIT"
                      % (config, b._varlen_miss, config))
    return kernel


def _tensor_or_empty(t):
    from . import _tensor
    desc = _tensor(t)
    if t.numel() == 0:
        desc.data = 0
    return desc


def _launch_varlen(b, kernel, q, k, v, o, lse, cu_q, cu_k, batch, max_q, scale, sinks=None):
    from . import _launch, _tensor
    args = VarlenArgs(*[_tensor_or_empty(t) for t in (q, k, v, o, lse)],
                      cu_q.data_ptr(), cu_k.data_ptr(), batch, max_q, scale)
    if sinks is None:
        _launch(b.lib, b.lib.fa_attention_forward_varlen, kernel, args, q)
    else:
        _launch(b.lib, b.lib.fa_attention_forward_varlen_sinks, kernel, args, q,
                ctypes.byref(_tensor(sinks)))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     causal=False, softmax_scale=None, window_size=(-1, -1),
                     return_lse=False, bundle=None, causal_top_left=False,
                     check_seqlens=True, sinks=None):
    """Attention over B sequences packed along the token axis, as flash-attn's
    flash_attn_varlen_func: q [Tq,H,D], k [Tk,Hkv,D], v [Tk,Hkv,Dv] CUDA
    tensors of one dtype (float16 or bfloat16; any strides with a unit last
    one that TMA can address, else contiguous copies), H a multiple of Hkv;
    cu_seqlens_q, cu_seqlens_k int32 [B+1] on the same device, sequence b
    owning query rows cu_seqlens_q[b]:cu_seqlens_q[b+1] and key rows
    cu_seqlens_k[b]:cu_seqlens_k[b+1]; max_seqlen_q, max_seqlen_k at least
    the longest query and key sequence (the grid covers max_seqlen_q).

    Masks count from each sequence's own start with its own lengths, as in
    flash-attn: `causal=True` aligns the diagonal bottom-right (key j <= i +
    len_k - len_q; the same as top-left where the lengths are equal),
    `window_size=(left, right)` keeps keys i + len_k - len_q - left <= j <=
    ... + right (-1: unbounded), with causal the right side 0.
    `causal_top_left=True` is fa's top-left causal mask instead.
    `softmax_scale` defaults to 1/sqrt(D). Returns O [Tq,H,Dv], with
    return_lse also LSE [H,Tq] f32 (natural log; -inf for a row that sees no
    key). Rows outside every sequence are left unwritten.

    `sinks` (a float32 CUDA tensor [H] on q's device) are attention sinks, as
    in fa.attention: a logit per query head in every row's softmax
    denominator without a value; the LSE counts them (a row that sees no key
    gets O = 0 and LSE = sinks[h]), and when sinks requires grad the backward
    gives sinks.grad. The kernels are the bundle's `...:varlen:sinks` ones.

    `check_seqlens` (default) copies the offsets to the host once per call
    and checks them (start at 0, non-decreasing, within the tensors, no
    sequence longer than its max_seqlen), raising FaError for the first bad
    one; it is skipped while a CUDA graph is being captured. The kernels
    clamp bad offsets, so they never address memory outside the tensors.
    Differentiable in q, k, v when they require grad: the backward runs the
    bundle's varlen backward (fa-aot config `bwd:...:varlen`), dK
    and dV summed over the query heads of each key head; LSE is not
    differentiable, and rows outside every sequence get zero gradients.
    """
    import torch
    if sinks is not None:
        from .sinks import check_sinks
        check_sinks(sinks, q)
    if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v, sinks)):
        o, lse = _function().apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, causal, softmax_scale, tuple(window_size),
                                   bundle, causal_top_left, check_seqlens, sinks)
        return (o, lse) if return_lse else o
    o = torch.empty((q.shape[0], q.shape[1], v.shape[2]) if q.dim() == 3 and v.dim() == 3
                    else (0,), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]) if q.dim() == 3 else (0,),
                      dtype=torch.float32, device=q.device)
    forward_into(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 causal, softmax_scale, window_size, bundle, causal_top_left, check_seqlens,
                 sinks)
    return (o, lse) if return_lse else o


def forward_into(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 causal=False, softmax_scale=None, window_size=(-1, -1), bundle=None,
                 causal_top_left=False, check_seqlens=True, sinks=None):
    """attention_varlen into caller-provided o [Tq,H,Dv] (the kernel's dtype,
    any strides with a unit last one) and lse [H,Tq] (float32, contiguous);
    the runtime checks them."""
    import torch
    from . import _bundle
    from . import softmax_scale as _softmax_scale
    b = _bundle(bundle)
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    if sinks is not None:
        from .sinks import aligned, check_sinks
        check_sinks(sinks, q)
        sinks = aligned(sinks.detach())
    if torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, sinks)):
        _fail("forward_into writes caller-provided outputs and records no graph; "
              "use fa.attention_varlen for gradients")
    max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
    if max_q < 0 or max_k < 0 or max_q >= 2 ** 31 or max_k >= 2 ** 31:
        _fail("max_seqlen_q %d and max_seqlen_k %d must be in [0, 2^31)" % (max_q, max_k))
    mask, window = _mask_of(causal, causal_top_left, window_size)
    batch = cu_seqlens_q.shape[0] - 1
    equal_lengths = cu_seqlens_q is cu_seqlens_k
    if check_seqlens and not torch.cuda.is_current_stream_capturing():
        equal_lengths = _check_offsets(b.lib, cu_seqlens_q, cu_seqlens_k, q.shape[0],
                                       k.shape[0], max_q, max_k)
    scale = _softmax_scale(q.shape[2], softmax_scale)
    kernel = _kernel(b, q, v, mask, window, max_k, equal_lengths, sinks=sinks is not None)
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    q, k, v = [t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    try:
        _launch_varlen(b, kernel, q, k, v, o, lse, cu_q, cu_k, batch, max_q, scale, sinks)
    except FaError as e:
        # Views TMA cannot address (strides not multiples of 16 bytes): copies.
        if e.status != _INVALID or all(t.is_contiguous() for t in (q, k, v)):
            raise
        _launch_varlen(b, kernel, q.contiguous(), k.contiguous(), v.contiguous(), o, lse,
                       cu_q, cu_k, batch, max_q, scale, sinks)


def backward_into(q, k, v, o, do, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                  max_seqlen_k, causal=False, softmax_scale=None, window_size=(-1, -1),
                  bundle=None, causal_top_left=False, equal_lengths=False, sinks=None):
    """The varlen backward into caller-provided dq [Tq,H,D], dk [Tk,Hkv,D],
    dv [Tk,Hkv,Dv] (the kernel's dtype, any strides with a unit last one)
    from the forward's q, k, v, o, lse and dO, with the same offsets and
    mask arguments; the f32 workspaces are allocated here. The runtime
    checks every tensor. With the forward's `sinks`, returns d_sinks [H]
    (float32, allocated here); else None."""
    import torch
    from . import _bundle
    from . import softmax_scale as _softmax_scale
    b = _bundle(bundle)
    mask, window = _mask_of(causal, causal_top_left, window_size)
    max_k = int(max_seqlen_k)
    kernel = _kernel(b, q, v, mask, window, max_k, equal_lengths, direction=BWD,
                     sinks=sinks is not None)
    h, tq = q.shape[1], q.shape[0]
    delta = torch.empty((h, tq), dtype=torch.float32, device=q.device)
    dq_accum = torch.empty((h, tq, q.shape[2]), dtype=torch.float32, device=q.device)
    do = do if do.shape[-1] <= 1 or do.stride(-1) == 1 else do.contiguous()
    tensors = (q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum)
    args = VarlenBackwardArgs(*[_tensor_or_empty(t) for t in tensors],
                              cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr(),
                              cu_seqlens_q.shape[0] - 1, max_k,
                              _softmax_scale(q.shape[2], softmax_scale))
    from . import _launch, _tensor
    if sinks is None:
        _launch(b.lib, b.lib.fa_attention_backward_varlen, kernel, args, q)
        return None
    from .sinks import aligned
    dsinks = torch.empty(sinks.shape, dtype=torch.float32, device=q.device)
    _launch(b.lib, b.lib.fa_attention_backward_varlen_sinks, kernel, args, q,
            ctypes.byref(_tensor(aligned(sinks.detach()))), ctypes.byref(_tensor(dsinks)))
    return dsinks


_varlen_function = None


def _function():
    """The autograd Function of attention_varlen (made once torch is seen)."""
    global _varlen_function
    if _varlen_function is not None:
        return _varlen_function
    import torch

    class VarlenFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window, bundle,
                    top_left, check_seqlens, sinks):
            o = torch.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype,
                            device=q.device)
            lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32,
                              device=q.device)
            cu_q, cu_k = cu_q.contiguous(), cu_k.contiguous()
            forward_into(q, k, v, o, lse, cu_q, cu_k, max_q, max_k, causal, scale, window,
                         bundle, top_left, check_seqlens, sinks)
            ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, sinks)
            ctx.args = (max_k, causal, scale, window, bundle, top_left)
            ctx.mark_non_differentiable(lse)
            ctx.set_materialize_grads(False)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            if do is None:  # O does not reach the loss
                return (None,) * 14
            q, k, v, o, lse, cu_q, cu_k, sinks = ctx.saved_tensors
            max_k, causal, scale, window, bundle, top_left = ctx.args
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            # dk, dv rows outside every sequence are not written by the kernel.
            if k.shape[0]:
                dk.zero_()
                dv.zero_()
            dsinks = backward_into(q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k, max_k, causal,
                                   scale, window, bundle, top_left,
                                   equal_lengths=cu_q is cu_k, sinks=sinks)
            return (dq, dk, dv) + (None,) * 10 + (dsinks,)

    _varlen_function = VarlenFunction
    return _varlen_function
