"""fa.attention_with_kvcache: decode attention over a KV cache, paged or not,
with per-sequence key counts (flash-attn's flash_attn_with_kvcache).

The kernels are the bundle's paged split-KV forwards (fa-aot config fields
`splitkv:paged`, with `packgqa` for GQA decode; docs/ABI.md "Paged KV
cache"), or, where fa's compiler is installed, one compiled on first use.
A contiguous cache [B, Nk, Hkv, D] runs as B pages of Nk keys.
New keys and values (k=, v=, rotary optional) are written into the cache
first by the kernel's fa_kv_append entry (config field `append`).
"""
import ctypes

from . import jit
from ._runtime import (DTYPE_NAMES, FWD, MASKS, FaError, ForwardArgs, KernelQuery, KvAppendArgs,
                       PagedKv, Tensor, check)

_INVALID = 1  # FA_ERROR_INVALID_ARGUMENT


def _fail(message):
    raise FaError(_INVALID, "fa.attention_with_kvcache: " + message)


def _describe(t):
    import torch
    if isinstance(t, torch.Tensor):
        return "%s %s on %s" % (t.dtype, tuple(t.shape), t.device)
    return type(t).__name__


def _check_tensors(q, k_cache, v_cache, page_table):
    """Shapes and dtypes first, devices last (so each mistake is named as
    such wherever the tensors are)."""
    import torch
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            _fail("%s must be a 4-D tensor (q [batch, seqlen_q, heads, head_dim]; the caches "
                  "[batch, seqlen_k, kv_heads, head_dim], or [num_pages, page_size, kv_heads, "
                  "head_dim] with a page_table), got %s" % (name, _describe(t)))
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            _fail("%s has dtype %s; q and the caches must be float16 or bfloat16, all alike "
                  "(q: %s)" % (name, t.dtype, q.dtype))
    if k_cache.shape[:3] != v_cache.shape[:3]:
        _fail("k_cache %s and v_cache %s must have the same pages (or sequences), keys and "
              "key heads" % (tuple(k_cache.shape), tuple(v_cache.shape)))
    if q.shape[3] != k_cache.shape[3]:
        _fail("q's head dim %d differs from k_cache's %d" % (q.shape[3], k_cache.shape[3]))
    if k_cache.shape[2] == 0 or q.shape[2] % k_cache.shape[2] != 0:
        _fail("q has %d heads and k_cache %d; the query heads must be a multiple of the key "
              "heads" % (q.shape[2], k_cache.shape[2]))
    tables = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)]
    if page_table is not None:
        if (not isinstance(page_table, torch.Tensor) or page_table.dim() != 2 or
                page_table.dtype != torch.int32 or page_table.shape[0] != q.shape[0] or
                page_table.shape[1] < 1):
            _fail("page_table must be an int32 [batch, max_pages] tensor with batch %d of q "
                  "and at least one page, got %s" % (q.shape[0], _describe(page_table)))
        tables.append(("page_table", page_table))
    elif k_cache.shape[0] != q.shape[0]:
        _fail("k_cache has %d sequences and q %d; without a page_table the caches are "
              "[batch, seqlen_k, kv_heads, head_dim]" % (k_cache.shape[0], q.shape[0]))
    page_size = k_cache.shape[1]
    if page_size == 0 or page_size % 16 != 0:
        _fail("the %s is %d keys; it must be a positive multiple of 16 (pad the cache)"
              % ("page size" if page_table is not None else "cache length", page_size))
    for name, t in tables:
        if not t.is_cuda or t.device != q.device:
            _fail("%s is on %s; q, the caches and the page table must be on one CUDA device "
                  "(q: %s)" % (name, t.device, q.device))


def _seqlens(cache_seqlens, q, capacity):
    """cache_seqlens as an int32 [batch] device tensor: an int for every
    sequence, a tensor as given (int32 on q's device), or the capacity."""
    import torch
    batch = q.shape[0]
    if cache_seqlens is None:
        return torch.full((batch,), capacity, dtype=torch.int32, device=q.device)
    if isinstance(cache_seqlens, int):
        if cache_seqlens < 0 or cache_seqlens > capacity:
            _fail("cache_seqlens %d must be in [0, %d] (the cache's keys)"
                  % (cache_seqlens, capacity))
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    if (not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dim() != 1 or
            cache_seqlens.shape[0] != batch or cache_seqlens.dtype != torch.int32):
        _fail("cache_seqlens must be an int, or an int32 [batch] tensor with batch %d of q, "
              "got %s" % (batch, _describe(cache_seqlens)))
    if not cache_seqlens.is_cuda or cache_seqlens.device != q.device:
        _fail("cache_seqlens is on %s; it must be on q's device %s"
              % (cache_seqlens.device, q.device))
    return cache_seqlens.contiguous()


def _find(b, dtype, d, dv, mask, window, packed, capacity, cap, append=False, sinks=False,
          rows=None, score_mod=None, mask_mod=None):
    """The loaded bundles' paged kernel (with fa_kv_append when `append`,
    with attention sinks when `sinks`, with the score_mod and mask_mod of
    these names) for compute capability `cap` and the mask (a window's sizes
    `window`); packed, the tile for rows = (query heads per key head,
    queries) when given. Else one compiled now (where fa-aot is installed;
    jit.decode_config's tile); None when neither."""
    from . import _dtype_code
    key = ("paged", packed, dtype, d, dv, mask, window, cap, append, sinks, rows, score_mod,
           mask_mod)
    if key in b._cache:
        return b._cache[key]
    query = KernelQuery(FWD, _dtype_code(dtype), d, dv, MASKS[mask], window[0], window[1], cap,
                        0, None if score_mod is None else score_mod.encode(),
                        None if mask_mod is None else mask_mod.encode(), int(sinks))

    def find(handle, qy, n, out):
        if packed and rows:
            return b.lib.fa_kernel_find_paged_rows(handle, qy, rows[0], rows[1], n, int(append),
                                                   out)
        find_paged = b.lib.fa_kernel_find_paged_append if append else b.lib.fa_kernel_find_paged
        return find_paged(handle, qy, n, int(packed), out)

    found = b._search(query, capacity, find=find, handles=b._loaded_handles())
    if found is None and b.jit and jit.find_compiler() is not None:
        # Compiled on a miss, unless a named mod has no library to compile from.
        library = b._mod_library(score_mod, mask_mod)
        if library or not (score_mod or mask_mod):
            config = jit.decode_config(DTYPE_NAMES[query.dtype], d, dv, mask, window, cap,
                                       packed, rows, score_mod, mask_mod) + ":paged" + (
                                           ":append" if append else "") + (
                                               ":sinks" if sinks else "")
            found = b._search(query, capacity, find=find,
                              handles=[b._decode_bundle(config, library)])
            if found is None:
                raise FaError(b._miss[0], "fa: the paged kernel compiled for %s does not "
                              "answer the query: %s" % (config, b._miss[1]))
    b._cache[key] = found
    return found


def _kernel(b, q, k_cache, dv, mask, window, capacity, append=False, sinks=False,
            score_mod=None, mask_mod=None):
    """The packed-GQA paged kernel for GQA decode (as fa.attention takes the
    packed split kernel), else the unpacked one; FaError naming the config
    when the bundles have neither."""
    from . import _capability
    heads, kv_heads = q.shape[2], k_cache.shape[2]
    group = heads // kv_heads
    packed = 1 < group <= 64 and q.shape[1] < 64
    find = lambda pack: _find(b, q.dtype, q.shape[-1], dv, mask, window, pack,  # noqa: E731
                              capacity, _capability(q), append, sinks, (group, q.shape[1]),
                              score_mod, mask_mod)
    kernel = find(True) if packed else None
    if kernel is None:
        kernel, packed = find(False), False
    if kernel is None:
        import torch
        config = "fwd:%s:d%d:%s%s:splitkv:paged%s%s%s%s" % (  # a window: run-time sizes
            "bf16" if q.dtype == torch.bfloat16 else "f16", q.shape[-1],
            "" if dv == q.shape[-1] else "v%d:" % dv, mask, ":append" if append else "",
            ":sinks" if sinks else "", ":mod=" + score_mod if score_mod else "",
            ":maskmod=" + mask_mod if mask_mod else "")
        raise FaError(2, "fa.attention_with_kvcache: no paged kernel for %s; build it with "
                      "fa-aot -o DIR --config %s (and :packgqa for GQA decode) and load DIR "
                      "too, or install fa-aot for JIT" % (config, config))
    return kernel, packed


def _dense(t):
    """A contiguous tensor's fa_tensor (the append kernel reads dense rows)."""
    from . import _tensor
    return _tensor(t.contiguous())


def _append(b, kernel, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, used, page_table,
            rotary_interleaved, causal):
    """fa_kv_append: k, v into the caches after `used` rows; q rotated when
    rotary is given (returned, else q). The runtime checks the host copies of
    the counts and the table, so an overflow is an error, never a write."""
    import torch
    from . import _launch
    for name, t, dim in (("k", k, k_cache.shape[3]), ("v", v, v_cache.shape[3])):
        if (not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype != q.dtype or
                t.shape[0] != q.shape[0] or t.shape[2] != k_cache.shape[2] or
                t.shape[3] != dim or t.device != q.device):
            _fail("%s must be a [batch %d, new_tokens, kv_heads %d, %d] %s tensor on %s, got %s"
                  % (name, q.shape[0], k_cache.shape[2], dim, q.dtype, q.device, _describe(t)))
    if k.shape[1] != v.shape[1]:
        _fail("k has %d new tokens and v %d" % (k.shape[1], v.shape[1]))
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        _fail("appending needs contiguous k_cache and v_cache (the kernel writes dense rows)")
    if (rotary_cos is None) != (rotary_sin is None):
        _fail("give rotary_cos and rotary_sin together")
    k, v = k.contiguous(), v.contiguous()
    args = KvAppendArgs()
    args.k_new, args.v_new, args.k_cache, args.v_cache = (
        _dense(k), _dense(v), _dense(k_cache), _dense(v_cache))
    args.cache_seqlens = used.data_ptr()
    host_used = used.cpu()
    args.cache_seqlens_host = ctypes.cast(host_used.data_ptr(), ctypes.POINTER(ctypes.c_int32))
    keep = [k, v, host_used]
    if page_table is not None:
        host_table = page_table.cpu()
        keep.append(host_table)
        args.page_table, args.max_pages = page_table.data_ptr(), page_table.shape[1]
        args.page_table_host = ctypes.cast(host_table.data_ptr(), ctypes.POINTER(ctypes.c_int32))
    q_out = q
    if rotary_cos is not None:
        cos = rotary_cos.to(device=q.device, dtype=torch.float32).contiguous()
        sin = rotary_sin.to(device=q.device, dtype=torch.float32).contiguous()
        keep += [cos, sin]
        args.rotary_cos, args.rotary_sin = _dense(cos), _dense(sin)
        args.rotary_interleaved = int(bool(rotary_interleaved))
        q_in = q.contiguous()
        q_out = torch.empty_like(q_in)
        keep.append(q_in)
        args.q, args.q_out = _dense(q_in), _dense(q_out)
        # flash-attn: a causal q sits at cache_seqlens + i, any other at cache_seqlens.
        args.q_same_position = 0 if causal else 1
    _launch(b.lib, b.lib.fa_kv_append, kernel, args, q)
    return q_out


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None,
                           softmax_scale=None, causal=False, num_splits=0, return_lse=False,
                           bundle=None, block_table=None, return_softmax_lse=False, k=None,
                           v=None, rotary_cos=None, rotary_sin=None, rotary_interleaved=True,
                           window_size=(-1, -1), sinks=None, softcap=0.0, score_mod=None,
                           mask_mod=None, mod_args=None):
    """Attention of new queries over a KV cache, as flash-attn's
    flash_attn_with_kvcache: q [B, Sq, H, D]; k_cache, v_cache
    [B, Nk, Hkv, D/Dv], or with page_table (int32 [B, max_pages]) pools of
    pages [num_pages, page_size, Hkv, D/Dv] (page_size a multiple of 16),
    sequence b's key n being row n % page_size of page
    page_table[b, n // page_size]; cache_seqlens (int, or int32 [B] on the
    device; default: the whole cache) the keys each sequence sees. float16 or
    bfloat16, one CUDA device, any strides with a unit last one (q, the
    caches' rows 16-byte aligned; each page's rows one row stride apart).

    causal=True aligns the diagonal bottom-right (query i sees keys j <=
    i + cache_seqlens[b] - Sq), as flash-attn; softmax_scale defaults to
    1/sqrt(D). window_size=(left, right) (flash-attn's; -1: unbounded side)
    keeps query i to keys i + cache_seqlens[b] - Sq - left .. + right (right
    0 under causal); any window runs one kernel, the window's sizes passed at
    run time (config `window` without l/r). num_splits (0: chosen from the
    problem and the SM count) is
    the key splits of the split-KV kernel. Returns O [B, Sq, H, Dv], with
    return_lse also LSE [B, H, Sq] f32 (-inf for a row that sees no key).
    Page indices outside [0, num_pages) are clamped and counts clamped to
    [0, max_pages x page_size] by the kernel (never read on the host).
    Forward only. flash-attn's names block_table and return_softmax_lse are
    accepted for page_table and return_lse.

    k, v [B, Nnew, Hkv, D/Dv] (flash-attn's names): written into the cache
    in place at rows cache_seqlens[b] .. + Nnew - 1 before the attention,
    which then sees cache_seqlens[b] + Nnew keys (cache_seqlens itself is not
    changed). rotary_cos, rotary_sin [max_pos, rotary_dim / 2] rotate the new
    keys at their positions and q at cache_seqlens[b] + i when causal (at
    cache_seqlens[b] otherwise), pairs (2i, 2i+1) with rotary_interleaved
    (flash-attn's default) else (i, i + rotary_dim / 2); the math is f32,
    rounded once. The caches must be contiguous; a call whose new rows would
    pass the cache's capacity, or go through a page-table entry outside the
    pool, raises FaError (the counts and the table are copied to the host
    for the check, a synchronisation).

    sinks (float32 [H], one logit per query head; fa.sinks) join every row's
    softmax denominator without a value: the paged kernel with sinks
    (config `...:splitkv:paged:sinks`) computes its split partials without
    them and its merge joins them, as the dense split-KV decode does.

    softcap (flash-attn's; 0: none) caps the scaled scores at
    softcap * tanh(s / softcap): the score_mod fa.mods.softcap(softcap).
    score_mod and mask_mod (fa.attention's: names with their mod_args, or
    Python functions of (score,) b, h, q_idx, kv_idx) apply to every score,
    kv_idx the key's position in its sequence and q_idx the query's row
    (0 .. Sq - 1); kernels: config `...:splitkv:paged:mod=NAME` (compiled on
    first use as the mods of fa.attention are).
    """
    import torch
    from . import _bundle, _launch, _sm_count, _tensor
    from . import softmax_scale as _softmax_scale
    b = _bundle(bundle)
    if block_table is not None:
        if page_table is not None:
            _fail("give page_table or flash-attn's block_table, not both")
        page_table = block_table
    return_lse = return_lse or return_softmax_lse
    if (k is None) != (v is None):
        _fail("give k and v together (the new keys and values)")
    if k is None and (rotary_cos is not None or rotary_sin is not None):
        _fail("rotary_cos/rotary_sin rotate appended keys; give k and v too")
    _check_tensors(q, k_cache, v_cache, page_table)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k_cache, v_cache)):
        _fail("the paged backward is not built (forward only); call it under "
              "torch.no_grad() or with inputs that do not require grad")
    if not isinstance(num_splits, int) or num_splits < 0:
        _fail("num_splits must be an int >= 0 (0: chosen), got %r" % (num_splits,))
    batch, sq, heads, d = q.shape
    dv = v_cache.shape[3]
    paged_cache = page_table
    if page_table is None:
        # B pages of the whole cache, sequence b's the b-th.
        page_table = torch.arange(batch, dtype=torch.int32, device=q.device).view(batch, 1)
    page_table = page_table.contiguous()
    page_size, max_pages = k_cache.shape[1], page_table.shape[1]
    capacity = page_size * max_pages
    used = _seqlens(cache_seqlens, q, capacity)
    from .varlen import _mask_of
    mask, window = _mask_of(causal, False, window_size)
    if sinks is not None:
        from .sinks import check_sinks
        check_sinks(sinks, q.transpose(1, 2))
    score_mod, mask_mod, tensors = _call_mods(q, softcap, score_mod, mask_mod, mod_args)
    kernel, packed = _kernel(b, q, k_cache, dv, mask, window, capacity, append=k is not None,
                             sinks=sinks is not None, score_mod=score_mod, mask_mod=mask_mod)
    if score_mod is not None or mask_mod is not None:
        from . import _check_mod_arg_count
        _check_mod_arg_count(b, kernel, score_mod, tensors, mask_mod)
    if k is not None and k.shape[1] > 0:
        q = _append(b, kernel, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, used,
                    paged_cache.contiguous() if paged_cache is not None else None,
                    rotary_interleaved, causal)
        used = used + k.shape[1]
    o = torch.empty((batch, sq, heads, dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, sq), dtype=torch.float32, device=q.device)
    if q.numel() == 0:
        return (o, lse) if return_lse else o
    splits = ctypes.c_int32(num_splits)
    if num_splits == 0:
        check(b.lib, b.lib.fa_splitkv_choose_gqa(kernel, batch, heads, k_cache.shape[2], sq,
                                                 capacity, _sm_count(q), ctypes.byref(splits)))
    nbytes = ctypes.c_uint64()
    check(b.lib, b.lib.fa_splitkv_workspace_bytes(kernel, batch, heads, sq, splits.value,
                                                  ctypes.byref(nbytes)))
    workspace = torch.empty((nbytes.value,), dtype=torch.uint8, device=q.device)
    # The kernels take [B, H, N, D] views: q and o transposed, strides kept.
    args = ForwardArgs(_tensor(q.transpose(1, 2)), _tensor(k_cache), _tensor(v_cache),
                       _tensor(o.transpose(1, 2)), _tensor(lse), _softmax_scale(d, softmax_scale))
    paged = PagedKv(page_table.data_ptr(), used.data_ptr(), max_pages, page_size,
                    k_cache.shape[0])
    if score_mod is not None or mask_mod is not None:
        from . import _mod_arg_array
        from .sinks import aligned
        s = None if sinks is None else ctypes.byref(_tensor(aligned(sinks)))
        _launch(b.lib, b.lib.fa_attention_forward_paged_ex, kernel, args, q,
                ctypes.byref(paged), workspace.data_ptr(), nbytes.value, splits.value,
                _mod_arg_array(tensors), len(tensors), s)
    elif sinks is None:
        _launch(b.lib, b.lib.fa_attention_forward_paged, kernel, args, q, ctypes.byref(paged),
                workspace.data_ptr(), nbytes.value, splits.value)
    else:
        from .sinks import aligned
        s = _tensor(aligned(sinks))
        _launch(b.lib, b.lib.fa_attention_forward_paged_sinks, kernel, args, q,
                ctypes.byref(paged), workspace.data_ptr(), nbytes.value, splits.value,
                ctypes.byref(s))
    return (o, lse) if return_lse else o


def _call_mods(q, softcap, score_mod, mask_mod, mod_args):
    """(score_mod name, mask_mod name, the tensors they read) of a call:
    flash-attn's softcap as the score_mod fa.mods.softcap(softcap)."""
    from . import _mod_args_for, _mods, mods
    if not isinstance(softcap, (int, float)) or softcap < 0 or softcap != softcap:
        _fail("softcap must be a number >= 0 (0: none), got %r" % (softcap,))
    if softcap:
        if score_mod is not None:
            _fail("give softcap or a score_mod, not both (softcap is the score_mod "
                  "fa.mods.softcap(%g))" % softcap)
        score_mod = mods.softcap(softcap)
    score_mod, mask_mod, tensors = _mods(score_mod, mask_mod, mod_args)
    return score_mod, mask_mod, _mod_args_for(tensors, q)
