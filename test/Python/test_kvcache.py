#!/usr/bin/env python3
"""fa.attention_with_kvcache without a GPU (Debian's CPU PyTorch): the
argument checks that raise FaError before any launch, and the JIT config of
a paged kernel, compiled by fa-aot into a bundle whose kernel only the paged
search returns and whose launch check accepts a paged call (fake addresses).

    test_kvcache.py --lib build/lib/libfa_runtime.so --fa-aot build/bin/fa-aot \
        --bundle build/test/Runtime/fixture-bundle
"""
import argparse
import ctypes
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402

import fa  # noqa: E402
from support import expect_error  # noqa: E402
from fa import kvcache  # noqa: E402
from fa._runtime import FWD, MASKS, ForwardArgs, KernelQuery, PagedKv, Tensor  # noqa: E402


def check_arguments(b):
    bf = torch.bfloat16
    q = torch.zeros(2, 1, 8, 64, dtype=bf)
    pages = torch.zeros(10, 16, 2, 64, dtype=bf)
    table = torch.zeros(2, 4, dtype=torch.int32)
    call = lambda *a, **kw: fa.attention_with_kvcache(*a, bundle=b, **kw)  # noqa: E731
    expect_error(lambda: call(q[0], pages, pages, page_table=table),
                 "q must be a 4-D tensor", "got torch.bfloat16 (1, 8, 64)")
    expect_error(lambda: call(q, pages.half(), pages, page_table=table),
                 "k_cache has dtype torch.float16; q and the caches must be float16 or "
                 "bfloat16, all alike (q: torch.bfloat16)")
    expect_error(lambda: call(q.float(), pages.float(), pages.float(), page_table=table),
                 "q has dtype torch.float32")
    expect_error(lambda: call(q, pages, pages[:, :, :1], page_table=table),
                 "k_cache (10, 16, 2, 64) and v_cache (10, 16, 1, 64) must have the same")
    expect_error(lambda: call(q, pages[..., :32], pages, page_table=table),
                 "q's head dim 64 differs from k_cache's 32")
    expect_error(lambda: call(q[:, :, :3], pages, pages, page_table=table),
                 "q has 3 heads and k_cache 2")
    expect_error(lambda: call(q, pages, pages, page_table=table.long()),
                 "page_table must be an int32 [batch, max_pages] tensor with batch 2 of q")
    expect_error(lambda: call(q, pages, pages, page_table=table[:1]),
                 "page_table must be an int32 [batch, max_pages]", "(1, 4)")
    expect_error(lambda: call(q, pages[:, :8], pages[:, :8], page_table=table),
                 "the page size is 8 keys; it must be a positive multiple of 16")
    # Appending: k and v together, rotary only with them.
    expect_error(lambda: call(q, pages, pages, page_table=table, k=q),
                 "give k and v together")
    expect_error(lambda: call(q, pages, pages, page_table=table, rotary_cos=table,
                              rotary_sin=table), "rotary_cos/rotary_sin rotate appended keys")
    # flash-attn's name for the page table.
    expect_error(lambda: call(q, pages, pages, block_table=table.long()),
                 "page_table must be an int32 [batch, max_pages] tensor")
    expect_error(lambda: call(q, pages, pages, page_table=table, block_table=table),
                 "give page_table or flash-attn's block_table, not both")
    # Without a page table the caches are [batch, seqlen_k, kv_heads, D].
    expect_error(lambda: call(q, pages, pages), "k_cache has 10 sequences and q 2")
    cache = torch.zeros(2, 24, 2, 64, dtype=bf)
    expect_error(lambda: call(q, cache, cache),
                 "the cache length is 24 keys; it must be a positive multiple of 16")
    # Well-formed, but not on a GPU.
    expect_error(lambda: call(q, pages, pages, page_table=table), "q is on cpu")
    expect_error(lambda: call(q, pages, pages, page_table=table, num_splits=-1),
                 "q is on cpu")
    # Forward only.
    grad = q.clone().requires_grad_()
    expect_error(lambda: call(grad, pages, pages, page_table=table), "q is on cpu")


def check_seqlens():
    q = torch.zeros(3, 1, 8, 64, dtype=torch.bfloat16)
    expect_error(lambda: kvcache._seqlens(300, q, 256),
                 "cache_seqlens 300 must be in [0, 256] (the cache's keys)")
    expect_error(lambda: kvcache._seqlens(-1, q, 256), "cache_seqlens -1 must be in")
    expect_error(lambda: kvcache._seqlens(torch.zeros(3, dtype=torch.int64), q, 256),
                 "cache_seqlens must be an int, or an int32 [batch] tensor with batch 3 of q, "
                 "got torch.int64 (3,)")
    expect_error(lambda: kvcache._seqlens(torch.zeros(2, dtype=torch.int32), q, 256),
                 "with batch 3 of q")
    expect_error(lambda: kvcache._seqlens(torch.zeros(3, dtype=torch.int32), q, 256),
                 "cache_seqlens is on cpu")


def fake(address, dtype, shape, strides=None):
    """An fa_tensor at a fake device address (checks never dereference)."""
    t = Tensor()
    t.data, t.dtype, t.rank = address, dtype, len(shape)
    step = 1
    for i in reversed(range(len(shape))):
        t.shape[i] = shape[i]
        t.strides[i] = strides[i] if strides else step
        step *= shape[i]
    return t


def check_jit(b, fa_aot):
    """The config attention_with_kvcache compiles on a miss (packed GQA),
    and the runtime's paged search and launch check over fa-aot's bundle."""
    os.environ["FA_AOT"] = fa_aot
    os.environ["FA_CACHE_DIR"] = tempfile.mkdtemp(prefix="fa-kvcache-jit-")
    b.jit = True
    kernel = kvcache._find(b, torch.bfloat16, 64, 64, "causal_bottom_right", (-1, -1), True, 64,
                           90)
    assert kernel is not None
    info = b._info(kernel)
    assert info["tag"].endswith("_packgqa_splitkv_paged"), info["tag"]
    assert info["split_kv"] and info["pack_gqa"] and info["paged"], info
    query = KernelQuery(FWD, 1, 64, 64, MASKS["causal_bottom_right"], -1, -1, 90, 0, None, None)
    out = ctypes.c_void_p()
    handle = b._handles[-1]
    # Without a mask on sm_90a, the TMA tile of the rows: 16 for 4 heads x 1.
    tma = kvcache._find(b, torch.bfloat16, 64, 64, "none", (-1, -1), True, 64, 90,
                        rows=(4, 1))
    tag = b._info(tma)["tag"]
    assert tag.endswith("bq16_bkv64_w1_s2_none_sm90a_packgqa_splitkv_paged_pw_tma"), tag
    # Only the paged search returns it.
    assert b.lib.fa_kernel_find_packed_gqa(handle, ctypes.byref(query), 64, 1,
                                           ctypes.byref(out)) == 2
    assert b.lib.fa_kernel_find_paged(handle, ctypes.byref(query), 64, 1,
                                      ctypes.byref(out)) == 0
    # A decode step of 2 sequences, 8 heads on 2, pages of 16 (q and o as
    # attention_with_kvcache passes them: [B, Sq, H, D] transposed).
    base = 1 << 40
    args = ForwardArgs(fake(base, 1, (2, 8, 1, 64), (512, 64, 512, 1)),
                       fake(base + (1 << 32), 1, (10, 16, 2, 64)),
                       fake(base + (2 << 32), 1, (10, 16, 2, 64)),
                       fake(base + (3 << 32), 1, (2, 8, 1, 64), (512, 64, 512, 1)),
                       fake(base + (4 << 32), 2, (2, 8, 1)), 0.125)
    paged = PagedKv(base + (5 << 32), base + (6 << 32), 4, 16, 10)
    nbytes = ctypes.c_uint64()
    assert b.lib.fa_splitkv_workspace_bytes(out, 2, 8, 1, 3, ctypes.byref(nbytes)) == 0
    ws = base + (7 << 32)
    status = b.lib.fa_attention_forward_paged_check(out, ctypes.byref(args),
                                                    ctypes.byref(paged), ws, nbytes.value, 3)
    assert status == 0, b.lib.fa_last_error().decode()
    paged.page_size = 32
    assert b.lib.fa_attention_forward_paged_check(out, ctypes.byref(args), ctypes.byref(paged),
                                                  ws, nbytes.value, 3) == 1
    assert "expected [10,32,2,64]" in b.lib.fa_last_error().decode()
    # The dense split-KV launch refuses it.
    assert b.lib.fa_attention_forward_splitkv_check(out, ctypes.byref(args), ws,
                                                    nbytes.value, 3) == 1
    assert "use fa_attention_forward_paged" in b.lib.fa_last_error().decode()
    # A window (flash-attn's window_size) compiles once, without its sizes:
    # each window is a view of the one kernel that reports its sizes.
    for window in ((100, 0), (-1, 7)):
        found = kvcache._find(b, torch.bfloat16, 64, 64, "window", window, True, 64, 90)
        info = b._info(found)
        assert "_window_rt_" in info["tag"], info["tag"]
        assert (info["window_left"], info["window_right"]) == window, info
    # With attention sinks: `...:paged:sinks` compiles on a miss, found only by
    # a query with sinks, launched only through the _sinks entry point.
    with_sinks = kvcache._find(b, torch.bfloat16, 64, 64, "causal_bottom_right", (-1, -1),
                               True, 64, 90, sinks=True)
    info = b._info(with_sinks)
    assert info["tag"].endswith("_packgqa_splitkv_paged_sink"), info["tag"]
    assert info["sinks"] and info["paged"], info
    paged.page_size = 16
    sinks = fake(base + (8 << 32), 2, (8,))
    status = b.lib.fa_attention_forward_paged_sinks_check(
        with_sinks, ctypes.byref(args), ctypes.byref(paged), ws, nbytes.value, 3,
        ctypes.byref(sinks))
    assert status == 0, b.lib.fa_last_error().decode()
    assert b.lib.fa_attention_forward_paged_check(with_sinks, ctypes.byref(args),
                                                  ctypes.byref(paged), ws, nbytes.value, 3) == 1
    assert "launch it with fa_attention_forward_paged_sinks" in b.lib.fa_last_error().decode()
    bad = fake(base + (8 << 32), 2, (2,))
    assert b.lib.fa_attention_forward_paged_sinks_check(
        with_sinks, ctypes.byref(args), ctypes.byref(paged), ws, nbytes.value, 3,
        ctypes.byref(bad)) == 1
    assert "sinks.shape is [2], expected [8]" in b.lib.fa_last_error().decode()
    check_mods(b, args, paged, ws, nbytes.value)


def check_mods(b, args, paged, ws, nbytes):
    """softcap as flash-attn passes it and Python mods reading tensors: the
    paged kernel with them compiles on a miss (its tag ends in the mod), and
    fa_attention_forward_paged_check_ex takes a key bias [B, capacity] (4
    pages of 16 here) as its mod_arg."""
    from fa import mods
    q = torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16)
    expect_error(lambda: kvcache._call_mods(q, -1.0, None, None, None),
                 "softcap must be a number >= 0 (0: none), got -1.0")
    expect_error(lambda: kvcache._call_mods(q, 30.0, "softcap30", None, None),
                 "give softcap or a score_mod, not both")
    capped, _, tensors = kvcache._call_mods(q, 30.0, None, None, None)
    assert capped == mods.trace(mods.softcap(30)).name and not tensors, capped
    kernel = kvcache._find(b, torch.bfloat16, 64, 64, "none", (-1, -1), True, 64, 90,
                           rows=(4, 1), score_mod=capped)
    tag = b._info(kernel)["tag"]
    assert tag.endswith("_packgqa_splitkv_paged_pw_tma_mod_" + capped), tag
    bias = torch.zeros(2, 64)
    name, _, tensors = kvcache._call_mods(q, 0, lambda s, b_, h, q_, kv: s + bias[b_, kv],
                                          None, None)
    kernel = kvcache._find(b, torch.bfloat16, 64, 64, "causal_bottom_right", (-1, -1), True,
                           64, 90, rows=(4, 1), score_mod=name)
    info = b._info(kernel)
    assert info["paged"] and info["score_mod"] == name and len(info["mod_args"]) == 1, info
    base = 1 << 40

    mod = (Tensor * 1)(fake(base + (9 << 32), 2, (2, 64)))
    assert b.lib.fa_attention_forward_paged_check_ex(
        kernel, ctypes.byref(args), ctypes.byref(paged), ws, nbytes, 3, mod, 1, None) == 0, \
        b.lib.fa_last_error().decode()
    # Without the bias (and through the launch that passes no mod_args): refused.
    assert b.lib.fa_attention_forward_paged_check_ex(
        kernel, ctypes.byref(args), ctypes.byref(paged), ws, nbytes, 3, None, 0, None) == 1
    assert "reads 1 (f32 [any, any])" in b.lib.fa_last_error().decode()
    assert b.lib.fa_attention_forward_paged_check(kernel, ctypes.byref(args),
                                                  ctypes.byref(paged), ws, nbytes, 3) == 1
    print("ok paged decode with softcap (%s) and a Python key bias: compiled on a miss, "
          "launched through fa_attention_forward_paged_ex with the bias" % capped)



def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--fa-aot", required=True)
    a = p.parse_args()
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    check_arguments(b)
    check_seqlens()
    check_jit(b, a.fa_aot)
    print("test_kvcache: ok")


if __name__ == "__main__":
    main()
