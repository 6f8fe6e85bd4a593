#!/usr/bin/env python3
"""One forward launch through the Python package, three ways, each in its own
process so that a crash in one is reported and does not hide the others:
  raw    ctypes only (libcuda allocations, no PyTorch)
  torch  PyTorch tensors, CUDA initialised before the runtime is loaded
  late   the runtime loaded before PyTorch initialises CUDA
Each way checks what it prints: raw launches on Q = K = 0, V = 1 and requires
O = 1 and LSE = ln(N) in every row (outputs NaN-poisoned first); torch and late
require O and LSE within the DESIGN.md rule of a float64 reference (error <= 2x
that of the same math in the inputs' dtype + 1e-5). Prints one line per way;
exits 1 if any failed.

    python3 test/gpu/smoke.py --bundle <dir> --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def pick(bundle):
    for k in bundle.kernels():
        if k["direction"] == "fwd" and k["mask"] == "none" and not k.get("split_kv"):
            return k
    raise SystemExit("no forward kernel without a mask")


def kernel_tag(bundle, kernel):
    from fa import _runtime as rt
    info = rt.KernelInfo()
    rt.check(bundle.lib, bundle.lib.fa_kernel_get_info(kernel, ctypes.byref(info)))
    return info.tag.decode()


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
    dt = rt.DTYPES[k["dtype"]]
    one = {"bf16": 0x3F80, "f16": 0x3C00}[k["dtype"]]  # 1.0 in the dtype

    def alloc(shape, dtype, fill16=None, fill32=None):
        n = 1
        for s in shape:
            n *= s
        p = ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n * (4 if dtype == 2 else 2))) == 0
        if fill32 is not None:
            assert cuda.cuMemsetD32_v2(p, ctypes.c_uint(fill32), ctypes.c_size_t(n)) == 0
        else:
            assert cuda.cuMemsetD16_v2(p, ctypes.c_ushort(fill16), ctypes.c_size_t(n)) == 0
        t = rt.Tensor()
        t.data, t.dtype, t.rank = p.value, dtype, len(shape)
        stride = 1
        for i in reversed(range(len(shape))):
            t.shape[i], t.strides[i] = shape[i], stride
            stride *= shape[i]
        return t, n

    # Q = K = 0: every score is 0, so O is the mean of V's rows (V = 1: O = 1)
    # and LSE = ln(N). O and LSE start as NaN.
    (q, _), (kk, _), (v, _) = (alloc([B, H, N, d], dt, fill16=f) for f in (0, 0, one))
    o, n_o = alloc([B, H, N, d], dt, fill16=0xFFFF)
    lse, n_lse = alloc([B, H, N], 2, fill32=0xFFFFFFFF)
    a = rt.ForwardArgs(q, kk, v, o, lse, 0.125)
    query = rt.KernelQuery(rt.FWD, dt, d, d, 0, -1, -1, 0)
    out = ctypes.c_void_p()
    rt.check(bundle.lib, bundle.lib.fa_kernel_find(bundle._handle, ctypes.byref(query),
                                                   ctypes.byref(out)))
    rt.check(bundle.lib, bundle.lib.fa_attention_forward(out, ctypes.byref(a), None))
    assert cuda.cuCtxSynchronize() == 0
    o_host = (ctypes.c_uint16 * n_o)()
    lse_host = (ctypes.c_float * n_lse)()
    assert cuda.cuMemcpyDtoH_v2(o_host, ctypes.c_uint64(o.data), ctypes.c_size_t(2 * n_o)) == 0
    assert cuda.cuMemcpyDtoH_v2(lse_host, ctypes.c_uint64(lse.data),
                                ctypes.c_size_t(4 * n_lse)) == 0
    wrong_o = sum(x != one for x in o_host)
    lse_err = max(abs(x - math.log(N)) if math.isfinite(x) else math.inf for x in lse_host)
    tag = kernel_tag(bundle, out)
    assert wrong_o == 0, "kernel %s: %d of %d O elements are not 1.0" % (tag, wrong_o, n_o)
    assert lse_err <= 1e-5, "kernel %s: max|LSE - ln %d| = %.3g" % (tag, N, lse_err)
    return "kernel %s: O = 1 everywhere, max|LSE - ln %d| = %.1e" % (tag, N, lse_err)


def with_torch(args, late):
    import fa
    if late:
        bundle = fa.load(args.bundle, args.lib)
    import torch
    torch.zeros(1, device="cuda")
    if not late:
        bundle = fa.load(args.bundle, args.lib)
    k = pick(bundle)
    d, n = k["head_dim"], 100
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[k["dtype"]]
    q, kk, v = (torch.randn(1, 2, n, d, device="cuda", dtype=dt) for _ in range(3))
    o, lse = fa.attention(q, kk, v, return_lse=True)
    major, minor = torch.cuda.get_device_capability()
    kernel = bundle.find(fa._runtime.FWD, dt, d, d, "none", (-1, -1),
                         10 * major + minor, None, n)
    scale = 1 / math.sqrt(d)

    def ref(q, k, v):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)

    o64, lse64 = ref(q.double(), kk.double(), v.double())
    ol, _ = ref(q, kk, v)
    torch.cuda.synchronize()
    err_o, base_o = (o.double() - o64).abs().max().item(), (ol.double() - o64).abs().max().item()
    err_l = (lse.double() - lse64).abs().max().item()
    tag = kernel_tag(bundle, kernel)
    assert err_o <= 2 * base_o + 1e-5, "kernel %s: max|O - ref64| = %.3g > 2 * %.3g + 1e-5" % (
        tag, err_o, base_o)
    assert err_l <= 1e-5, "kernel %s: max|LSE - ref64| = %.3g > 1e-5" % (tag, err_l)
    return "kernel %s: max|O - ref64| = %.2e (%s math: %.2e), max|LSE - ref64| = %.2e" % (
        tag, err_o, k["dtype"], base_o, err_l)


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
