#!/usr/bin/env python3
"""Differential test of the packed-GQA forwards on the GPU, launched through
the runtime: the split-KV ones (fa_attention_forward_splitkv with an explicit
split count) and the unsplit ones (fa_attention_forward), every kernel of the
bundle whose manifest entry has "pack_gqa": true and no page table. A kernel
with a score_mod of test/gpu/score_mods.py (e.g. ALiBi from a slopes tensor,
whose packed rows of different heads are evaluated at one query per lane:
attn-gpu-anchor-score-mod) gets random mod_args per case, a reference with
the mod, and test_attention.py's float32 LSE slack (a bias makes |LSE| large).

Cases: groups G = H / Hkv in {1, 4, 8} (and 32/8 decode), Nq in {1, 4},
Nk from 1 key to 16k including ragged tails and Nq > Nk (causal rows
without keys), split counts 1 ... 16 and more splits than key blocks. O and
LSE are compared with a float64 reference under the flash-attn rule (max
error <= 2x that of the same math in the inputs' dtype + 1e-5); rows that see
no key must give O = 0 and LSE = -inf; O, LSE and the workspace start as NaN
so an unwritten row fails. Exits 1 if any case failed.

Bundle (built on the development machine):
    build/bin/fa-aot --config-file test/gpu/configs_packgqa.txt --score-mods test/gpu/score_mods.mlir -o out/bundle-gqa
On the GPU machine (scripts/device-run.sh runs it when out/bundle-gqa exists):
    python3 test/gpu/test_packgqa.py --bundle out/bundle-gqa --lib build-rt/lib/libfa_runtime.so
"""
import argparse
import ctypes
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_attention import allowed_mask, lse_slack  # noqa: E402
from test_splitkv_ptx import judge_decode  # noqa: E402
import score_mods  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def reference(q, k, v, allowed, scale, mod=None, mod_args=()):
    """O and LSE in q's dtype's math (float64 for float64 inputs), with the
    score_mod `mod` on the scaled scores; rows that see no key give O = 0 and
    LSE = -inf."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2))
    s = (s.float() if q.dtype != torch.float64 else s) * scale
    s = score_mods.apply(mod, s, mod_args)
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    o = torch.matmul(p.to(v.dtype), v)
    return o.nan_to_num(0.0), lse


def run(bundle, kern, q, k, v, splits, mod_args=()):
    """O and LSE of the packed kernel, through the runtime."""
    B, H, Nq, _ = q.shape
    o = torch.full((B, H, Nq, v.shape[-1]), float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full((B, H, Nq), float("nan"), device=q.device)
    args = fa.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)],
                          1.0 / math.sqrt(q.shape[-1]))
    lib = bundle.lib
    if kern["split_kv"]:
        nbytes = ctypes.c_uint64()
        fa.check(lib, lib.fa_splitkv_workspace_bytes(kern["handle"], B, H, Nq, splits,
                                                     ctypes.byref(nbytes)))
        ws = torch.full((nbytes.value // 4,), float("nan"), device=q.device)
        fa._launch(lib, lib.fa_attention_forward_splitkv_ex, kern["handle"], args, q,
                   ws.data_ptr(), nbytes.value, splits, fa._mod_arg_array(mod_args),
                   len(mod_args))
    else:
        fa._launch(lib, lib.fa_attention_forward_ex, kern["handle"], args, q,
                   fa._mod_arg_array(mod_args), len(mod_args))
    torch.cuda.synchronize()
    return o, lse


def check_case(bundle, kern, B, H, Hkv, Nq, Nk, splits, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt, d, dv = DTYPES[kern["dtype"]], kern["head_dim"], kern["head_dim_v"]
    q = torch.randn(B, H, Nq, d, device="cuda", generator=g, dtype=dt)
    k = torch.randn(B, Hkv, Nk, d, device="cuda", generator=g, dtype=dt)
    v = torch.randn(B, Hkv, Nk, dv, device="cuda", generator=g, dtype=dt)
    mod = kern["score_mod"]
    mod_args = score_mods.make_mod_args(mod, B, H, Hkv, Nq, Nk, "cuda", g) if mod else ()
    o, lse = run(bundle, kern, q, k, v, splits, mod_args)
    allowed = allowed_mask(kern["mask"], (kern["window_left"], kern["window_right"]), Nq, Nk,
                           q.device)
    scale = 1.0 / math.sqrt(d)
    o64, lse64 = reference(q.double(), k.double(), v.double(), allowed, scale, mod, mod_args)
    o_lo, _ = reference(q, k, v, allowed, scale, mod, mod_args)
    _, lse_lo = reference(q.float(), k.float(), v.float(), allowed, scale, mod, mod_args)
    # A mod's bias can make |LSE| large (ALiBi: slope·Nk), where fa's float32
    # LSE rounds by ulps of it, as test_attention.py allows for every kernel.
    slack = lse_slack(q, k, lse64, scale) if mod else 0.0
    return judge_decode(o, lse, o64, lse64, o_lo, lse_lo, slack)


def cases(split):
    """(B, H, Hkv, Nq, Nk, splits)."""
    out = []
    for (H, Hkv) in ((2, 2), (8, 2), (8, 1), (32, 8)):  # G = 1, 4, 8, 4
        for Nq in (1, 4):
            for Nk in (1, 3, 63, 64, 65, 1000):
                for S in ((1, 2, 16) if split else (1,)):
                    out.append((2, H, Hkv, Nq, Nk, S))
    # More splits than key blocks (empty splits), long rows, batch.
    if split:
        out += [(1, 32, 8, 1, 16384, 16), (1, 8, 1, 4, 4097, 5), (3, 8, 1, 1, 200, 11),
                (8, 32, 8, 4, 2048, 3)]
    else:
        out += [(1, 32, 8, 1, 16384, 1), (3, 8, 1, 4, 4097, 1)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--max-cases", type=int, default=None,
                    help="the first N cases of each kernel (a sanitizer's run)")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    infos = bundle.kernels()
    for i, info in enumerate(infos):
        info["handle"] = ctypes.c_void_p(bundle.lib.fa_bundle_kernel_at(bundle._handle, i))
    # Paged kernels read a page table: test_paged.py's.
    kernels = [k for k in infos if k["pack_gqa"] and not k["paged"]]
    if not kernels:
        sys.exit("no packed-GQA kernel in %s" % args.bundle)
    failed = total = 0
    for kern in kernels:
        for n, (B, H, Hkv, Nq, Nk, S) in enumerate(cases(kern["split_kv"])[:args.max_cases]):
            total += 1
            try:
                errs, e_o, t_o, e_l, t_l = check_case(bundle, kern, B, H, Hkv, Nq, Nk, S, n)
            except fa.FaError as e:
                errs, e_o, t_o, e_l, t_l = [str(e)], 0, 0, 0, 0
            failed += bool(errs)
            print("%s B%d H%d/%d Nq%d Nk%d S%d: O err %.2e (<= %.2e), LSE err %.2e (<= %.2e) %s"
                  % (kern["tag"], B, H, Hkv, Nq, Nk, S, e_o, t_o, e_l, t_l,
                     "FAIL " + "; ".join(errs) if errs else "ok"), flush=True)
    print("packed-GQA: %d of %d cases passed" % (total - failed, total))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
