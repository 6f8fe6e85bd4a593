#!/usr/bin/env python3
"""Decode attention (Nq = 1, GQA 32/8, d = 128, bf16): fa.attention (which
takes the bundle's packed-GQA split-KV kernel where it has one, else its
split-KV kernel where fa_splitkv_choose splits), and fa with packing turned
off (the unpacked split-KV kernel: each query head reads its key head again),
against
cuDNN SDPA, SDPA flash and a device-to-device copy of the K+V bytes (the
memory-bound floor). Prints µs per call and the K+V bytes read per second
(TB/s) for B x Nk in 1x8k, 1x64k, 8x16k, 64x4k, and checks fa's O against
SDPA math (float32) on each shape first (max |error| / max |O| < 1e-2).

With --paged: the same shapes through fa.attention_with_kvcache over a
paged cache (the K/V pages shuffled through a pool, pages of 16, 64 and 256
keys) next to fa.attention on the contiguous cache in the same process
(the paged kernels' goal: within 5%), each paged O checked against the
contiguous one first (out/bundle-paged: test/gpu/configs_paged.txt).

    python3 bench/decode.py --bundle out/bundle --lib build-rt/lib/libfa_runtime.so
    python3 bench/decode.py --bundle out/bundle-paged --lib ... --paged

With --grid: the issue's decode grid (d 64 and 128, GQA 32/8 and 8/1, Nq 1, 4
and 16, B x Nk from 1x8k to 1x128k and 64x4k), fa against cuDNN SDPA and the
copy, each O checked as above.

With --compare B1,B2 (also with --grid): fa.attention through each further bundle too (columns
fa@B1, ...), same process and inputs, each O checked like fa's: an A/B of
kernel variants (say the K/V ring's depth, config field s3); --graph times them as CUDA
graphs (GPU time only).

With --score-mod NAME (a score_mod of test/gpu/score_mods.py; the bundle has
its split-KV decode kernels and plain forward, e.g. test/gpu/configs_decode_mods.txt
with --score-mods test/gpu/score_mods.mlir, beside --defaults): fa.attention
with it against its plain forward, fa without it, FlexAttention with it and
cuDNN, as CUDA graphs.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from bench import graph_us, warm_up  # noqa: E402

SHAPES = [(1, 8192), (1, 65536), (8, 16384), (64, 4096)]
H, HKV, D = 32, 8, 128


def median_us(fn, reps=50, rounds=7):
    """Median over `rounds` of the mean GPU time of `reps` back-to-back calls."""
    fn()
    warm_up(fn)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    return sorted(times)[len(times) // 2]


def sdpa(q, k, v, backend):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def run_shape(b, nk, bundle, others=(), h=H, hkv=HKV, d=D, nq=1, timer=median_us):
    torch.manual_seed(b * 7 + nk)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
    row = {"B": b, "Nk": nk}
    # Which kernels fa takes, as fa.attention decides, packed and unpacked.
    import ctypes
    for key, packed in (("splits", True), ("unpacked_splits", False)):
        kernel = bundle.find_splitkv(q.dtype, d, d, "none", (-1, -1), fa._capability(q), nk,
                                     packed=packed)
        splits = 0  # no such kernel
        if kernel is not None:
            s = ctypes.c_int32()
            fa.check(bundle.lib, bundle.lib.fa_splitkv_choose_gqa(
                kernel, b, h, hkv, nq, nk, fa._sm_count(q), ctypes.byref(s)))
            splits = s.value
        row[key] = splits
    # Correctness: fa against SDPA math in float32.
    o = fa.attention(q, k, v, bundle=bundle)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    # Relative to the largest |O|: decode O is a mean over many keys, small.
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    row["rel_err"] = err
    row["ok"] = bool(err < 1e-2)
    kv_bytes = (k.numel() + v.numel()) * k.element_size()
    dst = torch.empty(kv_bytes, dtype=torch.uint8, device="cuda")
    src_k, src_v = k.view(torch.uint8).view(-1), v.view(torch.uint8).view(-1)

    def copy():
        dst[:src_k.numel()].copy_(src_k)
        dst[src_k.numel():].copy_(src_v)

    for name, other in others:
        o = fa.attention(q, k, v, bundle=other)
        err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
        row["ok"] = row["ok"] and bool(err < 1e-2)
    o_unpacked = torch.empty_like(q)
    lse_unpacked = torch.empty(b, h, nq, device="cuda")

    plan = fa._splitkv_plan(q, k, v, o_unpacked, lse_unpacked, bundle, (False, False, None),
                            None)
    if plan:
        kernel, template, splits, nbytes = plan
        workspace = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        args = fa.ForwardArgs.from_buffer_copy(template)
        args.q.data, args.k.data, args.v.data = q.data_ptr(), k.data_ptr(), v.data_ptr()
        args.o.data, args.lse.data = o_unpacked.data_ptr(), lse_unpacked.data_ptr()

    def unpacked():
        """fa.attention's choice without the packed kernels: the unpacked
        split-KV kernel where it splits, else the plain forward."""
        if plan:
            fa._launch(bundle.lib, bundle.lib.fa_attention_forward_splitkv, kernel, args, q,
                       workspace.data_ptr(), nbytes, splits)
        else:
            fa.forward_into(q, k, v, o_unpacked, lse_unpacked, bundle=bundle)

    fns = {"fa": lambda: fa.attention(q, k, v, bundle=bundle)}
    try:  # a bundle of packed kernels only has no unpacked column
        unpacked()
        err = ((o_unpacked.float() - ref).abs().max() / ref.abs().max()).item()
        row["unpacked_rel_err"] = err
        row["ok"] = row["ok"] and bool(err < 1e-2)
        fns["fa_unpacked"] = unpacked
    except fa.FaError as e:
        row["fa_unpacked"] = {"error": str(e).splitlines()[0][:160]}
    fns.update({"cudnn": lambda: sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION),
                "flash": lambda: sdpa(q, k, v, SDPBackend.FLASH_ATTENTION),
                "copy": copy})
    for name, other in others:
        fns["fa@" + name] = lambda other=other: fa.attention(q, k, v, bundle=other)
    for name, fn in fns.items():
        try:
            us = timer(fn)
            row[name] = {"us": us, "TB/s": kv_bytes / (us * 1e-6) / 1e12}
        except Exception as e:  # noqa: BLE001 (a backend may not take the shape)
            row[name] = {"error": str(e).splitlines()[0][:160]}
    return row


GRID = [(b, nk) for b, nk in ((1, 8192), (1, 65536), (1, 131072), (8, 16384), (64, 4096))]


def grid_main(bundle, json_path, others=()):
    """The issue's decode grid: d 64 and 128, GQA 32/8 and 8/1, Nq 1, 4, 16,
    B x Nk from 1x8k to 1x128k and 64x4k: fa against cuDNN SDPA and the K+V
    copy, one process, GPU time of CUDA graphs (a serving engine's captured
    step: no host time). fa and cuDNN: the K+V bytes read per second; the
    copy: bytes read and written per second (its DRAM traffic, the rate the
    issue's 4.25 TB/s names), so fa/copy is the read rate's fraction of it.
    With `others` (--compare): each further bundle's time over fa's, same
    process and inputs."""
    rows, failed = [], 0
    print("%-4s %-5s %-3s %-7s | %-18s | %-18s | %-18s | %7s %7s" %
          ("d", "H/Hkv", "Nq", "B x Nk", "fa µs, K+V TB/s", "cudnn", "copy, r+w TB/s",
           "cuDNN/fa", "fa/copy"))
    for d in (128, 64):
        for h, hkv in ((32, 8), (8, 1)):
            for nq in (1, 4, 16):
                for b, nk in GRID:
                    row = run_shape(b, nk, bundle, others, h=h, hkv=hkv, d=d, nq=nq,
                                    timer=graph_us)
                    row.update({"d": d, "H": h, "Hkv": hkv, "Nq": nq})
                    if "us" in row["copy"]:
                        row["copy"]["TB/s"] *= 2  # read and written
                    rows.append(row)
                    failed += not row["ok"]
                    ok = all("us" in row[c] for c in ("fa", "cudnn", "copy"))
                    extra = "".join(
                        " | %s %.3fx" % (name, row["fa@" + name]["us"] / row["fa"]["us"])
                        for name, _ in others if ok and "us" in row["fa@" + name])
                    print("%-4d %-5s %-3d %-7s | %s | %s | %s | %7s %7s%s%s" % (
                        d, "%d/%d" % (h, hkv), nq, "%dx%dk" % (b, nk // 1024), fmt(row["fa"]),
                        fmt(row["cudnn"]), fmt(row["copy"]),
                        "%.3f" % (row["cudnn"]["us"] / row["fa"]["us"]) if ok else "n/a",
                        "%.3f" % (row["fa"]["TB/s"] / row["copy"]["TB/s"]) if ok else "n/a",
                        extra, "" if row["ok"] else "  FAIL"))
                    sys.stdout.flush()
    return report(rows, failed, json_path)


def sweep(b, nk, bundle, counts, packed=False):
    """µs per split-KV call (GPU time of CUDA graphs) at each split count,
    the count given to the runtime directly (what fa_splitkv_choose should
    pick)."""
    import ctypes
    q = torch.randn(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(b, H, 1, device="cuda")
    kernel = bundle.find_splitkv(q.dtype, D, D, "none", (-1, -1), fa._capability(q), nk,
                                 packed=packed, rows=(H // HKV, 1))
    chosen = ctypes.c_int32()
    fa.check(bundle.lib, bundle.lib.fa_splitkv_choose_gqa(
        kernel, b, H, HKV, 1, nk, fa._sm_count(q), ctypes.byref(chosen)))
    out = {"runtime's choice": chosen.value}
    for splits in counts:
        if b * splits > 65535 or splits > (nk + 63) // 64:
            continue
        nbytes = ctypes.c_uint64()
        fa.check(bundle.lib, bundle.lib.fa_splitkv_workspace_bytes(kernel, b, H, 1, splits,
                                                                   ctypes.byref(nbytes)))
        workspace = torch.empty(nbytes.value, dtype=torch.uint8, device="cuda")
        args = fa.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)], 1.0 / D ** 0.5)

        def call():
            fa._launch(bundle.lib, bundle.lib.fa_attention_forward_splitkv, kernel, args, q,
                       workspace.data_ptr(), nbytes.value, splits)
        out[splits] = graph_us(call)
    return out


PAGE_SIZES = (16, 64, 256)


def paged_cache(k, v, page, gen):
    """k, v [B, Hkv, Nk, D] as pools of the same shuffled pages
    [B*Nk/page, page, Hkv, D] and the page table that reads them back in
    order."""
    b, hkv, nk, d = k.shape
    per = nk // page
    order = torch.randperm(b * per, generator=gen).to(k.device)
    pool = lambda x: x.transpose(1, 2).reshape(b * per, page, hkv, d)[order].contiguous()  # noqa: E731
    table = torch.empty(b * per, dtype=torch.int32, device=k.device)
    table[order] = torch.arange(b * per, dtype=torch.int32, device=k.device)
    return pool(k), pool(v), table.view(b, per)


def run_paged_shape(b, nk, bundle):
    """fa.attention on the contiguous cache and attention_with_kvcache on
    paged ones, same process, each captured in a CUDA graph (GPU time
    only): µs, K+V TB/s, paged / contiguous."""
    torch.manual_seed(b * 7 + nk)
    gen = torch.Generator().manual_seed(nk)
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
    kv_bytes = 2 * k.numel() * k.element_size()
    qh = q.transpose(1, 2)
    contiguous = lambda: fa.attention(qh, k, v, bundle=bundle)  # noqa: E731
    want = contiguous().transpose(1, 2).float()
    us = graph_us(contiguous)
    row = {"B": b, "Nk": nk, "contiguous": {"us": us, "TB/s": kv_bytes / us / 1e6}, "ok": True}
    for page in PAGE_SIZES:
        kp, vp, table = paged_cache(k, v, page, gen)
        call = lambda: fa.attention_with_kvcache(q, kp, vp, cache_seqlens=nk,  # noqa: E731
                                                 page_table=table, bundle=bundle)
        err = ((call().float() - want).abs().max() / want.abs().max()).item()
        t = graph_us(call)
        row["page%d" % page] = {"us": t, "TB/s": kv_bytes / t / 1e6, "ratio": t / us,
                                "rel_err": err}
        row["ok"] &= err < 1e-2
    return row


def paged_main(bundle, json_path):
    rows, failed = [], 0
    print("paged decode (GQA %d/%d, d%d, bf16): fa.attention_with_kvcache over shuffled pages "
          "vs fa.attention on the contiguous cache; paged / contiguous time" % (H, HKV, D))
    print("%-9s | %-18s | %s" % ("B x Nk", "contiguous", " | ".join(
        "%-27s" % ("page %d" % p) for p in PAGE_SIZES)))
    for b, nk in SHAPES:
        row = run_paged_shape(b, nk, bundle)
        rows.append(row)
        failed += not row["ok"]
        cells = ["%s %5.3fx" % (fmt(row["page%d" % p]), row["page%d" % p]["ratio"])
                 for p in PAGE_SIZES]
        print("%-9s | %s | %s%s" % ("%dx%dk" % (b, nk // 1024), fmt(row["contiguous"]),
                                    " | ".join(cells),
                                    "" if row["ok"] else "  FAIL (paged vs contiguous O)"))
        sys.stdout.flush()
    return report(rows, failed, json_path)


def mods_main(bundle, name, json_path):
    """Decode with score_mod `name` (test/gpu/score_mods.py, its tensors drawn
    by make_mod_args): fa.attention with it (the split-KV kernels built with
    it), the plain forward with it (what fa.attention ran before decode took
    mods to split-KV), fa without it, FlexAttention with it and cuDNN without
    it; GPU time of CUDA graphs, each O checked against float32 math with the
    mod first (max |error| / max |O| < 1e-2)."""
    import ctypes
    import score_mods
    from torch.nn.attention.flex_attention import flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    rows, failed = [], 0
    print("score_mod %s; d %d, GQA %d/%d, Nq 1, µs and K+V TB/s (CUDA graphs)" % (name, D, H, HKV))
    print("%-9s | %-18s | %-18s | %-18s | %-18s | %-18s | %s" % (
        "B x Nk", "fa:" + name, "fa:%s plain fwd" % name, "fa", "flex:" + name, "cudnn",
        "mod/plain, fa/flex"))
    for b, nk in SHAPES:
        torch.manual_seed(b * 7 + nk)
        q = torch.randn(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
        mod_args = list(score_mods.make_mod_args(name, b, H, HKV, 1, nk, "cuda"))
        row, kv_bytes = {"B": b, "Nk": nk, "ok": True}, 2 * k.numel() * k.element_size()
        with torch.no_grad():
            g = H // HKV
            s = torch.matmul(q.float(), k.float().repeat_interleave(g, 1).transpose(-1, -2))
            p = torch.softmax(score_mods.apply(name, s * D ** -0.5, mod_args), -1)
            ref = torch.matmul(p, v.float().repeat_interleave(g, 1))
        kernel = bundle.find(fa.FWD, q.dtype, D, D, "none", (-1, -1), fa._capability(q), None,
                             nk, score_mod=name)
        o_plain, lse_plain = torch.empty_like(q), torch.empty(b, H, 1, device="cuda")
        args = fa.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o_plain, lse_plain)],
                              D ** -0.5)
        mods = fa._mod_arg_array(mod_args)

        def plain_fwd():
            fa._launch(bundle.lib, bundle.lib.fa_attention_forward_ex, kernel, args, q, mods,
                       len(mod_args))

        flex_mod = score_mods.flex_score_mod(name, mod_args)
        fns = {"fa:" + name: lambda: fa.attention(q, k, v, score_mod=name, mod_args=mod_args,
                                                  bundle=bundle),
               "plain": lambda: (plain_fwd(), o_plain)[1],
               "fa": lambda: fa.attention(q, k, v, bundle=bundle),
               "flex:" + name: lambda: flex(q, k, v, score_mod=flex_mod, enable_gqa=True),
               "cudnn": lambda: sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION)}
        for key, fn in fns.items():
            try:
                if key != "fa" and key != "cudnn":
                    err = ((fn().float() - ref).abs().max() / ref.abs().max()).item()
                    row[key + " rel_err"] = err
                    row["ok"] = row["ok"] and err < 1e-2
                us = graph_us(fn)
                row[key] = {"us": us, "TB/s": kv_bytes / (us * 1e-6) / 1e12}
            except Exception as e:  # noqa: BLE001 (a backend may not take the shape)
                row[key] = {"error": str(e).splitlines()[0][:160]}
        rows.append(row)
        failed += not row["ok"]
        us = lambda key: row[key].get("us", float("nan"))  # noqa: E731
        print("%-9s | %s | %s | %s | %s | %s | %.3f, %.2f%s" % (
            "%dx%dk" % (b, nk // 1024), fmt(row["fa:" + name]), fmt(row["plain"]),
            fmt(row["fa"]), fmt(row["flex:" + name]), fmt(row["cudnn"]),
            us("fa") / us("fa:" + name), us("flex:" + name) / us("fa:" + name),
            "" if row["ok"] else "  FAIL %s" % {k: v for k, v in row.items() if "err" in k}))
        sys.stdout.flush()
    return report(rows, failed, json_path)


def report(rows, failed, json_path):
    """Writes the rows as JSON (if asked), prints the tally; the exit code."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


def fmt(cell):
    if "error" in cell:
        return "%18s" % "n/a"
    return "%9.1f %5.2f TB/s" % (cell["us"], cell["TB/s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sweep", default=None,
                    help="comma-separated split counts: time each on every shape instead")
    ap.add_argument("--packed", action="store_true",
                    help="--sweep the packed-GQA split-KV kernel")
    ap.add_argument("--compare", default=None,
                    help="comma-separated bundles: fa.attention through each too (an A/B)")
    ap.add_argument("--paged", action="store_true",
                    help="paged caches (pages of 16, 64, 256) against the contiguous one")
    ap.add_argument("--grid", action="store_true",
                    help="the issue's grid: d 64/128, GQA 32/8 and 8/1, Nq 1/4/16, B x Nk "
                         "1x8k ... 1x128k, 8x16k, 64x4k (fa, cuDNN, copy)")
    ap.add_argument("--gqa", default=None,
                    help="H/HKV of the table, --sweep and --paged (default 32/8)")
    ap.add_argument("--dim", type=int, default=None, help="their head dim (default 128)")
    ap.add_argument("--score-mod", default=None,
                    help="decode with this score_mod of test/gpu/score_mods.py: fa (split-KV), "
                         "its plain forward, fa without it, FlexAttention with it, cuDNN")
    ap.add_argument("--graph", action="store_true",
                    help="time the table as CUDA graphs (GPU time only, as --grid does)")
    args = ap.parse_args()
    global H, HKV, D
    if args.gqa:
        H, HKV = (int(x) for x in args.gqa.split("/"))
    if args.dim:
        D = args.dim
    bundle = fa.load(args.bundle.split(","), args.lib, jit=False)
    if args.paged:
        return paged_main(bundle, args.json)
    if args.score_mod:
        sys.path.insert(0, os.path.join(HERE, "..", "test", "gpu"))
        return mods_main(bundle, args.score_mod, args.json)
    others = [(os.path.basename(p.rstrip("/")), fa.load(p, args.lib, jit=False))
              for p in args.compare.split(",")] if args.compare else []
    if args.grid:
        return grid_main(bundle, args.json, others)
    if args.sweep:
        counts = [int(c) for c in args.sweep.split(",")]
        for b, nk in SHAPES:
            times = sweep(b, nk, bundle, counts, args.packed)
            choice = times.pop("runtime's choice")
            print("%dx%dk (the runtime picks %d): %s" % (
                b, nk // 1024, choice, "  ".join("S=%d %.1f µs" % kv for kv in times.items())))
            sys.stdout.flush()
        return 0
    rows, failed = [], 0
    print("fa: packed GQA (splits: the packed kernel's, / the unpacked one's; 0: none);"
          " unpacked: the split-KV kernel without packing")
    print("%-9s %6s %10s | %-18s | %-18s | %-18s | %-18s | %-18s" %
          ("B x Nk", "splits", "rel err", "fa µs, K+V TB/s", "unpacked", "cudnn", "flash",
           "copy K+V"))
    for b, nk in SHAPES:
        row = run_shape(b, nk, bundle, others, h=H, hkv=HKV, d=D,
                        timer=graph_us if args.graph else median_us)
        rows.append(row)
        failed += not row["ok"]
        extra = "".join(" | %s %s %.3fx" % (name, fmt(row["fa@" + name]),
                                            row["fa@" + name]["us"] / row["fa"]["us"])
                        for name, _ in others if "us" in row["fa@" + name])
        print("%-9s %6s %10.2e | %s | %s | %s | %s | %s%s" %
              ("%dx%dk" % (b, nk // 1024), "%d/%d" % (row["splits"], row["unpacked_splits"]),
               row["rel_err"], fmt(row["fa"]), fmt(row["fa_unpacked"]),
               fmt(row["cudnn"]), fmt(row["flash"]), fmt(row["copy"]),
               extra + ("" if row["ok"] else "  FAIL (fa vs SDPA math)")))
        sys.stdout.flush()
    return report(rows, failed, args.json)


if __name__ == "__main__":
    sys.exit(main())
