#!/usr/bin/env python3
"""Launches every kernel of an fa bundle on the GPU and checks its numerics
(H200 only, never CI).

The kernels are enumerated from the bundle (fa_bundle_kernel_count /
fa_bundle_kernel_at / fa_kernel_get_info) and each one is launched directly
through fa_attention_forward / fa_attention_backward with its own handle, so
what runs does not depend on the runtime's kernel choice. Every kernel runs on
the same fixed shapes, chosen to reach its paths:

  ragged     B 2, H 6 / Hkv 2 (GQA), Nq 333, Nk 461: first and last query and
             key tiles partial for every block size (16 ∤ 333, 461)
  masked     Nq 419 > Nk 157, MQA, twice the default scale: rows fully masked
             under causal_bottom_right and windows (O = 0, LSE = -inf, zero dQ)
  long       Nq = Nk = 2113, scores growing along the keys: long rows whose
             maximum moves tile after tile (the online-softmax rescale)
  long8k     Nq = Nk = 8191: 43 to 256 key tiles per row
  grid       B 2, H 16 / Hkv 4, Nq 1100, Nk 1050: more query tiles than the
             H200's 132 SMs (a persistent grid's CTAs take several tiles)
  decode     Nq 1, Nk 333, GQA 4:1, half the default scale
  tiny       Nq 37, Nk 29: one partial tile each way

Forward kernels: O against a float64 reference by the DESIGN.md rule (the
flash-attn suite's), err(fa) <= 2 * err(same math in the inputs' dtype) + 1e-5;
LSE against the float64 LSE within 2 * err(same math in float32) + 1e-5 +
lse_slack (sqrt(D) float32 ulps of the largest possible score, for the tensor
cores' dot products, and 4 of the largest |LSE|), and -inf exactly on fully
masked rows.
Backward kernels take the float64 reference's O (rounded to the dtype) and LSE
as input, so no forward kernel is involved, and dQ, dK, dV are judged against
float64 autograd by the same rule as in test_attention.py (which adds the
effect of the rounded O on Delta). Deterministic backward kernels also run
three times on two shapes and must give bit-identical dQ, dK, dV. Outputs and
workspaces are NaN-poisoned before each launch.

fp8 e4m3 forwards (fa-aot --config fwd:f8e4m3:...) take Q, K, V quantised by
fa.quantize_fp8 as test_fp8.py quantises them, with one descale factor per
(batch, key head), or for kernels with descale_block 64 (config field
blockscale) Q's and K's per 64-row block, and run through
fa_attention_forward_fp8 with their own handle; O and LSE are judged against
the float64 attention of the unquantised inputs within 2x the error of the
naive fp8 reference (the quantised inputs dequantised with the same
descales, float32 math) + 1e-5, test_fp8.py's rule.

Kernels with a score_mod (fa-aot --score-mods) are judged against the same
references with the score_mod of score_mods.py applied to the scaled scores
(and its derivative in the backward's Delta terms); a score_mod without a
reference there fails its kernels. Kernels with a mask_mod (document,
prefix_lm: test/gpu/mask_mods.mlir) read the tensor test_maskmod.py draws
(random document ids, prefix lengths) as their mod_args, and the references
keep only what both the mask and the mask_mod allow. Block-sparse and
split-KV kernels take other launches: test_blocksparse.py, test_splitkv_ptx.py.

The run fails if any kernel of the bundle was not launched on every shape or
failed a check; it prints a table kernel -> shapes run -> worst error /
tolerance per output -> pass.

--sanitize: for compute-sanitizer (memcheck, racecheck). Every kernel on two
small shapes: one with ragged tiles, GQA and fully masked rows (for persistent
grids, more query tiles than SMs), and one row against 45 keys (MQA, B 2);
checks only that every output was written (backward inputs from a float32
reference). Fails if a launch failed or left NaN.

    python3 test/gpu/test_every_kernel.py --bundle out/bundle --lib <libfa_runtime.so>
    compute-sanitizer --tool memcheck --error-exitcode 9 \\
        python3 test/gpu/test_every_kernel.py --bundle out/bundle --lib <lib> --sanitize
"""
import argparse
import ctypes
import json
import math
import os
import random
import signal
import sys
import time
from collections import OrderedDict, namedtuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import _runtime as rt  # noqa: E402
import score_mods  # noqa: E402
from test_attention import (allowed_mask, delta_terms, lse_slack, max_err,  # noqa: E402
                            reference)
from test_fp8 import quantise  # noqa: E402
from test_maskmod import mask_mod_allowed, mask_mod_arg  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
          "f8e4m3": getattr(torch, "float8_e4m3fn", None)}

Shape = namedtuple("Shape", "name b h hkv nq nk scale ramp")
SHAPES = [
    Shape("ragged", 2, 6, 2, 333, 461, 1.0, False),
    Shape("masked", 1, 4, 1, 419, 157, 2.0, False),
    Shape("long", 1, 2, 1, 2113, 2113, 1.0, True),
    Shape("long8k", 1, 2, 1, 8191, 8191, 1.0, False),
    Shape("grid", 2, 16, 4, 1100, 1050, 1.0, False),
    Shape("decode", 3, 8, 2, 1, 333, 0.5, False),
    Shape("tiny", 1, 3, 3, 37, 29, 1.0, False),
]
# Deterministic backward kernels repeat these shapes and compare the bits.
REPEAT_SHAPES = ("ragged", "grid")
# Sanitizer shapes: ragged (16 ∤ 150, 91), GQA, Nq > Nk (masked rows); for a
# persistent grid 68 * ceil(257/128) = 204 query tiles on 132 SMs.
SAN_SHAPE = Shape("san", 1, 4, 2, 150, 91, 1.0, False)
SAN_PERSISTENT = Shape("san-grid", 1, 68, 4, 257, 150, 1.0, False)
SAN_TAIL = Shape("san-decode", 2, 4, 1, 1, 45, 1.0, False)  # one row, one partial key tile


def bundle_kernels(bundle):
    """The bundle's kernels in manifest order: info dicts (fa.Bundle.kernels)
    with the kernel's handle under "handle"."""
    infos = bundle.kernels()
    n = bundle.lib.fa_bundle_kernel_count(bundle._handle)
    assert n == len(infos), (n, len(infos))
    for i, info in enumerate(infos):
        info["handle"] = ctypes.c_void_p(bundle.lib.fa_bundle_kernel_at(bundle._handle, i))
        assert info["handle"].value, "fa_bundle_kernel_at(%d) is null" % i
    # Split-KV kernels take another launch (fa_attention_forward_splitkv):
    # test_splitkv_ptx.py and bench/decode.py run them; block-sparse ones a
    # block mask: test_blocksparse.py.
    return [info for info in infos if not info.get("split_kv") and not info["block_sparse"]]


def load_kernels(args):
    """fa.load(args.bundle, args.lib) and its kernels (bundle_kernels) whose
    tag contains args.only, all of them without it."""
    bundle = fa.load(args.bundle, args.lib)
    kernels = bundle_kernels(bundle)
    if args.only:
        kernels = [k for k in kernels if args.only in k["tag"]]
    return bundle, kernels


def launch_forward(bundle, kernel, q, k, v, o, lse, scale, mod_args=(), descales=None):
    """fa_attention_forward, with the tensors a score_mod reads _ex, with an
    fp8 kernel's descale factors _fp8."""
    args = rt.ForwardArgs(fa._tensor(q), fa._tensor(k), fa._tensor(v), fa._tensor(o),
                          fa._tensor(lse), scale)
    if descales is not None:
        scales = (rt.Tensor * 3)(*[fa._tensor(t) for t in descales])
        fa._launch(bundle.lib, bundle.lib.fa_attention_forward_fp8, kernel["handle"], args, q,
                   scales)
    elif kernel.get("mod_args"):
        fa._launch(bundle.lib, bundle.lib.fa_attention_forward_ex, kernel["handle"], args, q,
                   fa._mod_arg_array(mod_args), len(mod_args))
    else:
        fa._launch(bundle.lib, bundle.lib.fa_attention_forward, kernel["handle"], args, q)


def launch_backward(bundle, kernel, q, k, v, o, do, lse, dq, dk, dv, delta, acc, scale,
                    mod_args=()):
    args = rt.BackwardArgs(*[fa._tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv, delta,
                                                      acc)], scale)
    if kernel.get("mod_args"):
        fa._launch(bundle.lib, bundle.lib.fa_attention_backward_ex, kernel["handle"], args,
                   q, fa._mod_arg_array(mod_args), len(mod_args))
    else:
        fa._launch(bundle.lib, bundle.lib.fa_attention_backward, kernel["handle"], args, q)


def config_key(k):
    return (k["dtype"], k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
            k["window_right"], k.get("score_mod"), k["descale_block"], k["mask_mod"])


def with_mask_mod(name, mod_args, allowed, b, nq, nk, dev, seed):
    """A mask_mod kernel's mod_args (the tensor it reads, test_maskmod.py's)
    and the mask narrowed to what the mask_mod keeps."""
    if mod_args:
        raise ValueError("a score_mod with a mask_mod: no reference here")
    arg = mask_mod_arg(name, b, nq, nk, random.Random(seed), dev)
    return [arg], allowed & mask_mod_allowed(name, arg, b, nq, nk, dev)


def nan_like(t):
    return torch.full_like(t, float("nan"))


class Problem:
    """Inputs of one (config, shape) and their references, computed lazily
    (the backward's only when a backward kernel asks)."""

    def __init__(self, key, shape, dev, seed):
        dtype, d, dv, mask, wl, wr, mod, descale_block, mask_mod = key
        self.dt = DTYPES[dtype]
        self.shape, self.mask, self.window = shape, mask, (wl, wr)
        self.mod = mod
        gen = torch.Generator(device=dev).manual_seed(seed)
        b, h, hkv, nq, nk = shape.b, shape.h, shape.hkv, shape.nq, shape.nk
        q = torch.randn(b, h, nq, d, generator=gen, device=dev)
        k = torch.randn(b, hkv, nk, d, generator=gen, device=dev)
        if shape.ramp:  # scores that grow along the keys
            q = q + 1
            k = k + 4 * torch.arange(nk, device=dev, dtype=torch.float32)[:, None] / nk
        v = torch.randn(b, hkv, nk, dv, generator=gen, device=dev)
        self.fp8 = dtype == "f8e4m3"
        self.out_dt, self.descales = self.dt, None
        if self.fp8:  # forward only, O in bf16; the references' inputs kept
            (self.q, self.k, self.v), self.descales, self.dequantised = quantise(
                q, k, v, block=bool(descale_block))
            self.out_dt, self.exact = torch.bfloat16, (q, k, v)
        else:
            self.q, self.k, self.v = q.to(self.dt), k.to(self.dt), v.to(self.dt)
            self.do = torch.randn(b, h, nq, dv, generator=gen, device=dev).to(self.dt)
        self.scale = shape.scale / math.sqrt(d)
        self.allowed = allowed_mask(mask, self.window, nq, nk, dev)
        self.mod_args = score_mods.make_mod_args(mod, b, h, hkv, nq, nk, dev, gen)
        if mask_mod:
            self.mod_args, self.allowed = with_mask_mod(mask_mod, self.mod_args, self.allowed,
                                                        b, nq, nk, dev, seed)
        self._fwd = self._bwd = None

    def fwd(self):
        if self._fwd is None and self.fp8:  # exact inputs; naive fp8 math
            with torch.no_grad():
                o64, lse64 = reference(*(t.double() for t in self.exact), self.allowed,
                                       self.scale, None, ())
                ol, lse32 = reference(*self.dequantised, self.allowed, self.scale, None, ())
            self._fwd = o64, lse64, ol, lse32
        if self._fwd is None:
            with torch.no_grad():
                o64, lse64 = reference(*(t.double() for t in (self.q, self.k, self.v)),
                                       self.allowed, self.scale, self.mod, self.mod_args)
                ol, _ = reference(self.q, self.k, self.v, self.allowed, self.scale, self.mod,
                                  self.mod_args)
                _, lse32 = reference(*(t.float() for t in (self.q, self.k, self.v)),
                                     self.allowed, self.scale, self.mod, self.mod_args)
            self._fwd = o64, lse64, ol, lse32
        return self._fwd

    def bwd(self):
        if self._bwd is None:
            q64, k64, v64 = (t.double().requires_grad_() for t in (self.q, self.k, self.v))
            o64, lse64 = reference(q64, k64, v64, self.allowed, self.scale, self.mod,
                                   self.mod_args)
            o64.backward(self.do.double())
            ql, kl, vl = (t.clone().requires_grad_() for t in (self.q, self.k, self.v))
            ol, _ = reference(ql, kl, vl, self.allowed, self.scale, self.mod, self.mod_args)
            ol.backward(self.do)
            o_in = o64.detach().to(self.dt)  # the backward's O: the reference's, rounded
            lse_in = lse64.detach().float()
            shift_q, shift_k, slack_q, slack_k = delta_terms(
                q64, k64, v64, o_in, o64, self.do, self.allowed, self.scale, lse64,
                self.mod, self.mod_args)
            self._bwd = {"o": o_in, "lse": lse_in,
                         "dq": (q64.grad + shift_q, ql.grad, q64.grad, slack_q),
                         "dk": (k64.grad + shift_k, kl.grad, k64.grad, slack_k),
                         "dv": (v64.grad, vl.grad, v64.grad, 0.0)}
        return self._bwd


def judge(what, got, ref, low, low_ref, slack=0.0, floor=1e-5):
    """err(got vs ref) <= 2 * err(low vs low_ref) + floor + slack."""
    err = max_err(got, ref)
    base = max_err(low, low_ref)
    if math.isinf(base):
        base = 0.0  # the low-precision reference overflowed: hold fa to the floor
    tol = 2 * base + floor + slack
    return {"what": what, "err": err, "tol": tol, "ok": err <= tol}


def run_forward(bundle, kernel, p):
    o64, lse64, ol, lse32 = p.fwd()
    o = torch.full(ol.shape, float("nan"), device=ol.device, dtype=p.out_dt)
    lse = torch.full(lse64.shape, float("nan"), device=o.device)
    launch_forward(bundle, kernel, p.q, p.k, p.v, o, lse, p.scale, p.mod_args, p.descales)
    torch.cuda.synchronize()
    # fp8: the naive reference's LSE already carries the quantisation error.
    slack = 0.0 if p.fp8 else lse_slack(p.q, p.k, lse64, p.scale)
    return [judge("o", o, o64, ol, o64), judge("lse", lse, lse64, lse32, lse64, slack=slack)]


def run_backward(bundle, kernel, p, repeat):
    r = p.bwd()

    def once():
        dq, dk, dv = nan_like(p.q), nan_like(p.k), nan_like(p.v)
        delta = torch.full(r["lse"].shape, float("nan"), device=dq.device)
        acc = torch.full(p.q.shape, float("nan"), device=dq.device)
        launch_backward(bundle, kernel, p.q, p.k, p.v, r["o"], p.do, r["lse"], dq, dk, dv,
                        delta, acc, p.scale, p.mod_args)
        torch.cuda.synchronize()
        return dq, dk, dv

    got = once()
    res = [judge(name, g, *r[name][:3], slack=r[name][3])
           for name, g in zip(("dq", "dk", "dv"), got)]
    if repeat:
        bits = lambda t: t.view(torch.int16)  # noqa: E731
        same = all(all(torch.equal(bits(x), bits(y)) for x, y in zip(got, once()))
                   for _ in range(2))
        res.append({"what": "bits", "ok": same})
    return res


def sanitize(bundle, kernels, dev):
    """Every kernel on the sanitizer shapes; outputs must be written (no NaN
    left)."""
    bad = launches = 0
    for k in sorted(kernels, key=lambda k: k["tag"]):
        for shape in (SAN_PERSISTENT if k["persistent_grid"] else SAN_SHAPE, SAN_TAIL):
            t0 = time.time()
            print("launch %s on %s" % (k["tag"], shape.name), flush=True)
            try:
                ok = sanitize_launch(bundle, k, shape, dev)
                msg = "ok" if ok else "NaN left in an output"
            except Exception as e:  # noqa: BLE001 -- a failed launch is a failure
                ok, msg = False, "launch failed: %s" % e
            print("%-4s %s (%.1f s)" % ("ok" if ok else "FAIL", msg, time.time() - t0),
                  flush=True)
            bad += not ok
            launches += 1
    print("RESULT: %s (%d kernels, %d launches)" % (
        "PASS" if bad == 0 else "FAIL (%d)" % bad, len(kernels), launches))
    return 1 if bad else 0


def sanitize_launch(bundle, k, shape, dev):
    dt = DTYPES[k["dtype"]]
    b, h, hkv, nq, nk = shape.b, shape.h, shape.hkv, shape.nq, shape.nk
    d, dv = k["head_dim"], k["head_dim_v"]
    q = torch.randn(b, h, nq, d, device=dev)
    kk = torch.randn(b, hkv, nk, d, device=dev)
    v = torch.randn(b, hkv, nk, dv, device=dev)
    scale = 1 / math.sqrt(d)
    mod_args = score_mods.make_mod_args(k.get("score_mod"), b, h, hkv, nq, nk, dev)
    allowed = allowed_mask(k["mask"], (k["window_left"], k["window_right"]), nq, nk, dev)
    if k["mask_mod"]:
        mod_args, allowed = with_mask_mod(k["mask_mod"], mod_args, allowed, b, nq, nk, dev, 0)
    fp8 = k["dtype"] == "f8e4m3"
    descales = None
    if fp8:  # the descales of the kernel's form
        q, kk, v, *descales = fa.quantize_fp8(q, kk, v, block=bool(k["descale_block"]))
    else:
        q, kk, v = q.to(dt), kk.to(dt), v.to(dt)
    if k["direction"] == "fwd":
        o = torch.full((b, h, nq, dv), float("nan"), device=dev,
                       dtype=torch.bfloat16 if fp8 else dt)
        lse = torch.full((b, h, nq), float("nan"), device=dev)
        launch_forward(bundle, k, q, kk, v, o, lse, scale, mod_args, descales)
        outs = [o, lse]
    else:
        with torch.no_grad():
            o, lse = reference(q.float(), kk.float(), v.float(), allowed, scale,
                               k.get("score_mod"), mod_args)
        do = torch.randn(b, h, nq, dv, device=dev).to(dt)
        dq, dk, dvv = nan_like(q), nan_like(kk), nan_like(v)
        delta = torch.full((b, h, nq), float("nan"), device=dev)
        acc = torch.full((b, h, nq, d), float("nan"), device=dev)
        launch_backward(bundle, k, q, kk, v, o.to(dt), do, lse, dq, dk, dvv, delta, acc,
                        scale, mod_args)
        outs = [dq, dk, dvv]
    torch.cuda.synchronize()
    return not any(torch.isnan(t).any().item() for t in outs)


def run_all(bundle, groups, shapes, table, dev, progress):
    for gi, (key, group) in enumerate(groups.items()):
        for si, shape in enumerate(shapes):
            p = Problem(key, shape, dev, seed=1000 * gi + si)
            for k in group:
                if progress:
                    print("launch %s on %s" % (k["tag"], shape.name), flush=True)
                try:
                    if k["direction"] == "fwd":
                        res = run_forward(bundle, k, p)
                    else:
                        res = run_backward(bundle, k, p, k["deterministic"] and
                                           shape.name in REPEAT_SHAPES)
                except Exception as e:  # noqa: BLE001 -- reported as a failed run
                    res = [{"what": "launch", "ok": False, "message": str(e)}]
                table[k["tag"]]["runs"][shape.name] = res
                bad = [r for r in res if not r["ok"]]
                if bad:
                    print("FAIL %s on %s %s: %s" % (k["tag"], shape.name, shape, bad),
                          flush=True)
            del p
        torch.cuda.empty_cache()


class Stopped(BaseException):
    """SIGTERM (from `timeout`): not caught as a failed launch."""


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--json", default=None, help="write per-kernel results here")
    ap.add_argument("--sanitize", action="store_true",
                    help="small launches of every kernel, for compute-sanitizer")
    ap.add_argument("--only", default=None, help="kernels whose tag contains this")
    ap.add_argument("--progress", action="store_true",
                    help="print each launch before it runs (a hang then names it)")
    ap.add_argument("--shapes", default=None,
                    help="comma-separated shape names (default: all): " +
                    ",".join(s.name for s in SHAPES))
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 references
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.cuda.init()
    bundle, kernels = load_kernels(args)
    if not kernels:
        print("FAIL: no kernels to run in %s" % args.bundle)
        return 1
    if args.sanitize:
        return sanitize(bundle, kernels, dev)
    shapes = SHAPES if not args.shapes else [s for s in SHAPES
                                             if s.name in args.shapes.split(",")]
    if not shapes:
        print("FAIL: no shape named in --shapes %s" % args.shapes)
        return 1
    print("bundle %s: %d kernels (%d fwd, %d bwd) on %d shapes; %d SMs" % (
        args.bundle, len(kernels), sum(k["direction"] == "fwd" for k in kernels),
        sum(k["direction"] == "bwd" for k in kernels), len(shapes),
        torch.cuda.get_device_properties(dev).multi_processor_count))

    # Kernels of one configuration share inputs and references.
    groups = OrderedDict()
    for k in kernels:
        groups.setdefault(config_key(k), []).append(k)
    unknown = sorted(m for m in {k["score_mod"] for k in kernels if k.get("score_mod")}
                     if not score_mods.known(m))
    if unknown:  # their kernels fail (Problem raises) and are reported
        print("score_mods without a reference in score_mods.py: %s" % ", ".join(unknown))
    table = OrderedDict((k["tag"], {"kernel": k, "runs": {}}) for k in kernels)
    t0 = time.time()

    def stop(signum, frame):
        raise Stopped("stopped by signal %d" % signum)

    signal.signal(signal.SIGTERM, stop)  # `timeout`: still print the table
    try:
        run_all(bundle, groups, shapes, table, dev, args.progress)
    except Stopped as e:
        print("%s after %.1f s: the kernels left are reported as not run" % (e, time.time() - t0))
    # kernel -> shapes run -> worst err / tol per output -> pass
    names = [s.name for s in shapes]
    failures = 0
    lines = []
    for tag, row in table.items():
        runs = row["runs"]
        worst = OrderedDict()
        for res in runs.values():
            for r in res:
                if "err" in r:
                    ratio = r["err"] / r["tol"]
                    worst[r["what"]] = max(worst.get(r["what"], 0.0), ratio)
        missing = [n for n in names if n not in runs]
        ok = not missing and all(r["ok"] for res in runs.values() for r in res)
        row["ok"], row["worst"], row["missing"] = ok, dict(worst), missing
        failures += not ok
        ran = "".join("+" if n in runs and all(r["ok"] for r in runs[n]) else
                      ("-" if n not in runs else "x") for n in names)
        lines.append("%-4s %-68s %s %s%s" % (
            "ok" if ok else "FAIL", tag, ran,
            " ".join("%s %.2f" % kv for kv in worst.items()),
            (" not run: " + ",".join(missing)) if missing else ""))
    print("\nkernel table (shapes %s: + passed, x failed, - not run; worst err/tol)"
          % ",".join(names))
    print("\n".join(lines))
    print("every kernel: %d/%d kernels passed on %d shapes in %.1f s" % (
        len(table) - failures, len(table), len(names), time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"tag": t, "ok": r["ok"], "worst": r["worst"], "missing": r["missing"],
                        "runs": r["runs"]} for t, r in table.items()], f, indent=1,
                      default=str)
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d kernels)" % failures))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
