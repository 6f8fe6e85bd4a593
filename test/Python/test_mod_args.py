#!/usr/bin/env python3
"""score_mods that read tensors (mod_args) in the Python package, without a
GPU: Debian's CPU PyTorch. A Python score_mod indexing captured tensors is
traced into a library function taking them (fa.mods), compiled by fa-aot on
a bundle miss (the JIT) into kernels whose manifest lists them; a named
library score_mod's extents (fa.dims) reach Bundle.kernels(); the argument
struct Python builds passes the runtime's checks (and fails them with the
runtime's message when an extent is wrong); the errors fa.attention raises
before any launch name what is wrong.

    test_mod_args.py --fa-aot build/bin/fa-aot --lib build/lib/libfa_runtime.so \
        --bundle build/test/Runtime/fixture-bundle --library test/gpu/score_mod_args.mlir
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402

import fa  # noqa: E402
from support import expect_error  # noqa: E402
from fa import mods  # noqa: E402
from fa._runtime import FWD, ForwardArgs  # noqa: E402


def check_tracing():
    slopes = torch.ones(8)
    table = torch.zeros(8, 399, dtype=torch.bfloat16)
    ids = torch.zeros(2, 300, dtype=torch.int32)
    nk = 300
    alibi = mods.trace(lambda s, b, h, q, kv: s + slopes[h] * (kv - q))
    assert alibi.tensors == (slopes,), alibi.tensors
    assert "%m0: tensor<?xf32>" in alibi.mlir, alibi.mlir
    assert "tensor.extract %m0[%h] : tensor<?xf32>" in alibi.mlir, alibi.mlir
    # Two tensors, each read once in order of first read; bf16 widened to
    # f32, integers as indices; a tensor read twice is one mod_arg.
    mixed = mods.trace(lambda s, b, h, q, kv: fa.mods.where(
        ids[b, kv] == ids[b, q], s + table[h, q - kv + nk - 1], s - table[h, 0]))
    assert mixed.tensors == (ids, table), [t.dtype for t in mixed.tensors]
    assert "%m0: tensor<?x?xi32>, %m1: tensor<?x?xbf16>" in mixed.mlir, mixed.mlir
    assert "arith.extf" in mixed.mlir and "arith.index_cast" in mixed.mlir, mixed.mlir
    assert mixed.mlir.count("tensor.extract %m0") == 2, mixed.mlir
    # Equal programs over other tensors of the same dtype and rank share a
    # name (and so kernels); the tensors are the new ones.
    other = torch.full((8,), 2.0)
    again = mods.trace(lambda s, b, h, q, kv: s + other[h] * (kv - q))
    assert again.name == alibi.name and again.tensors == (other,), (again.name, alibi.name)
    half = torch.ones(8, dtype=torch.float16)
    assert mods.trace(lambda s, b, h, q, kv: s + half[h]).name != \
        mods.trace(lambda s, b, h, q, kv: s + slopes[h]).name
    expect_error(lambda: mods.trace(lambda s, b, h, q, kv: s + table[h]),
                 "indexed a rank-2 tensor", "index every dimension at once")
    expect_error(lambda: mods.trace(lambda s, b, h, q, kv: s + slopes[s]),
                 "a tensor index is a f32 value")
    wide = torch.ones(8, dtype=torch.float64)
    expect_error(lambda: mods.trace(lambda s, b, h, q, kv: s + wide[h]),
                 "dtype float64", "mod_args are float32, float16, bfloat16, int32 or int64")
    expect_error(lambda: mods.trace(lambda s, b, h, q, kv: s + [1.0, 2.0][h]),
                 "only captured torch tensors can be indexed")
    print("ok tracing: captured tensors become mod_args (%s, %s)" % (alibi.name, mixed.name))
    return alibi, mixed


def check_jit(args, alibi, mixed):
    b = fa.Bundle(args.bundle, args.lib)
    for traced, expect in ((alibi, [{"dtype": "f32", "dims": ["any"]}]),
                           (mixed, [{"dtype": "i32", "dims": ["any", "any"]},
                                    {"dtype": "bf16", "dims": ["any", "any"]}])):
        for direction in (FWD, 1):
            kernel = b.find(direction, "bf16", 64, 64, "causal", (-1, -1), 90,
                            score_mod=traced)
            info = b._info(kernel)
            assert info["score_mod"] == traced.name, info
            assert info["mod_args"] == expect, info["mod_args"]
    print("ok JIT: fa-aot compiled the traced mods into kernels listing their mod_args")
    return b


def build_named(args, work):
    out = os.path.join(work, "named")
    subprocess.run([args.fa_aot, "--score-mods", args.library, "-o", out,
                    "--config", "fwd:bf16:d64:none:mma_sync:mod=alibi_slopes",
                    "--config", "fwd:bf16:d64:none:mma_sync:mod=key_bias"],
                   check=True, stdout=subprocess.DEVNULL)
    return fa.Bundle(out, args.lib, jit=False)


def forward_args(q, k, v, o, lse):
    return ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)], 0.125)


def check_named_and_runtime(args, work):
    b = build_named(args, work)
    by_mod = {k["score_mod"]: k for k in b.kernels()}
    assert by_mod["alibi_slopes"]["mod_args"] == [{"dtype": "f32", "dims": ["heads"]}], by_mod
    assert by_mod["key_bias"]["mod_args"] == [{"dtype": "f32", "dims": ["batch", "nk"]}], by_mod
    kernel = b.find(FWD, "bf16", 64, 64, "none", (-1, -1), 90, "mma_sync",
                    score_mod="alibi_slopes")
    # The runtime's GPU-free checks on CPU memory: the struct and the
    # mod_arg array as Python builds them.
    q, o = (torch.zeros(2, 8, 100, 64, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.zeros(2, 2, 300, 64, dtype=torch.bfloat16) for _ in range(2))
    lse = torch.zeros(2, 8, 100)
    a = forward_args(q, k, v, o, lse)
    slopes = fa._mod_args_for((torch.ones(8),), q)
    status = b.lib.fa_attention_forward_check_ex(kernel, ctypes.byref(a),
                                                 fa._mod_arg_array(slopes), 1)
    assert status == 0, b.lib.fa_last_error().decode()
    wrong = fa._mod_args_for((torch.ones(2),), q)
    status = b.lib.fa_attention_forward_check_ex(kernel, ctypes.byref(a),
                                                 fa._mod_arg_array(wrong), 1)
    message = b.lib.fa_last_error().decode()
    assert status == 1 and "reads it as [heads] = dimension 0 of 8" in message, message
    # A strided view is copied to a contiguous tensor for the kernel.
    strided = fa._mod_args_for((torch.ones(8, 2)[:, 0],), q)
    assert strided[0].is_contiguous() and strided[0].shape == (8,), strided
    # Too few tensors for a named mod: the message says what it reads.
    expect_error(lambda: fa._check_mod_arg_count(b, kernel, "alibi_slopes", ()),
                 "score_mod 'alibi_slopes' reads 1 tensors (f32 ['heads']), but 0 were passed",
                 "mod_args=[...]")
    print("ok named mods: extents in Bundle.kernels(); the runtime checks Python's mod_args")
    return b


def check_attention_errors(b):
    q = torch.zeros(1, 8, 16, 64, dtype=torch.bfloat16, device="meta")
    k = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16, device="meta")
    slopes = torch.ones(8)
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mod_args=[slopes]),
                 "mod_args given without a score_mod")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, score_mod=lambda s, b_, h, i, j: s,
                                      mod_args=[slopes]),
                 "mod_args is for a score_mod or mask_mod given by name")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, score_mod="alibi_slopes",
                                      mod_args=[slopes]),
                 "mod_args[0] is on cpu, but q is on meta")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, score_mod="alibi_slopes",
                                      mod_args=[torch.ones((), device="meta")]),
                 "mod_args[0] is a float32 tensor of rank 0")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, score_mod="alibi_slopes",
                                      mod_args=[[1.0] * 8]),
                 "mod_args[0] is [1.0")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, score_mod="alibi_slopes",
                                      mod_args=[torch.ones(8, device="meta")] * 9),
                 "9 mod_args; a score_mod reads at most 8")
    print("ok fa.attention rejects bad mod_args before any launch, naming them")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--fa-aot", "--lib", "--bundle", "--library"):
        ap.add_argument(flag, required=True)
    args = ap.parse_args()
    args.fa_aot, args.lib = os.path.abspath(args.fa_aot), os.path.abspath(args.lib)
    with tempfile.TemporaryDirectory(prefix="fa-mod-args-") as work:
        os.environ["FA_CACHE_DIR"] = os.path.join(work, "cache")
        os.environ["FA_AOT"] = args.fa_aot
        alibi, mixed = check_tracing()
        check_jit(args, alibi, mixed)
        check_attention_errors(check_named_and_runtime(args, work))


if __name__ == "__main__":
    main()
