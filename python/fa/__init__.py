"""fa: FlashAttention kernels from an fa bundle, on PyTorch CUDA tensors.

    import fa
    fa.load("out/bundle")                    # manifest + libfa_runtime.so
    o = fa.attention(q, k, v, causal=True)   # q [B,H,Nq,D], k/v [B,Hkv,Nk,D]
    o.sum().backward()                       # backward kernels of the bundle
    o = fa.attention(q, k, v, causal=True, score_mod="softcap30")
                                             # kernels built with mod=softcap30

Pure Python over the C ABI of libfa_runtime (ctypes); no compiled extension.
Tensors must be contiguous: the runtime rejects other strides rather than
copying. Launches go on PyTorch's current stream of the tensors' device.
"""
import contextlib
import ctypes
import math
import re
import sys

from ._runtime import (BWD, DTYPE_NAMES, FWD, MASK_NAMES, MASKS, MMA_NAMES, MMAS, FaError,
                       BackwardArgs, ForwardArgs, KernelInfo, KernelQuery, Tensor, check,
                       open_library)

__all__ = ["load", "attention", "forward_into", "backward_into", "Bundle", "FaError"]

_default = None


class Bundle:
    """A loaded bundle. Kernel lookups are cached per configuration."""

    def __init__(self, bundle_dir, lib_path=None):
        # Let PyTorch create its CUDA context before the driver is touched
        # through this library, so both use the device's primary context.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.init()
        self.lib = open_library(lib_path)
        self.dir = str(bundle_dir)
        handle = ctypes.c_void_p()
        check(self.lib, self.lib.fa_bundle_load(self.dir.encode(), ctypes.byref(handle)))
        self._handle = handle
        self._cache = {}

    def __del__(self):
        # Interpreter shutdown may have torn down CUDA already; the process
        # exit releases the modules anyway.
        handle = getattr(self, "_handle", None)
        if handle and not _shutting_down():
            self.lib.fa_bundle_free(handle)
            self._handle = None

    def kernels(self):
        """Every kernel's configuration, as dicts."""
        out = []
        for i in range(self.lib.fa_bundle_kernel_count(self._handle)):
            info = KernelInfo()
            check(self.lib, self.lib.fa_kernel_get_info(
                self.lib.fa_bundle_kernel_at(self._handle, i), ctypes.byref(info)))
            out.append({
                "tag": info.tag.decode(), "target": info.target.decode(),
                "direction": "fwd" if info.direction == FWD else "bwd",
                "dtype": DTYPE_NAMES[info.dtype], "mask": MASK_NAMES[info.mask],
                "head_dim": info.head_dim, "head_dim_v": info.head_dim_v,
                "block_q": info.block_q, "block_kv": info.block_kv, "warps": info.warps,
                "stages": info.stages, "window_left": info.window_left,
                "window_right": info.window_right, "has_cubin": bool(info.has_cubin),
                "mma": MMA_NAMES.get(info.mma, str(info.mma)),
                "tensor_maps": info.tensor_map_count, "dsplit": info.dsplit,
                "deterministic": bool(info.deterministic),
                "persistent_grid": bool(info.persistent_grid),
                "score_mod": info.score_mod.decode() if info.score_mod else None})
        return out

    def score_mods(self):
        """The names of the score_mods the bundle's kernels have, sorted."""
        return sorted({k["score_mod"] for k in self.kernels() if k["score_mod"]})

    def find(self, direction, dtype, head_dim, head_dim_v, mask, window, capability,
             mma=None, nk=0, deterministic=False, score_mod=None):
        """The kernel for this query; nk (keys, 0 if unknown) picks among tiles.
        deterministic=True takes only deterministic backward kernels (which
        the default search never returns). score_mod (a name, or None for
        plain attention) takes only kernels with exactly that score_mod; the
        FaError of a missing one lists those the bundle has."""
        code = _mma_code(mma)
        mod = _score_mod_name(score_mod)
        key = (direction, dtype, head_dim, head_dim_v, mask, window, capability, code, nk,
               bool(deterministic), mod)
        kernel = self._cache.get(key)
        if kernel is None:
            q = KernelQuery(direction, _dtype_code(dtype), head_dim, head_dim_v, MASKS[mask],
                            window[0], window[1], capability, code,
                            None if mod is None else mod.encode())
            out = ctypes.c_void_p()
            find = (self.lib.fa_kernel_find_deterministic if deterministic
                    else self.lib.fa_kernel_find_for_keys)
            check(self.lib, find(self._handle, ctypes.byref(q), nk, ctypes.byref(out)))
            kernel = self._cache[key] = out
        return kernel


def _shutting_down():
    return sys.is_finalizing()


def load(bundle_dir, lib_path=None):
    """Loads a bundle and makes it the default for attention()."""
    global _default
    _default = Bundle(bundle_dir, lib_path)
    return _default


def _bundle(bundle):
    if bundle is not None:
        return bundle
    if _default is None:
        raise FaError(1, "fa: no bundle loaded; call fa.load(bundle_dir) first")
    return _default


def _dtype_code(dtype):
    import torch
    codes = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
    if dtype not in codes:
        raise FaError(1, "fa: unsupported dtype %s (expected float16 or bfloat16)" % dtype)
    return codes[dtype]


def _mma_code(mma):
    name = "any" if mma is None else mma
    if name not in MMAS:
        raise FaError(1, "fa: mma is %r; expected None, 'any', 'mma_sync' or 'wgmma'" % (mma,))
    return MMAS[name]


_MOD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _score_mod_name(score_mod):
    """None, or the name of a score_mod compiled into the bundle's kernels."""
    if score_mod is None:
        return None
    if not isinstance(score_mod, str) or not _MOD_NAME.match(score_mod):
        raise FaError(1, "fa: score_mod is %r; expected None or the name of a score_mod the "
                         "bundle's kernels were built with (identifier characters, e.g. "
                         "'softcap30')" % (score_mod,))
    return score_mod


def _tensor(t):
    """Describes a torch tensor for the runtime, strides as they are."""
    if t.dim() > 4:
        raise FaError(1, "fa: tensor of rank %d; expected at most 4" % t.dim())
    d = Tensor()
    d.data = t.data_ptr()
    d.dtype = _dtype_code(t.dtype)
    d.rank = t.dim()
    for i in range(t.dim()):
        d.shape[i] = t.shape[i]
        d.strides[i] = t.stride(i)
    return d


def _mask(causal, causal_bottom_right, window):
    chosen = sum([bool(causal), bool(causal_bottom_right), window is not None])
    if chosen > 1:
        raise FaError(1, "fa: choose at most one of causal, causal_bottom_right, window")
    if window is not None:
        left, right = window
        return "window", (int(left), int(right))
    if causal:
        return "causal", (-1, -1)
    if causal_bottom_right:
        return "causal_bottom_right", (-1, -1)
    return "none", (-1, -1)


_capabilities = {}


def _capability(t):
    import torch
    index = t.device.index if t.is_cuda else torch.cuda.current_device()
    cap = _capabilities.get(index)
    if cap is None:
        major, minor = torch.cuda.get_device_capability(index)
        cap = _capabilities[index] = major * 10 + minor
    return cap


def _launch(lib, fn, kernel, args, t):
    """fn(kernel, &args, stream) on the current stream of t's device, made
    the current device for the call (switched only when it is not)."""
    import torch
    dev = t.device if t.is_cuda else torch.device("cuda", torch.cuda.current_device())
    stream = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
    current = dev.index is None or dev.index == torch.cuda.current_device()
    with contextlib.nullcontext() if current else torch.cuda.device(dev):
        check(lib, fn(kernel, ctypes.byref(args), stream))


def forward_into(q, k, v, o, lse, causal=False, causal_bottom_right=False, window=None,
                 scale=None, bundle=None, mma=None, score_mod=None):
    """Runs the forward kernel into caller-provided o [B,H,Nq,Dv] and lse
    [B,H,Nq] (float32). Every argument is validated by the runtime. `mma`
    ('mma_sync' or 'wgmma') forces the kernel's instructions; None prefers
    wgmma where the device runs it (sm_90). `score_mod` names the score_mod
    compiled into the kernel (None: plain attention)."""
    b = _bundle(bundle)
    mask, win = _mask(causal, causal_bottom_right, window)
    d, dv = q.shape[-1], v.shape[-1]
    kernel = b.find(FWD, q.dtype, d, dv, mask, win, _capability(q), mma, k.shape[-2],
                    score_mod=score_mod)
    args = ForwardArgs(_tensor(q), _tensor(k), _tensor(v), _tensor(o), _tensor(lse),
                       1.0 / math.sqrt(d) if scale is None else float(scale))
    _launch(b.lib, b.lib.fa_attention_forward, kernel, args, q)


def backward_into(q, k, v, o, do, lse, dq, dk, dv, delta=None, dq_accum=None, causal=False,
                  causal_bottom_right=False, window=None, scale=None, bundle=None, mma=None,
                  deterministic=False, score_mod=None):
    """Runs bwd_pre, bwd and bwd_post into caller-provided dq, dk, dv. The f32
    workspaces delta [B,H,Nq] and dq_accum [B,H,Nq,D] are allocated here when
    not given. `mma` as for forward_into. deterministic=True runs the bundle's
    deterministic backward (bit-identical dq run to run; slower), which must
    exist for the query. `score_mod` as for forward_into: the forward's, whose
    derivative the backward kernel applies."""
    import torch
    b = _bundle(bundle)
    mask, win = _mask(causal, causal_bottom_right, window)
    d, dv_dim = q.shape[-1], v.shape[-1]
    kernel = b.find(BWD, q.dtype, d, dv_dim, mask, win, _capability(q), mma, k.shape[-2],
                    deterministic, score_mod)
    if delta is None:
        delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if dq_accum is None:
        dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    args = BackwardArgs(*[_tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv, delta,
                                                  dq_accum)],
                        1.0 / math.sqrt(d) if scale is None else float(scale))
    _launch(b.lib, b.lib.fa_attention_backward, kernel, args, q)


def _forward(q, k, v, opts):
    import torch
    shape = (q.shape[0], q.shape[1], q.shape[2])
    o = torch.empty(shape + (v.shape[-1],), dtype=q.dtype, device=q.device)
    lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    forward_into(q, k, v, o, lse, **opts)
    return o, lse


def _make_function():
    import torch

    class AttentionFunction(torch.autograd.Function):
        """O, LSE = attention(Q, K, V); gradients through the bundle's bwd
        kernels. LSE is not differentiable."""

        @staticmethod
        def forward(ctx, q, k, v, opts, deterministic):
            o, lse = _forward(q, k, v, opts)
            ctx.deterministic = deterministic
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.opts = opts
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            # `mma` picks the forward kernel; the backward is the runtime's
            # choice (wgmma on sm_90 where the bundle has it), since a bundle
            # may hold a config's backward in one build only.
            opts = {k_: v_ for k_, v_ in ctx.opts.items() if k_ != "mma"}
            opts["deterministic"] = ctx.deterministic
            backward_into(q, k, v, o, do.contiguous(), lse, dq, dk, dv, **opts)
            return dq, dk, dv, None, None

    return AttentionFunction


_function = None


def attention(q, k, v, causal=False, causal_bottom_right=False, window=None, scale=None,
              return_lse=False, bundle=None, mma=None, deterministic=False, score_mod=None):
    """Scaled dot-product attention with the bundle's kernels.

    q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv] contiguous CUDA tensors of
    one dtype (float16 or bfloat16), H a multiple of Hkv. `causal` aligns the
    diagonal top-left, `causal_bottom_right` bottom-right; `window=(left,
    right)` keeps keys i+off-left <= j <= i+off+right with off = Nk-Nq.
    `scale` defaults to 1/sqrt(D). Returns O, or (O, LSE) with LSE the f32
    natural-log sum of exponentials per row (-inf for fully masked rows).
    Differentiable in q, k, v when they require grad. `mma` ('mma_sync' or
    'wgmma') forces the forward kernel's instructions; None lets the runtime
    prefer wgmma on sm_90. The backward kernels are the runtime's choice
    (wgmma on sm_90 too, where the bundle has them). `deterministic=True`
    makes the backward use the bundle's deterministic kernel (dQ summed in a
    fixed order: gradients bit-identical run to run, at some speed cost); the
    forward is the same either way. `score_mod="name"` runs the kernels built
    with that score_mod (fa-aot --score-mods FILE, config field mod=name),
    which modify every score after the scale, s -> name(s, b, h, q_idx,
    kv_idx), forward and backward; None (default) is plain attention. A name
    the bundle lacks raises FaError listing those it has.
    """
    import torch
    global _function
    _mma_code(mma)
    _score_mod_name(score_mod)
    opts = dict(causal=causal, causal_bottom_right=causal_bottom_right, window=window,
                scale=scale, bundle=_bundle(bundle), mma=mma, score_mod=score_mod)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        if _function is None:
            _function = _make_function()
        o, lse = _function.apply(q, k, v, opts, bool(deterministic))
    else:
        o, lse = _forward(q, k, v, opts)
    return (o, lse) if return_lse else o
