"""fa.attention_with_kvcache: decode attention over a KV cache, paged or not,
with per-sequence key counts (flash-attn's flash_attn_with_kvcache).

The kernels are the bundle's paged split-KV forwards (fa-aot config fields
`splitkv:paged`, with `packgqa` for GQA decode; docs/ABI.md "Paged KV
cache"), or, where fa's compiler is installed, one compiled on first use.
A contiguous cache [B, Nk, Hkv, D] runs as B pages of Nk keys.
"""
import ctypes

from . import jit
from ._runtime import DTYPE_NAMES, FWD, MASKS, FaError, ForwardArgs, KernelQuery, PagedKv, check

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


def _find(b, dtype, d, dv, mask, packed, capacity, cap):
    """The loaded bundles' paged kernel for compute capability `cap`, else
    one compiled now (where fa-aot is installed); None when neither."""
    from . import _dtype_code
    key = ("paged", packed, dtype, d, dv, mask, cap)
    if key in b._cache:
        return b._cache[key]
    query = KernelQuery(FWD, _dtype_code(dtype), d, dv, MASKS[mask], -1, -1, cap, 0, None,
                        None)

    def find(handle, qy, n, out):
        return b.lib.fa_kernel_find_paged(handle, qy, n, int(packed), out)

    found = b._search(query, capacity, find=find)
    if found is None and b.jit and jit.find_compiler() is not None:
        config = jit.config_text(FWD, DTYPE_NAMES[query.dtype], d, dv, mask, (-1, -1), cap,
                                 "mma_sync") + (":packgqa" if packed else "") + ":splitkv:paged"
        handle = b._load(jit.compile_bundle(config))
        out = ctypes.c_void_p()
        status = b.lib.fa_kernel_find_paged(handle, ctypes.byref(query), capacity,
                                            int(packed), ctypes.byref(out))
        if status:
            b.lib.fa_bundle_free(handle)
            check(b.lib, status)
        b._handles.append(handle)
        found = out
    b._cache[key] = found
    return found


def _kernel(b, q, k_cache, dv, mask, capacity):
    """The packed-GQA paged kernel for GQA decode (as fa.attention takes the
    packed split kernel), else the unpacked one; FaError naming the config
    when the bundles have neither."""
    from . import _capability
    heads, kv_heads = q.shape[2], k_cache.shape[2]
    group = heads // kv_heads
    packed = 1 < group <= 64 and q.shape[1] < 64
    find = lambda pack: _find(b, q.dtype, q.shape[-1], dv, mask, pack, capacity,  # noqa: E731
                              _capability(q))
    kernel = find(True) if packed else None
    if kernel is None:
        kernel, packed = find(False), False
    if kernel is None:
        import torch
        config = "fwd:%s:d%d:%s%s:splitkv:paged" % (
            "bf16" if q.dtype == torch.bfloat16 else "f16", q.shape[-1],
            "" if dv == q.shape[-1] else "v%d:" % dv, mask)
        raise FaError(2, "fa.attention_with_kvcache: no paged kernel for %s; build it with "
                      "fa-aot -o DIR --config %s (and :packgqa for GQA decode) and load DIR "
                      "too, or install fa-aot for JIT" % (config, config))
    return kernel, packed


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None,
                           softmax_scale=None, causal=False, num_splits=0, return_lse=False,
                           bundle=None, block_table=None, return_softmax_lse=False):
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
    1/sqrt(D). num_splits (0: chosen from the problem and the SM count) is
    the key splits of the split-KV kernel. Returns O [B, Sq, H, Dv], with
    return_lse also LSE [B, H, Sq] f32 (-inf for a row that sees no key).
    Page indices outside [0, num_pages) are clamped and counts clamped to
    [0, max_pages x page_size] by the kernel (never read on the host).
    Forward only; k_new/v_new appends are not supported yet. flash-attn's
    names block_table and return_softmax_lse are accepted for page_table and
    return_lse.
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
    _check_tensors(q, k_cache, v_cache, page_table)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k_cache, v_cache)):
        _fail("the paged backward is not built (forward only); call it under "
              "torch.no_grad() or with inputs that do not require grad")
    if not isinstance(num_splits, int) or num_splits < 0:
        _fail("num_splits must be an int >= 0 (0: chosen), got %r" % (num_splits,))
    batch, sq, heads, d = q.shape
    dv = v_cache.shape[3]
    if page_table is None:
        # B pages of the whole cache, sequence b's the b-th.
        page_table = torch.arange(batch, dtype=torch.int32, device=q.device).view(batch, 1)
    page_table = page_table.contiguous()
    page_size, max_pages = k_cache.shape[1], page_table.shape[1]
    capacity = page_size * max_pages
    used = _seqlens(cache_seqlens, q, capacity)
    mask = "causal_bottom_right" if causal else "none"
    kernel, packed = _kernel(b, q, k_cache, dv, mask, capacity)
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
    _launch(b.lib, b.lib.fa_attention_forward_paged, kernel, args, q, ctypes.byref(paged),
            workspace.data_ptr(), nbytes.value, splits.value)
    return (o, lse) if return_lse else o
