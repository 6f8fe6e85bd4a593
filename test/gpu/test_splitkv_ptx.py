#!/usr/bin/env python3
"""Differential test of the split-KV kernels (split forward + merge) on the GPU,
launched straight from their PTX (the runtime does not launch them yet).

Each case fills Q, K, V at random, poisons O, LSE and the workspace with NaN,
launches fa_fwd_<tag> on (ceil(Nq/64), H, B*S) CTAs and fa_merge_<tag> on
ceil(B*H*Nq/4), and compares O and LSE with a float64 reference under the
flash-attn rule: max error <= 2x that of the same math in the inputs' dtype
+ 1e-5; rows that see no key must give O = 0 and LSE = -inf. Prints one line
per case and a summary; exits 1 if any case failed.

Built on the development machine (MLIR is not on the GPU machine):
    mkdir -p out/splitkv
    build/bin/fa-opt test/gpu/splitkv_kernels.mlir -split-input-file \\
        -fa-lower-to-nvvm="split-kv=1" > out/splitkv/kernels.mlir
    python3 test/Conversion/AttnToGPU/Inputs/extract-ptx.py \\
        out/splitkv/kernels.mlir out/splitkv
Then, on the GPU machine:
    python3 test/gpu/test_splitkv_ptx.py --ptx out/splitkv
"""
import argparse
import ctypes
import glob
import math
import os
import sys

import torch

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class Kernels:
    """The two entries of one split-KV tag, loaded from its PTX."""

    def __init__(self, cuda, path):
        self.cuda = cuda
        self.tag = os.path.basename(path)[len("fa_"):-len(".ptx")]
        # fwd_<dtype>_d<D>_bq<M>_bkv<N>_w<W>_s2_<mask>_sm90a_splitkv
        fields = self.tag.split("_")
        self.dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[fields[1]]
        self.d = int(fields[2][1:])
        self.bq = int(next(f for f in fields if f.startswith("bq"))[2:])
        self.bkv = int(next(f for f in fields if f.startswith("bkv"))[3:])
        self.warps = int(next(f for f in fields if f.startswith("w") and f[1:].isdigit())[1:])
        self.causal = "causal_bottom_right" in self.tag
        pad = (self.d + 15) // 16 * 16 + 8  # KernelPlan::strideQK
        self.smem = (self.bq + 4 * self.bkv) * pad * 2  # forwardSharedBytes
        ptx = open(path, "rb").read() + b"\0"
        self.module = ctypes.c_void_p()
        self.check(cuda.cuModuleLoadData(ctypes.byref(self.module), ptx), "cuModuleLoadData")
        self.fwd = self.function("fa_fwd_" + self.tag)
        self.merge = self.function("fa_merge_" + self.tag)
        self.check(cuda.cuFuncSetAttribute(self.fwd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           self.smem), "cuFuncSetAttribute")

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s failed with CUresult %d (%s)" % (what, rc, self.tag))

    def function(self, name):
        f = ctypes.c_void_p()
        self.check(self.cuda.cuModuleGetFunction(ctypes.byref(f), self.module, name.encode()),
                   "cuModuleGetFunction " + name)
        return f

    def launch(self, f, grid, smem, params):
        holders = [p for p in params]
        ptrs = (ctypes.c_void_p * len(holders))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cuda.cuLaunchKernel(f, grid[0], grid[1], grid[2], 32 * self.warps, 1, 1,
                                            smem, stream, ctypes.cast(ptrs, ctypes.c_void_p),
                                            None), "cuLaunchKernel")

    def run(self, q, k, v, splits):
        B, H, Nq, D = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        dev = q.device
        o = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Nq), float("nan"), device=dev)
        o_part = torch.full((splits, B, H, Nq, D), float("nan"), device=dev)
        lse_part = torch.full((splits, B, H, Nq), float("nan"), device=dev)
        ptr = lambda t: ctypes.c_uint64(t.data_ptr())
        i32 = ctypes.c_int32
        # The batch, head and row strides (i64, elements) of q, k, v after the
        # split count, and of o after the merge's heads and nq (docs/ABI.md).
        strides = lambda t: [ctypes.c_int64(s) for s in t.stride()[:3]]
        self.launch(self.fwd, ((Nq + self.bq - 1) // self.bq, H, B * splits), self.smem,
                    [ptr(q), ptr(k), ptr(v), ptr(o_part), ptr(lse_part), i32(B), i32(H),
                     i32(Hkv), i32(Nq), i32(Nk), ctypes.c_float(1 / math.sqrt(D)), i32(splits)]
                    + strides(q) + strides(k) + strides(v))
        rows = B * H * Nq
        self.launch(self.merge, ((rows + self.warps - 1) // self.warps, 1, 1), 0,
                    [ptr(o_part), ptr(lse_part), ptr(o), ptr(lse), i32(rows), i32(splits),
                     i32(H), i32(Nq)] + strides(o))
        torch.cuda.synchronize()
        return o, lse


def reference(q, k, v, causal):
    """O and LSE in q's dtype's math (float64 for float64 inputs); rows that
    see no key give O = 0 and LSE = -inf."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)).float() if q.dtype != torch.float64 else \
        torch.matmul(q, k.transpose(-1, -2))
    s = s * (1 / math.sqrt(D))
    if causal:  # query i sees keys j <= i + Nk - Nq
        i = torch.arange(Nq, device=q.device).view(-1, 1)
        j = torch.arange(Nk, device=q.device).view(1, -1)
        s = s.masked_fill(j > i + (Nk - Nq), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    o = torch.matmul(p.to(v.dtype), v)
    return o.nan_to_num(0.0), lse


def judge_decode(o, lse, o64, lse64, o_lo, lse_lo, lse_slack=0.0):
    """(errors, O error, O tolerance, LSE error, LSE tolerance) of a decode
    forward by the flash-attn rule, the LSE's tolerance widened by
    `lse_slack` (test_attention.lse_slack: fa's float32 rounding at the
    LSE's magnitude); rows without keys must give O = 0 and LSE = -inf, and
    nothing may be left NaN."""
    empty = torch.isneginf(lse64)
    errs = []
    if torch.isnan(o).any() or torch.isnan(lse).any():
        errs.append("NaN in O or LSE (unwritten rows?)")
    if empty.any() and (not torch.isneginf(lse[empty]).all() or o[empty].abs().max() != 0):
        errs.append("rows without keys must give O = 0 and LSE = -inf")
    seen = ~empty
    e_o = (o.double() - o64).abs().max().item() if o.numel() else 0.0
    t_o = 2 * (o_lo.double() - o64).abs().max().item() + 1e-5 if o.numel() else 1e-5
    e_l = (lse.double()[seen] - lse64[seen]).abs().max().item() if seen.any() else 0.0
    t_l = (2 * (lse_lo.double()[seen] - lse64[seen]).abs().max().item() + 1e-5 + lse_slack
           if seen.any() else 1e-5)
    if not e_o <= t_o:
        errs.append("O error %.3g > %.3g" % (e_o, t_o))
    if not e_l <= t_l:
        errs.append("LSE error %.3g > %.3g" % (e_l, t_l))
    return errs, e_o, t_o, e_l, t_l


def check_case(kern, B, H, Hkv, Nq, Nk, splits, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda h, n: torch.randn(B, h, n, kern.d, device="cuda", generator=g, dtype=kern.dtype)
    q, k, v = mk(H, Nq), mk(Hkv, Nk), mk(Hkv, Nk)
    o, lse = kern.run(q, k, v, splits)
    o64, lse64 = reference(q.double(), k.double(), v.double(), kern.causal)
    o_lo, lse_lo = reference(q, k, v, kern.causal)
    return judge_decode(o, lse, o64, lse64, o_lo, lse_lo)


def cases():
    # (B, H, Hkv, Nq, Nk, splits): decode shapes, GQA 32/8 and 8/1, Nq 1, 4, 16,
    # Nk from 1 key to 128k, split counts 1 ... 64 (also more splits than key
    # blocks: empty splits), Nq > Nk (causal rows without keys).
    out = []
    for (H, Hkv) in ((32, 8), (8, 1)):
        for Nq in (1, 4, 16):
            for Nk in (1, 63, 64, 65, 1000, 4096):
                for S in (1, 3, 16, 64):
                    out.append((2, H, Hkv, Nq, Nk, S))
    out += [(1, 32, 8, 1, 65536, 64), (1, 32, 8, 16, 131072, 48), (1, 8, 1, 4, 131072, 7),
            (8, 32, 8, 1, 16384, 8), (4, 32, 8, 16, 8, 4), (3, 8, 1, 16, 5, 2)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptx", required=True, help="folder of fa_<tag>.ptx split-KV kernels")
    ap.add_argument("--quick", action="store_true", help="every 5th case only")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    cuda.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    paths = sorted(glob.glob(os.path.join(args.ptx, "fa_fwd_*_splitkv.ptx")))
    if not paths:
        sys.exit("no fa_fwd_*_splitkv.ptx in %s" % args.ptx)
    failed = total = 0
    for path in paths:
        kern = Kernels(cuda, path)
        for n, (B, H, Hkv, Nq, Nk, S) in enumerate(cases()):
            if args.quick and n % 5:
                continue
            total += 1
            errs, e_o, t_o, e_l, t_l = check_case(kern, B, H, Hkv, Nq, Nk, S, seed=n)
            status = "FAIL " + "; ".join(errs) if errs else "ok"
            failed += bool(errs)
            print("%s B%d H%d/%d Nq%d Nk%d S%d: O err %.2e (<= %.2e), LSE err %.2e (<= %.2e) %s"
                  % (kern.tag, B, H, Hkv, Nq, Nk, S, e_o, t_o, e_l, t_l, status), flush=True)
    print("split-KV PTX: %d of %d cases passed" % (total - failed, total))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
