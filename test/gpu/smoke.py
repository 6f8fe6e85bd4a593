#!/usr/bin/env python3
"""One forward launch through the Python package, three ways, each in its own
process so that a crash in one is reported and does not hide the others:
  raw    ctypes only (libcuda allocations, no PyTorch)
  torch  PyTorch tensors, CUDA initialised before the runtime is loaded
  late   the runtime loaded before PyTorch initialises CUDA
Prints one line per way; exits 1 if any failed.

    python3 test/gpu/smoke.py --bundle <dir> --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def pick(bundle):
    for k in bundle.kernels():
        if k["direction"] == "fwd" and k["mask"] == "none":
            return k
    raise SystemExit("no forward kernel without a mask")


def raw(args):
    import fa
    from fa import _runtime as rt
    bundle = fa.load(args.bundle, args.lib)
    k = pick(bundle)
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    B, H, N, d = 1, 2, 100, k["head_dim"]

    def alloc(shape, dtype):
        n = 1
        for s in shape:
            n *= s
        p = ctypes.c_uint64()
        size = ctypes.c_size_t(n * (4 if dtype == 2 else 2))
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0
        assert cuda.cuMemsetD8_v2(p, ctypes.c_ubyte(0), size) == 0
        t = rt.Tensor()
        t.data, t.dtype, t.rank = p.value, dtype, len(shape)
        stride = 1
        for i in reversed(range(len(shape))):
            t.shape[i], t.strides[i] = shape[i], stride
            stride *= shape[i]
        return t

    dt = rt.DTYPES[k["dtype"]]
    a = rt.ForwardArgs(alloc([B, H, N, d], dt), alloc([B, H, N, d], dt),
                       alloc([B, H, N, d], dt), alloc([B, H, N, d], dt),
                       alloc([B, H, N], 2), 0.125)
    q = rt.KernelQuery(rt.FWD, dt, d, d, 0, -1, -1, 0)
    out = ctypes.c_void_p()
    rt.check(bundle.lib, bundle.lib.fa_kernel_find(bundle._handle, ctypes.byref(q),
                                                   ctypes.byref(out)))
    rt.check(bundle.lib, bundle.lib.fa_attention_forward(out, ctypes.byref(a), None))
    assert cuda.cuCtxSynchronize() == 0
    return "kernel %s launched" % k["tag"]


def with_torch(args, late):
    import fa
    if late:
        bundle = fa.load(args.bundle, args.lib)
    import torch
    torch.zeros(1, device="cuda")
    if not late:
        bundle = fa.load(args.bundle, args.lib)
    k = pick(bundle)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[k["dtype"]]
    q, kk, v = (torch.randn(1, 2, 100, k["head_dim"], device="cuda", dtype=dt) for _ in range(3))
    o = fa.attention(q, kk, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float())
    torch.cuda.synchronize()
    return "kernel %s: max|O - sdpa f32| = %.2e" % (k["tag"], (o.float() - ref).abs().max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--way", default=None)
    args = ap.parse_args()
    if args.way:
        print({"raw": lambda: raw(args), "torch": lambda: with_torch(args, False),
               "late": lambda: with_torch(args, True)}[args.way]())
        return 0
    bad = 0
    for way in ("raw", "torch", "late"):
        cmd = [sys.executable, "-X", "faulthandler", __file__, "--bundle", args.bundle,
               "--way", way] + (["--lib", args.lib] if args.lib else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        text = (p.stdout + p.stderr).strip()
        print("%-5s %s: %s" % (way, "ok" if p.returncode == 0 else "FAIL rc=%d" % p.returncode,
                               text if p.returncode == 0 else "\n" + text[-3000:]))
        bad += p.returncode != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
