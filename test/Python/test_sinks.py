#!/usr/bin/env python3
"""fa.attention(..., sinks=t) without a GPU (Debian's CPU PyTorch): the
FaErrors of bad sinks before any launch, and the JIT of sink kernels: the
configs fa.Bundle.find(sinks=True) compiles with fa-aot on a miss, the
runtime's search and the checks of fa_attention_{forward,backward}_sinks on
fa-aot's manifest (fake addresses: the checks need no GPU).

    test_sinks.py --lib build/lib/libfa_runtime.so --fa-aot build/bin/fa-aot \
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
from support import expect_error, fake_tensor as fake  # noqa: E402
from fa._runtime import BWD, FWD, BackwardArgs, ForwardArgs  # noqa: E402


def check_arguments(b):
    q = torch.zeros(2, 4, 16, 64, dtype=torch.bfloat16)
    k = torch.zeros(2, 2, 16, 64, dtype=torch.bfloat16)
    call = lambda s, **kw: fa.attention(q, k, k, sinks=s, bundle=b, **kw)  # noqa: E731
    expect_error(lambda: call([0.0] * 4), "sinks must be a float32 torch tensor [H], got list")
    expect_error(lambda: call(torch.zeros(4, dtype=torch.float16)),
                 "sinks.dtype is torch.float16, expected torch.float32")
    expect_error(lambda: call(torch.zeros(2)),
                 "sinks.shape is [2], expected [4] (one logit per query head of q [B,H,Nq,D]")
    expect_error(lambda: call(torch.zeros(1, 4)), "sinks.shape is [1, 4], expected [4]")
    expect_error(lambda: call(torch.zeros(4, device="meta")),
                 "sinks are on meta and q on cpu; expected one CUDA device")


def check_jit(lib_path, fa_aot, fixture):
    """Sink kernels compiled on a miss (fa-aot), found by the query's sinks,
    and checked by the runtime with the _sinks entry points only."""
    os.environ["FA_AOT"] = fa_aot
    os.environ["FA_CACHE_DIR"] = tempfile.mkdtemp(prefix="fa-sinks-jit-")
    b = fa.Bundle(fixture, lib_path=lib_path, jit=True)
    lib = b.lib
    base, bf, f32 = 1 << 40, 1, 2
    addr = lambda i: base + (i << 32)  # noqa: E731
    B, H, Hkv, N, D = 2, 4, 2, 300, 64
    fwd = b.find(FWD, "bf16", D, D, "causal", (-1, -1), 90, "mma_sync", N, sinks=True)
    info = b._info(fwd)
    assert info["sinks"] and info["tag"].endswith("_sink") and info["direction"] == "fwd", info
    args = ForwardArgs(fake(addr(0), bf, (B, H, N, D)), fake(addr(1), bf, (B, Hkv, N, D)),
                       fake(addr(2), bf, (B, Hkv, N, D)), fake(addr(3), bf, (B, H, N, D)),
                       fake(addr(4), f32, (B, H, N)), 0.125)
    sinks = fake(addr(5), f32, (H,))
    check = lib.fa_attention_forward_sinks_check
    assert check(fwd, ctypes.byref(args), None, 0, ctypes.byref(sinks)) == 0, \
        lib.fa_last_error().decode()
    assert lib.fa_attention_forward_check(fwd, ctypes.byref(args)) == 1
    assert "has attention sinks" in lib.fa_last_error().decode()
    short = fake(addr(5), f32, (Hkv,))
    assert check(fwd, ctypes.byref(args), None, 0, ctypes.byref(short)) == 1
    assert "sinks.shape is [2], expected [4]" in lib.fa_last_error().decode()
    # The plain search never returns it.
    plain = b._info(b.find(FWD, "bf16", D, D, "causal", (-1, -1), 90, "mma_sync", N))
    assert not plain["sinks"] and not plain["tag"].endswith("_sink"), plain

    bwd = b.find(BWD, "bf16", D, D, "causal", (-1, -1), 90, None, N, sinks=True)
    info = b._info(bwd)
    assert info["sinks"] and info["direction"] == "bwd", info
    shapes = [(B, H, N, D), (B, Hkv, N, D), (B, Hkv, N, D), (B, H, N, D), (B, H, N, D),
              (B, H, N), (B, H, N, D), (B, Hkv, N, D), (B, Hkv, N, D), (B, H, N),
              (B, H, N, D)]
    dtypes = [bf] * 5 + [f32] + [bf] * 3 + [f32, f32]
    gargs = BackwardArgs(*[fake(addr(10 + i), t, s) for i, (t, s)
                           in enumerate(zip(dtypes, shapes))], 0.125)
    dsinks = fake(addr(30), f32, (H,))
    bcheck = lib.fa_attention_backward_sinks_check
    assert bcheck(bwd, ctypes.byref(gargs), None, 0, ctypes.byref(sinks),
                  ctypes.byref(dsinks)) == 0, lib.fa_last_error().decode()
    assert bcheck(bwd, ctypes.byref(gargs), None, 0, ctypes.byref(sinks), None) == 1
    assert "d_sinks is null" in lib.fa_last_error().decode()
    check_jit_mods(b, fwd_args=args, sinks=sinks, addr=addr)


def check_jit_mods(b, fwd_args, sinks, addr):
    """A sink kernel with a score_mod reading a tensor (and one with a
    mask_mod too): compiled on a miss (fa-aot refused them before: the tag
    ends in the mods, then "_sink"), found only by the query with both, and
    checked with the mod's tensor before the sinks."""
    from fa import mods
    slopes = torch.ones(4)
    alibi = mods.trace(lambda s, b, h, q, kv: s + slopes[h] * (kv - q))
    lib = b.lib
    for direction in (FWD, BWD):
        kernel = b.find(direction, "bf16", 64, 64, "causal", (-1, -1), 90, None, 300,
                        score_mod=alibi, sinks=True)
        info = b._info(kernel)
        assert info["sinks"] and info["score_mod"] == alibi.name, info
        assert info["tag"].endswith("_mod_%s_sink" % alibi.name), info["tag"]
        assert info["mod_args"] == [{"dtype": "f32", "dims": ["any"]}], info["mod_args"]
        if direction == FWD:
            fwd = kernel
    mod = (fa._runtime.Tensor * 1)(fake(addr(40), 2, (4,)))
    check = lib.fa_attention_forward_sinks_check
    assert check(fwd, ctypes.byref(fwd_args), mod, 1, ctypes.byref(sinks)) == 0, \
        lib.fa_last_error().decode()
    assert check(fwd, ctypes.byref(fwd_args), None, 0, ctypes.byref(sinks)) == 1
    error = lib.fa_last_error().decode()
    assert "mod_arg" in error, error
    # Without sinks the search does not return it.
    plain = b._info(b.find(FWD, "bf16", 64, 64, "causal", (-1, -1), 90, None, 300,
                           score_mod=alibi))
    assert not plain["sinks"], plain
    # A mask_mod with sinks, its tensor after the score_mod's: the tag ends
    # in both mods, then "_sink".
    doc = torch.zeros(2, 300, dtype=torch.int32)
    same_doc = mods.trace_mask(lambda b, h, q, kv: doc[b, q] == doc[b, kv])
    kernel = b.find(FWD, "bf16", 64, 64, "causal", (-1, -1), 90, None, 300,
                    score_mod=alibi, mask_mod=same_doc, sinks=True)
    info = b._info(kernel)
    assert info["tag"].endswith("_mod_%s_maskmod_%s_sink" % (alibi.name, same_doc.name)), \
        info["tag"]
    assert [m["dtype"] for m in info["mod_args"]] == ["f32", "i32"], info["mod_args"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--fa-aot", required=True)
    a = p.parse_args()
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    check_arguments(b)
    check_jit(a.lib, a.fa_aot, a.bundle)
    print("test_sinks: ok")


if __name__ == "__main__":
    main()
