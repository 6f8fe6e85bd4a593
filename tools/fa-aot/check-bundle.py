#!/usr/bin/env python3
"""Checks an fa bundle on a CUDA GPU against PyTorch (docs/gpu-notes.md).

Loads each kernel's cubin with the CUDA driver API (ctypes; no fa runtime
needed), runs forward and backward kernels on random ragged/GQA/masked shapes,
compares with a float64 reference under the tolerance rule of DESIGN.md (error
<= 2x the error of a same-precision naive implementation + 1e-5), and times
the default configs beside SDPA's flash backend in the same process.

  python3 check-bundle.py BUNDLE_DIR [--out DIR] [--small] [--no-perf] [--backward-only]
                         [--no-variants]
"""
import argparse, ctypes, json, math, os, sys

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("bundle")
ap.add_argument("--out", default=os.environ.get("OUT", "."))
ap.add_argument("--small", action="store_true", help="a few numerics cases only")
ap.add_argument("--no-perf", action="store_true")
ap.add_argument("--no-variants", action="store_true", help="skip non-default backward tiles")
ap.add_argument("--backward-only", action="store_true",
                help="backward numerics and timings only (timings still run the forward for O, LSE)")
args = ap.parse_args()
torch.manual_seed(0)
man = json.load(open(os.path.join(args.bundle, "manifest.json")))
cuda = ctypes.CDLL("libcuda.so.1")
torch.zeros(1, device="cuda")  # makes the primary context current


def ck(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")


kernels = {}  # tag -> (manifest entry, {role: function}, cubin bytes)
for k in man["kernels"]:
    mod = ctypes.c_void_p()
    data = open(os.path.join(args.bundle, k["cubin"]), "rb").read()
    ck(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(data)), "cuModuleLoadData")
    fns = {}
    for role, e in k["entries"].items():
        fn = ctypes.c_void_p()
        ck(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, e["name"].encode()), e["name"])
        if e["shared_bytes"] > 48 * 1024:
            ck(cuda.cuFuncSetAttribute(fn, 8, e["shared_bytes"]), "max dynamic shared")
        fns[role] = fn
    kernels[k["tag"]] = (k, fns, data)


def call(tag, role, grid, params):
    cfg, fns, _ = kernels[tag]
    e = cfg["entries"][role]
    cparams = []
    for p in params:
        if isinstance(p, torch.Tensor):
            cparams.append(ctypes.c_uint64(p.data_ptr()))
        elif isinstance(p, float):
            cparams.append(ctypes.c_float(p))
        else:
            cparams.append(ctypes.c_int32(p))
    arr = (ctypes.c_void_p * len(cparams))(
        *[ctypes.cast(ctypes.byref(c), ctypes.c_void_p) for c in cparams])
    stream = torch.cuda.current_stream().cuda_stream
    ck(cuda.cuLaunchKernel(fns[role], *grid, e["threads"], 1, 1, e["shared_bytes"],
                           ctypes.c_void_p(stream), arr, None), "cuLaunchKernel " + e["name"])


def fa_forward(tag, q, k, v, scale, o=None, lse=None):
    cfg = kernels[tag][0]
    B, H, Nq, _ = q.shape
    Hkv, Nk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if o is None:  # poisoned outputs: every element must be written
        o = torch.full((B, H, Nq, Dv), float("nan"), dtype=q.dtype, device="cuda")
        lse = torch.full((B, H, Nq), float("nan"), device="cuda")
    grid = ((Nq + cfg["block_q"] - 1) // cfg["block_q"], H, B)
    call(tag, "fwd", grid, [q, k, v, o, lse, B, H, Hkv, Nq, Nk, scale])
    return o, lse


def backward_buffers(q, k, v):
    """Poisoned delta, dq_accum, dq, dk, dv: every element must be written."""
    B, H, Nq, D = q.shape
    return (torch.full((B, H, Nq), float("nan"), device="cuda"),
            torch.full((B, H, Nq, D), float("nan"), device="cuda"),
            torch.full_like(q, float("nan")), torch.full_like(k, float("nan")),
            torch.full_like(v, float("nan")))


def fa_backward(tag, q, k, v, o, do, lse, scale, bufs=None):
    cfg = kernels[tag][0]
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    delta, acc, dq, dk, dv = bufs if bufs else backward_buffers(q, k, v)
    qgrid = ((Nq + cfg["block_q"] - 1) // cfg["block_q"], H, B)
    call(tag, "bwd_pre", qgrid, [o, do, delta, acc, B, H, Nq])
    # dsplit CTAs per key block, each owning a column slice (docs/ABI.md).
    call(tag, "bwd", ((Nk + cfg["block_kv"] - 1) // cfg["block_kv"] * cfg.get("dsplit", 1),
                      Hkv, B),
         [q, k, v, do, lse, delta, acc, dk, dv, B, H, Hkv, Nq, Nk, scale])
    call(tag, "bwd_post", qgrid, [acc, dq, B, H, Nq])
    return dq, dk, dv


def band(cfg, Nq, Nk):
    i = torch.arange(Nq, device="cuda")[:, None]
    j = torch.arange(Nk, device="cuda")[None, :]
    ok = torch.ones(Nq, Nk, dtype=torch.bool, device="cuda")
    if cfg["mask"] != "none":
        off = 0 if cfg["mask"] == "causal" else Nk - Nq
        right = cfg["window_right"] if cfg["mask"] == "window" else 0
        ok &= j <= i + off + right
        if cfg["mask"] == "window":
            ok &= j >= i + off - cfg["window_left"]
    return ok


def reference(cfg, q, k, v, scale, dt):
    """Attention in dtype `dt` (float64: the reference; else naive same precision)."""
    g = q.shape[1] // k.shape[1]
    acc = torch.float64 if dt == torch.float64 else torch.float32
    kk = k.repeat_interleave(g, 1).to(dt)
    vv = v.repeat_interleave(g, 1).to(dt)
    s = (q.to(dt) @ kk.transpose(-1, -2)).to(acc) * scale
    s = s.masked_fill(~band(cfg, q.shape[2], k.shape[2]), float("-inf"))
    lse = torch.logsumexp(s, -1)
    empty = torch.isinf(lse)
    p = torch.softmax(s.masked_fill(empty[..., None], 0.0), -1).masked_fill(empty[..., None], 0.0)
    o = p.to(dt) @ vv
    return o, lse


def within(err, naive):
    return err <= 2 * naive + 1e-5


results = {"forward": [], "backward": [], "perf": []}
allok = True
FWD_CASES = [  # tag prefix, B, H, Hkv, Nq, Nk
    ("fwd_bf16_d128_bq64_bkv64_w4_s2_none", 2, 4, 2, 200, 333),
    ("fwd_bf16_d128_bq64_bkv64_w4_s2_causal", 2, 4, 4, 257, 257),
    ("fwd_bf16_d128_bq64_bkv64_w4_s2_causal", 1, 8, 2, 100, 300),
    ("fwd_bf16_d64_bq64_bkv64_w4_s2_none", 2, 8, 1, 128, 1000),
    ("fwd_bf16_d64_bq64_bkv64_w4_s2_causal", 1, 4, 4, 513, 77),
    ("fwd_bf16_d32_bq64_bkv64_w4_s2_causal_bottom_right", 1, 2, 2, 300, 100),
    ("fwd_f16_d80_bq64_bkv64_w4_s2_window_l100_r0", 1, 4, 2, 400, 450),
    ("fwd_bf16_d96_bq64_bkv64_w4_s2_none", 1, 3, 1, 70, 130),
    ("fwd_bf16_d256_bq64_bkv32_w4_s2_none", 1, 2, 2, 190, 260),
]
BWD_CASES = [  # no fully masked rows: autograd of an empty softmax row is NaN
    ("bwd_bf16_d128_bq32_bkv64_w4_s1_none", 2, 4, 2, 200, 333),
    ("bwd_bf16_d128_bq32_bkv64_w4_s1_causal", 1, 4, 4, 257, 257),
    ("bwd_bf16_d64_bq64_bkv64_w4_s1_none", 2, 8, 1, 128, 500),
    ("bwd_bf16_d64_bq64_bkv64_w4_s1_causal", 1, 4, 2, 100, 300),
    ("bwd_bf16_d32_bq64_bkv64_w4_s1_causal_bottom_right", 1, 2, 2, 100, 300),
    ("bwd_f16_d80_bq32_bkv64_w4_s1_window_l100_r0", 1, 4, 2, 400, 450),
    ("bwd_bf16_d96_bq32_bkv64_w4_s1_none", 1, 3, 1, 70, 130),
]
if args.small:
    FWD_CASES, BWD_CASES = FWD_CASES[2:6], BWD_CASES[:2]
if args.backward_only:
    FWD_CASES = []
# Backward kernels with non-default tiles (--config ...:bkvN:wN) get numerics
# on two shapes and timings beside the default of their head dim and mask.
DEFAULT_BWD = {f"bwd_bf16_d{d}_bq{64 if d <= 64 else 32}_bkv64_w4_s1_{m}_sm90a"
               for d in (64, 128) for m in ("none", "causal")}
VARIANTS = sorted(t for t in kernels if t.startswith("bwd_bf16_d") and t not in DEFAULT_BWD
                  and (t.endswith("_none_sm90a") or t.endswith("_causal_sm90a"))
                  and kernels[t][0]["head_dim"] in (64, 128)) if not args.no_variants else []
if not args.small:
    for t in VARIANTS:
        BWD_CASES.append((t[:-len("_sm90a")], 2, 4, 2, 200, 333) if "_none_" in t
                         else (t[:-len("_sm90a")], 1, 4, 4, 257, 257))


def rand(*shape, dt):
    return torch.randn(*shape, device="cuda", dtype=dt)


def forward_case(prefix, B, H, Hkv, Nq, Nk):
    tag = prefix + "_sm90a"
    cfg = kernels[tag][0]
    dt = torch.bfloat16 if cfg["dtype"] == "bf16" else torch.float16
    q, k = rand(B, H, Nq, cfg["head_dim"], dt=dt), rand(B, Hkv, Nk, cfg["head_dim"], dt=dt)
    v = rand(B, Hkv, Nk, cfg["head_dim_v"], dt=dt)
    scale = 1 / math.sqrt(cfg["head_dim"])
    o, lse = fa_forward(tag, q, k, v, scale)
    torch.cuda.synchronize()
    ro, rl = reference(cfg, q.double(), k.double(), v.double(), scale, torch.float64)
    no, _ = reference(cfg, q, k, v, scale, dt)
    err = (o.double() - ro).abs().max().item()
    naive = (no.double() - ro).abs().max().item()
    fin = torch.isfinite(rl)
    lerr = (lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    empty_ok = bool(torch.all(torch.isneginf(lse[~fin]))) if (~fin).any() else True
    ok = within(err, naive) and lerr < 1e-3 and empty_ok and not torch.isnan(o).any().item()
    return dict(tag=tag, B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, max_err=err, naive_err=naive,
                lse_err=lerr, empty_rows=int((~fin).sum()), ok=ok)


def backward_case(prefix, B, H, Hkv, Nq, Nk):
    tag = prefix + "_sm90a"
    cfg = kernels[tag][0]
    dt = torch.bfloat16 if cfg["dtype"] == "bf16" else torch.float16
    q, k = rand(B, H, Nq, cfg["head_dim"], dt=dt), rand(B, Hkv, Nk, cfg["head_dim"], dt=dt)
    v, do = rand(B, Hkv, Nk, cfg["head_dim_v"], dt=dt), rand(B, H, Nq, cfg["head_dim_v"], dt=dt)
    scale = 1 / math.sqrt(cfg["head_dim"])
    grads = {}
    for name, dtc in (("ref", torch.float64), ("naive", dt)):
        leaves = [t.detach().to(torch.float64 if dtc == torch.float64 else dt).requires_grad_()
                  for t in (q, k, v)]
        o, lse = reference(cfg, *leaves, scale, dtc)
        o.backward(do.to(o.dtype))
        grads[name] = [t.grad.double() for t in leaves]
        if name == "ref":
            o_ref, lse_ref = o.detach(), lse.detach()
    dq, dk, dv = fa_backward(tag, q, k, v, o_ref.to(dt), do, lse_ref.float(), scale)
    torch.cuda.synchronize()
    r = dict(tag=tag, B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, ok=True)
    for name, got, ref, naive in zip(("dq", "dk", "dv"), (dq, dk, dv), grads["ref"], grads["naive"]):
        err = (got.double() - ref).abs().max().item()
        nerr = (naive - ref).abs().max().item()
        r[name + "_err"], r[name + "_naive_err"] = err, nerr
        r["ok"] &= within(err, nerr) and not torch.isnan(got).any().item()
    return r


for kind, cases, fn in (("forward", FWD_CASES, forward_case), ("backward", BWD_CASES, backward_case)):
    for case in cases:
        if case[0] + "_sm90a" not in kernels:
            continue
        try:
            r = fn(*case)
        except Exception as e:  # a launch error poisons the context: stop
            r = dict(case=str(case), error=repr(e), ok=False)
            print(r, flush=True)
            results[kind].append(r)
            allok = False
            break
        allok &= r["ok"]
        print(r, flush=True)
        results[kind].append(r)
        json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=1)


def bench(fn, n=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def perf_case(d, causal, B, N, backward):
    from torch.nn.attention import sdpa_kernel, SDPBackend
    H = 2048 // d
    mask = "causal" if causal else "none"
    bq = (64 if d <= 64 else 32) if backward else 64
    tag = (f"bwd_bf16_d{d}_bq{bq}_bkv64_w4_s1_{mask}_sm90a" if backward
           else f"fwd_bf16_d{d}_bq64_bkv64_w4_s2_{mask}_sm90a")
    if tag not in kernels:
        return None
    variants = [t for t in VARIANTS if backward and kernels[t][0]["head_dim"] == d
                and t.endswith(f"_{mask}_sm90a")]
    q, k, v = (rand(B, H, N, d, dt=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    scale = 1 / math.sqrt(d)
    fwd_tag = f"fwd_bf16_d{d}_bq64_bkv64_w4_s2_{mask}_sm90a"
    o, lse = fa_forward(fwd_tag, q, k, v, scale)
    if backward:
        do = torch.randn_like(o)
        bufs = backward_buffers(q, k, v)
        t = bench(lambda: fa_backward(tag, q, k, v, o, do, lse, scale, bufs))
        vt = {vtag: bench(lambda: fa_backward(vtag, q, k, v, o, do, lse, scale, bufs))
              for vtag in variants}
        qr, kr, vr = (x.detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
            tf = bench(lambda: torch.autograd.grad(out, (qr, kr, vr), do, retain_graph=True))
    else:
        t = bench(lambda: fa_forward(tag, q, k, v, scale, o, lse))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            tf = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    r = dict(tag=tag, B=B, H=H, N=N, fa_ms=t, sdpa_flash_ms=tf, fa_tflops=flops / t / 1e9,
             sdpa_flash_tflops=flops / tf / 1e9, ratio_vs_sdpa_flash=tf / t)
    if backward:
        r["variants"] = {vtag: dict(fa_ms=vt[vtag], fa_tflops=flops / vt[vtag] / 1e9,
                                    ratio_vs_sdpa_flash=tf / vt[vtag]) for vtag in variants}
    return r


if not args.no_perf and not args.small:
    for backward in ((True,) if args.backward_only else (False, True)):
        for d in (64, 128):
            for causal in (False, True):
                for B, N in ((8, 8192), (32, 2048)):
                    try:
                        r = perf_case(d, causal, B, N, backward)
                    except Exception as e:
                        r = dict(d=d, causal=causal, B=B, N=N, backward=backward, error=repr(e))
                    if r:
                        print(r, flush=True)
                        results["perf"].append(r)
                        json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=1)
results["all_ok"] = allok
json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=1)
print("ALL_OK" if allok else "SOME_FAILED")
