#!/usr/bin/env python3
"""The GPU quantiser from Python without a GPU: fa-aot builds an fp8 forward
with its quantiser (config field quant=bf16), the bundle search finds it by
input type and head dim (and not for another type), a bundle that compiles
on first use builds the missing one (FA_AOT, a fresh cache), and the
runtime's GPU-free check of fa_quantize, called through the Python binding
with fake device tensors, accepts a valid call and refuses a bad one with
its message.

    test_quantize.py --fa-aot build/bin/fa-aot --lib build/lib/libfa_runtime.so
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
os.environ["FA_TORCH_EXT"] = "0"

import fa  # noqa: E402
from fa._runtime import DTYPES, QuantizeArgs  # noqa: E402
from support import fake_tensor  # noqa: E402

GIB = 1 << 30


def quantize_args(heads, groups, rows=100, d=128):
    """fa_quantize_args of bf16 x [2, heads, rows, d] with a [2, groups]
    descale and its workspace, at fake, well-separated addresses."""
    blocks = -(-rows // 64)
    a = QuantizeArgs()
    a.x = fake_tensor(1 * GIB, DTYPES["bf16"], [2, heads, rows, d])
    a.x8 = fake_tensor(2 * GIB, DTYPES["f8e4m3"], [2, heads, rows, d])
    a.descale = fake_tensor(3 * GIB, DTYPES["f32"], [2, groups])
    a.workspace = fake_tensor(4 * GIB, DTYPES["f32"], [2, heads, blocks])
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fa-aot", required=True)
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        bundle_dir = os.path.join(work, "bundle")
        subprocess.run([args.fa_aot, "-o", bundle_dir, "--config",
                        "fwd:f8e4m3:d128:none:wgmma:quant=bf16"], check=True,
                       stdout=subprocess.DEVNULL)
        b = fa.Bundle(bundle_dir, args.lib, jit=False)
        found = b._find_quantizer("bf16", 128)
        assert found is not None and found[1] is b, found
        assert b._find_quantizer("f16", 128) is None
        assert b._find_quantizer("bf16", 256) is None
        print("ok search: bf16 d128 found, f16 and d256 not (no JIT)")

        kernel = found[0]
        ok = quantize_args(heads=8, groups=2)
        assert b.lib.fa_quantize_check(kernel, ctypes.byref(ok)) == 0, \
            b.lib.fa_last_error().decode()
        bad = quantize_args(heads=8, groups=3)
        assert b.lib.fa_quantize_check(kernel, ctypes.byref(bad)) != 0
        message = b.lib.fa_last_error().decode()
        assert "expected [2, G] with G dividing H = 8" in message, message
        print("ok check: %s" % message)

        os.environ["FA_AOT"] = args.fa_aot
        os.environ["FA_CACHE_DIR"] = os.path.join(work, "cache")
        jit = fa.Bundle(bundle_dir, args.lib, jit=True)
        compiled = jit._find_quantizer("f16", 256)
        assert compiled is not None, "JIT built no f16 d256 quantiser"
        assert jit._find_quantizer("f16", 256) is compiled  # cached
        print("ok JIT: fwd:f8e4m3:d256:none:wgmma:quant=f16 compiled on first use")


if __name__ == "__main__":
    main()
