#!/usr/bin/env python3
"""fa.attention_varlen without a GPU (Debian's CPU PyTorch): the argument
checks that raise FaError before any launch, flash-attn's mask meanings
mapped onto fa's kernels, the host check of the offsets through
libfa_runtime (fa_varlen_check_seqlens), and the JIT config of a varlen
kernel, compiled by fa-aot into a bundle the runtime's varlen search answers.

    test_varlen.py --lib build/lib/libfa_runtime.so --fa-aot build/bin/fa-aot \
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
from support import expect_error, fake_tensor as packed  # noqa: E402
from fa import varlen  # noqa: E402
from fa._runtime import (BWD, FWD, MASKS, KernelQuery, VarlenArgs,  # noqa: E402
                         VarlenBackwardArgs)


def check_arguments(b):
    q = torch.zeros(10, 4, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    call = lambda *a, **kw: fa.attention_varlen(*a, bundle=b, **kw)  # noqa: E731
    expect_error(lambda: call(q[0], q, q, cu, cu, 6, 6),
                 "q must be a packed [total_tokens, heads, head_dim] tensor, got (4, 64)")
    expect_error(lambda: call(q, q, q, cu, cu, 6, 6), "q is on cpu")
    expect_error(lambda: call(q, q, q, cu.long(), cu, 6, 6),
                 "cu_seqlens_q must be a 1-D int32 tensor of batch + 1 offsets, got "
                 "torch.int64 (3,)")
    expect_error(lambda: call(q, q, q, cu, cu[:2], 6, 6),
                 "cu_seqlens_q has 3 offsets and cu_seqlens_k 2")


def check_masks():
    m = varlen._mask_of
    assert m(False, False, (-1, -1)) == ("none", (-1, -1))
    # flash-attn: causal is bottom-right, a window with causal closes right.
    assert m(True, False, (-1, -1)) == ("causal_bottom_right", (-1, -1))
    assert m(True, False, (64, 5)) == ("window", (64, 0))
    assert m(False, False, (100, 20)) == ("window", (100, 20))
    assert m(False, False, (-1, 20)) == ("window", (-1, 20))
    assert m(False, True, (-1, -1)) == ("causal", (-1, -1))
    expect_error(lambda: m(True, True, (-1, -1)), "causal_top_left excludes causal")


def check_offsets(b):
    cu_q = torch.tensor([0, 3, 3, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 5, 11], dtype=torch.int32)
    # Tokens past the last sequence are allowed; lengths differ here.
    assert varlen._check_offsets(b.lib, cu_q, cu_k, 9, 12, 6, 6) is False
    assert varlen._check_offsets(b.lib, cu_q, cu_q, 9, 9, 6, 6) is True
    expect_error(lambda: varlen._check_offsets(b.lib, cu_q, cu_k, 9, 12, 5, 6),
                 "sequence 2 has 6 tokens (cu_seqlens_q[2] = 3, [3] = 9), more than "
                 "max_seqlen_q = 5")
    expect_error(lambda: varlen._check_offsets(b.lib, cu_q, cu_k, 9, 10, 6, 6),
                 "cu_seqlens_k[3] = 11 is past the packed tensor's 10 tokens")
    down = torch.tensor([0, 3, 2, 9], dtype=torch.int32)
    expect_error(lambda: varlen._check_offsets(b.lib, down, cu_k, 9, 12, 9, 9),
                 "cu_seqlens_q[2] = 2 is below cu_seqlens_q[1] = 3")


def check_jit(b, fa_aot):
    """The config attention_varlen compiles on a miss, and the runtime's
    varlen search over the bundle fa-aot makes of it."""
    os.environ["FA_AOT"] = fa_aot
    os.environ["FA_CACHE_DIR"] = tempfile.mkdtemp(prefix="fa-varlen-jit-")
    query = KernelQuery(FWD, 1, 64, 64, MASKS["causal"], -1, -1, 90, 0, None, None)
    kernel = varlen._compile(b, query, "causal", (-1, -1), 90, 1024)
    info = b._info(kernel)
    assert info["varlen"] and info["mask"] == "causal" and info["head_dim"] == 64, info
    assert info["tag"].endswith("_varlen"), info["tag"]
    # fa-aot's manifest entry takes packed arguments (fake addresses: the
    # check needs no GPU) and refuses dense ones.
    base = 1 << 40
    args = VarlenArgs(packed(base, 1, (300, 4, 64)), packed(base + (1 << 32), 1, (500, 2, 64)),
                      packed(base + (2 << 32), 1, (500, 2, 64)),
                      packed(base + (3 << 32), 1, (300, 4, 64)),
                      packed(base + (4 << 32), 2, (4, 300)), base + (5 << 32), base + (6 << 32),
                      3, 200, 0.125)
    status = b.lib.fa_attention_forward_varlen_check(kernel, ctypes.byref(args))
    assert status == 0, b.lib.fa_last_error().decode()
    args.lse = packed(base + (4 << 32), 2, (300, 4))
    assert b.lib.fa_attention_forward_varlen_check(kernel, ctypes.byref(args)) == 1
    assert "lse.shape is [300,4], expected [4,300]" in b.lib.fa_last_error().decode()
    # The dense search never returns it.
    out = ctypes.c_void_p()
    assert b.lib.fa_kernel_find(b._handles[-1], ctypes.byref(query), ctypes.byref(out)) == 2


def fake_address(i):
    """The i-th of some fake, well-separated device addresses."""
    return (1 << 40) + (i << 32)


def backward_args(tq=300, tk=500, h=4, hkv=2, d=64):
    """A varlen backward's packed tensors at fake addresses (3 sequences,
    max_seqlen_k 200): q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum."""
    at = fake_address
    tensors = [packed(at(0), 1, (tq, h, d)), packed(at(1), 1, (tk, hkv, d)),
               packed(at(2), 1, (tk, hkv, d)), packed(at(3), 1, (tq, h, d)),
               packed(at(4), 1, (tq, h, d)), packed(at(5), 2, (h, tq)),
               packed(at(6), 1, (tq, h, d)), packed(at(7), 1, (tk, hkv, d)),
               packed(at(8), 1, (tk, hkv, d)), packed(at(9), 2, (h, tq)),
               packed(at(10), 2, (h, tq, d))]
    return VarlenBackwardArgs(*tensors, at(11), at(12), 3, 200, 0.125)


def check_jit_backward(b):
    """The varlen backward attention_varlen's autograd compiles on a miss
    (`bwd:...:varlen`: the warp-specialised wgmma backward at D = 64 and, its
    warpgroups split by role, 256; mma.sync where no wgmma backward exists),
    found by the varlen search, whose check takes the packed gradients and
    workspaces."""
    kernels = {}
    for d, mma in ((80, "mma_sync"), (256, "wgmma"), (64, "wgmma")):
        query = KernelQuery(BWD, 1, d, d, MASKS["causal_bottom_right"], -1, -1, 90, 0, None,
                            None)
        kernels[d] = varlen._compile(b, query, "causal_bottom_right", (-1, -1), 90, 1024)
        info = b._info(kernels[d])
        assert info["varlen"] and info["direction"] == "bwd" and info["mma"] == mma, info
    kernel = kernels[64]
    args = backward_args()
    status = b.lib.fa_attention_backward_varlen_check(kernel, ctypes.byref(args))
    assert status == 0, b.lib.fa_last_error().decode()
    args.dq_accum = packed(fake_address(10), 2, (300, 4, 64))
    assert b.lib.fa_attention_backward_varlen_check(kernel, ctypes.byref(args)) == 1
    assert "dq_accum.shape is [300,4,64], expected [4,300,64]" in \
        b.lib.fa_last_error().decode(), b.lib.fa_last_error().decode()


def check_sinks(b):
    """attention_varlen(..., sinks=t): bad sinks refused before anything
    else; the varlen backward with sinks its autograd compiles on a miss
    (`bwd:...:varlen:sinks`), whose _sinks check takes sinks and d_sinks
    [H] and whose plain check refuses it."""
    q = torch.zeros(10, 4, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    call = lambda s: fa.attention_varlen(q, q, q, cu, cu, 6, 6, bundle=b, sinks=s)  # noqa: E731
    expect_error(lambda: call(torch.zeros(3)),
                 "sinks.shape is [3], expected [4] (one logit per query head of q [Tq,H,D]")
    expect_error(lambda: call(torch.zeros(4, dtype=torch.float16)),
                 "sinks.dtype is torch.float16, expected torch.float32")
    expect_error(lambda: call([0.0] * 4), "sinks must be a float32 torch tensor [H], got list")
    query = KernelQuery(BWD, 1, 64, 64, MASKS["causal"], -1, -1, 90, 0, None, None, 1)
    kernel = varlen._compile(b, query, "causal", (-1, -1), 90, 1024)
    info = b._info(kernel)
    assert info["varlen"] and info["sinks"] and info["tag"].endswith("_varlen_sink"), info
    args = backward_args()
    sinks, dsinks = packed(fake_address(13), 2, (4,)), packed(fake_address(14), 2, (4,))
    status = b.lib.fa_attention_backward_varlen_sinks_check(
        kernel, ctypes.byref(args), ctypes.byref(sinks), ctypes.byref(dsinks))
    assert status == 0, b.lib.fa_last_error().decode()
    assert b.lib.fa_attention_backward_varlen_check(kernel, ctypes.byref(args)) == 1
    assert "has attention sinks; launch it with fa_attention_backward_varlen_sinks" in \
        b.lib.fa_last_error().decode(), b.lib.fa_last_error().decode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--fa-aot", required=True)
    a = p.parse_args()
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    check_arguments(b)
    check_masks()
    check_offsets(b)
    check_jit(b, a.fa_aot)
    check_jit_backward(b)
    check_sinks(b)
    print("test_varlen: ok")


if __name__ == "__main__":
    main()
