#!/usr/bin/env python3
"""Differential test of the GPU quantiser (attn.quantize and attn.hadamard on
the GPU: fa_quantize, the fa_quantize_amax / fa_quantize entries of fp8
forwards built with quant=<bf16|f16|f32>) against PyTorch's quantize_fp8.

For every quantiser in the bundle (its input dtype, head dim 128 or 256),
--cases random cases each: B 1-3, H/Hkv with groups 1, 2, 4 and 8, N 1 ... 3000
(ragged last 64-row blocks, fewer rows than one block), magnitudes 1e-3 to
1e3, some inputs with outlier channels or all-zero heads, both descale forms
(per group of heads, per 64-row block), plain and rotated. The rule:
- plain: x8 bit-identical to PyTorch's, descales identical (same f32 math);
- rotated: the float32 rotation sums in another order (butterflies, not a
  matmul), so descales agree to 1e-5 relative and each e4m3 code differs by
  at most one step, in at most 1% of the elements.
Also: fa_quantize refuses a descale whose groups do not divide the heads
(through the runtime). Exits 1 if anything failed.

Bundle: build/bin/fa-aot --config-file test/gpu/configs_fp8.txt -o out/bundle-fp8
    python3 test/gpu/test_quantize.py --bundle out/bundle-fp8 --lib .../libfa_runtime.so
"""
import argparse
import ctypes
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import fa  # noqa: E402


def codes(x8):
    """e4m3 codes as ordered integers (sign-magnitude to two's complement)."""
    u = x8.view(torch.uint8).to(torch.int32)
    mag = u & 0x7F
    return torch.where(u >= 0x80, -mag, mag)


def compare(got, want, rotated):
    """"" when the GPU result `got` passes against PyTorch's `want`."""
    for which, g8, w8, gd, wd in zip("qkv", got[:3], want[:3], got[3:], want[3:]):
        if gd.shape != wd.shape:
            return "%s descale shape %s, expected %s" % (which, tuple(gd.shape), tuple(wd.shape))
        if rotated and which != "v":
            rel = ((gd - wd).abs() / wd.abs()).max().item()
            if rel > 1e-5:
                return "%s descale differs by %.3g relative" % (which, rel)
            step = (codes(g8) - codes(w8)).abs()
            worst, share = step.max().item(), (step > 0).float().mean().item()
            if worst > 1 or share > 0.01:
                return ("%s codes differ by up to %d steps in %.3g%% of the elements"
                        % (which, worst, 100 * share))
        else:
            if not torch.equal(gd, wd):
                return "%s descale differs: max %.3g" % (which, (gd - wd).abs().max().item())
            diff = (g8.view(torch.uint8) != w8.view(torch.uint8)).sum().item()
            if diff:
                return "%s x8 differs in %d of %d elements" % (which, diff, g8.numel())
    return ""


def case_inputs(rng, dtype, d, seed):
    B, hkv = rng.randint(1, 3), rng.choice([1, 2, 4])
    h = hkv * rng.choice([1, 2, 4, 8])
    nq = rng.choice([1, 5, 63, 64, 65, 200, rng.randint(1, 3000)])
    nk = rng.choice([1, 64, 127, rng.randint(1, 3000)])
    mag = 10.0 ** rng.uniform(-3, 3)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, h, nq, d, generator=g, device="cuda") * mag
    k = torch.randn(B, hkv, nk, d, generator=g, device="cuda") * mag
    v = torch.randn(B, hkv, nk, d, generator=g, device="cuda") * mag
    kind = rng.choice(["plain", "outliers", "zeros"])
    if kind == "outliers":
        q[..., ::32] *= 30
        k[..., 5::32] *= 100
    elif kind == "zeros":
        q[0, 0] = 0
        v[-1, -1] = 0
    desc = "B%d H%d/%d Nq%d Nk%d x%.3g %s" % (B, h, hkv, nq, nk, mag, kind)
    return [t.to(dtype) for t in (q, k, v)], desc


def check_refusals(bundle, kernel, dtype, d):
    """The runtime's argument checks through the Python binding."""
    lib = bundle.lib
    x = torch.zeros(1, 2, 10, d, dtype=dtype, device="cuda")
    x8 = torch.empty(1, 2, 10, d, dtype=torch.float8_e4m3fn, device="cuda")
    descale = torch.empty(1, 3, dtype=torch.float32, device="cuda")
    ws = torch.empty(1, 2, 1, dtype=torch.float32, device="cuda")
    args = fa.QuantizeArgs()
    args.x, args.x8, args.descale, args.workspace = (fa._tensor(t) for t in (x, x8, descale, ws))
    status = lib.fa_quantize_check(kernel, ctypes.byref(args))
    message = lib.fa_last_error().decode()
    if status == 0 or "G dividing H = 2" not in message:
        print("FAIL refusal of descale [1, 3] for 2 heads: status %d, %s" % (status, message))
        return 1
    print("ok refusal: %s" % message)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=40, help="cases per quantiser")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    names = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    found = []
    for name, dtype in names.items():
        for d in (128, 256):
            k = bundle._find_quantizer(dtype, d)
            if k is not None:
                found.append((name, dtype, d, k[0]))
    if not found:
        sys.exit("no quantiser in %s (build fp8 forwards with quant=<dtype>)" % args.bundle)
    print("quantisers: %s" % ", ".join("%s d%d" % (n, d) for n, _, d, _ in found))
    rng = random.Random(30)
    failed = total = 0
    for name, dtype, d, kernel in found:
        for i in range(args.cases):
            (q, k, v), desc = case_inputs(rng, dtype, d, 1000 * d + i)
            block, rotate = rng.random() < 0.5, rng.random() < 0.5
            total += 1
            try:
                got = fa.quantize_fp8(q, k, v, block=block, rotate=rotate, bundle=bundle)
                want = fa._quantize_fp8_torch(q, k, v, block, rotate)
                torch.cuda.synchronize()
                err = compare(got, want, rotate)
            except fa.FaError as e:
                err = str(e)
            failed += bool(err)
            print("%s %s d%d %s%s %s%s" % ("FAIL" if err else "ok", name, d,
                                           "block" if block else "per-head",
                                           " rotated" if rotate else "", desc,
                                           ": " + err if err else ""))
        failed += check_refusals(bundle, kernel, dtype, d)
    print("quantize: %d cases, %d failed" % (total, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
