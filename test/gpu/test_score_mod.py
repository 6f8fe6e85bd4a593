#!/usr/bin/env python3
"""Differential GPU test of an fa bundle's score_mod kernels against PyTorch
(H200 only, never CI).

The bundle is built with `fa-aot --score-mods test/gpu/score_mods.mlir
--config-file test/gpu/configs_score_mod.txt` (scripts/device-run.sh). For
random cases over its score_mod kernels (every score_mod x mask x head dim x
dtype x mma it has; GQA/MQA, ragged Nq != Nk, Nq = 1, more query tiles than
SMs, random scales) it runs fa.forward_into / fa.backward_into / fa.attention
with score_mod=<name> and judges O, LSE, dQ, dK, dV against the float64
reference of test_attention.py with the score_mod of score_mods.py applied to
the scaled scores, by the flash-attn rule: err(fa) <= 2 * err(same math in
the inputs' precision) + 1e-5 (LSE against float32 math plus lse_slack; dQ
and dK with the Delta terms of test_attention.delta_terms, through the
score_mod's derivative). Deterministic score_mod backwards run as configs of
their own and repeat some backwards for bit-identical gradients. score_mods
that read tensors (alibi_slopes, rel_bias, key_bias) get random ones per case
(score_mods.make_mod_args) as mod_args, the references the same tensors.

It also checks the lookup by name: a plain query never gets a score_mod kernel
(and the reverse), where the bundle has both; a score_mod the bundle lacks and
a malformed name raise fa.FaError naming it (and, for a lacking one, the
score_mods the bundle has); every score_mod of the bundle has a reference.

    python3 test/gpu/test_score_mod.py --bundle out/bundle-mod --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import json
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import _runtime as rt  # noqa: E402
import score_mods  # noqa: E402
from test_attention import DTYPES, random_case, run_case  # noqa: E402


def problem_key(k):
    return (k["dtype"], k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
            k["window_right"])


def configs(kernels):
    """(forward kernel info, backward mma or False, deterministic) per
    distinct (problem, score_mod, mma) of the bundle's score_mod forwards, as
    test_attention.py builds them for plain kernels."""
    bwd_builds = {problem_key(k) + (k["score_mod"], k["mma"]) for k in kernels
                  if k["direction"] == "bwd" and not k["deterministic"]}
    bwd_keys = {b[:-1] for b in bwd_builds}
    det_keys = {problem_key(k) + (k["score_mod"],) for k in kernels
                if k["direction"] == "bwd" and k["deterministic"]}
    seen, out = set(), []
    for c in kernels:
        if c["direction"] != "fwd":
            continue
        key = problem_key(c) + (c["score_mod"],)
        if key + (c["mma"],) in seen:
            continue
        seen.add(key + (c["mma"],))
        bwd_mma = c["mma"] if key + (c["mma"],) in bwd_builds else "any"
        out.append((c, key in bwd_keys and bwd_mma, False))
        if key in det_keys and c["mma"] == "wgmma":
            out.append((c, "wgmma", True))
    return out


def kernel_mod(bundle, handle):
    info = rt.KernelInfo()
    rt.check(bundle.lib, bundle.lib.fa_kernel_get_info(handle, ctypes.byref(info)))
    return info.score_mod.decode() if info.score_mod else None


def lookups(bundle, kernels, dev):
    """The lookup by name: exact matches, plain and score_mod kernels kept
    apart, missing and malformed names rejected with the names."""
    log = []
    cap = torch.cuda.get_device_capability(dev)
    cc = cap[0] * 10 + cap[1]
    mods = sorted({k["score_mod"] for k in kernels if k["score_mod"]})
    log.append({"what": "every score_mod has a reference", "ok": all(
        score_mods.known(m) for m in mods), "message": "bundle: %s, references: %s" % (
        ", ".join(mods), ", ".join(sorted(score_mods.SCORE_MODS)))})
    plain = {problem_key(k) + (k["direction"],) for k in kernels if not k["score_mod"]}
    checked = set()
    for k in kernels:
        if not k["score_mod"]:
            continue
        key = problem_key(k) + (k["direction"],)
        direction = rt.FWD if k["direction"] == "fwd" else rt.BWD
        find = lambda mod: bundle.find(  # noqa: E731
            direction, DTYPES[k["dtype"]], k["head_dim"], k["head_dim_v"], k["mask"],
            (k["window_left"], k["window_right"]), cc, score_mod=mod)
        if (key, k["score_mod"]) not in checked:
            checked.add((key, k["score_mod"]))
            got = kernel_mod(bundle, find(k["score_mod"]))
            log.append({"what": "find %s %s" % (k["score_mod"], key), "ok":
                        got == k["score_mod"], "message": "got score_mod %s" % got})
        if key in plain and (key, None) not in checked:
            checked.add((key, None))
            got = kernel_mod(bundle, find(None))
            log.append({"what": "plain query %s" % (key,), "ok": got is None,
                        "message": "got score_mod %s" % got})
        if (key, "missing") not in checked:
            checked.add((key, "missing"))
            try:
                find("no_such_mod")
                log.append({"what": "missing score_mod %s" % (key,), "ok": False,
                            "message": "accepted"})
            except fa.FaError as e:
                ok = "score_mod=no_such_mod" in str(e) and k["score_mod"] in str(e)
                log.append({"what": "missing score_mod %s" % (key,), "ok": ok,
                            "message": str(e)})
    # A malformed name is rejected before any lookup, with the name.
    q = torch.randn(1, 1, 8, 64, device=dev).to(torch.bfloat16)
    for bad in ("soft cap", "1x", ""):
        try:
            fa.attention(q, q, q, score_mod=bad)
            log.append({"what": "malformed score_mod %r" % bad, "ok": False,
                        "message": "accepted"})
        except fa.FaError as e:
            log.append({"what": "malformed score_mod %r" % bad,
                        "ok": ("score_mod is %r" % bad) in str(e), "message": str(e)})
    return log


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--cases", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--progress", action="store_true", help="print each case before running it")
    ap.add_argument("--only", default=None,
                    help="score_mod kernels of these names only (comma-separated)")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 LSE reference
    dev = torch.device("cuda")
    torch.cuda.init()
    bundle = fa.load(args.bundle, args.lib)
    kernels = bundle.kernels()
    only = set(args.only.split(",")) if args.only else None
    modded = [k for k in kernels if k["score_mod"] and (only is None or k["score_mod"] in only)]
    cfgs = configs(modded)
    if not cfgs:
        print("FAIL: the bundle has no score_mod forward kernels%s" %
              (" named %s" % args.only if args.only else ""))
        return 1
    print("bundle %s: %d kernels, %d with a score_mod (%s); %d forward configs "
          "(%d with backward, %d deterministic)" % (
              args.bundle, len(kernels), len(modded),
              ", ".join(sorted({k["score_mod"] for k in modded})), len(cfgs),
              sum(bool(b) for _, b, _ in cfgs), sum(det for _, _, det in cfgs)))

    report = {"bundle": args.bundle, "cases": [], "lookups": []}
    failures = 0
    for r in lookups(bundle, modded + [k for k in kernels if not k["score_mod"]], dev):
        report["lookups"].append(r)
        failures += not r["ok"]
        if not r["ok"] or r["what"].startswith(("every", "malformed")):
            print("%s %s: %s" % ("ok  " if r["ok"] else "FAIL", r["what"],
                                 r["message"].splitlines()[0][:200]))
    print("lookups: %d/%d passed" % (sum(r["ok"] for r in report["lookups"]),
                                     len(report["lookups"])))

    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    t0 = time.time()
    case_failures = 0
    for i in range(max(args.cases, len(cfgs))):
        cfg, has_bwd, det = cfgs[i % len(cfgs)]  # round-robin covers every config
        case = random_case(rng, cfg, has_bwd, det)
        case["score_mod"] = cfg["score_mod"]
        if args.progress:
            print("case %d %s" % (i, case), flush=True)
        try:
            res = run_case(case, gen, dev)
        except Exception as e:  # noqa: BLE001 -- a kernel error is a failed case
            res = [{"what": "exception", "ok": False, "message": str(e)}]
        ok = all(r["ok"] for r in res)
        case_failures += not ok
        report["cases"].append({"case": case, "results": res, "ok": ok})
        if not ok:
            print("FAIL case %d %s: %s" % (i, case, [r for r in res if not r["ok"]]))
    failures += case_failures
    n = len(report["cases"])
    print("score_mod differential: %d/%d cases passed in %.1f s" % (
        n - case_failures, n, time.time() - t0))
    worst = {}
    for c in report["cases"]:
        for r in c["results"]:
            if "err" in r:
                key = "%s/%s" % (c["case"]["score_mod"], r["what"])
                tol = 2 * r["math_err"] + 1e-5 + r["slack"]
                worst[key] = max(worst.get(key, 0), r["err"] / tol)
    print("worst err / tolerance per score_mod/output: " +
          ", ".join("%s %.2f" % kv for kv in sorted(worst.items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d)" % failures))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
