#!/usr/bin/env python3
"""Python score_mods that index captured tensors, on the GPU (H200 only).

fa.mods traces each function below into a library function taking the
tensors it reads; its kernels come from a bundle built here beforehand (the
device has no compiler), found by the traced name, which depends on the
program and the tensors' dtypes and ranks only, not on their values:

    python3 test/gpu/test_score_mod_python.py --prepare out/bundle-pymod \
        --fa-aot build/bin/fa-aot            # with a PyTorch (the CPU one will do)

On the device, random cases (test_attention.random_case: GQA/MQA, ragged
Nq != Nk, Nq = 1, every mask of the bundle) draw new tensors of the case's
sizes, build the score_mod over them and run fa.forward_into / backward_into /
fa.attention with score_mod=<the function>, judged against the float64
reference with the same function applied to the scaled scores (flash-attn
rule, test_attention.run_case):

    python3 test/gpu/test_score_mod_python.py --bundle out/bundle-pymod --lib <libfa_runtime.so>
"""
import argparse
import os
import random
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import mods  # noqa: E402

# A relative-position table covers distances -(REL_N-1)..REL_N-1.
REL_N = 4096


def alibi(slopes):
    """ALiBi with slopes [H] from a tensor."""
    return lambda s, b, h, q, kv: s + slopes[h] * (kv - q)


def relative(table):
    """A bias table [H, 2·REL_N - 1] (bf16) by q - kv."""
    return lambda s, b, h, q, kv: s + table[h, q - kv + REL_N - 1]


def key_bias(bias):
    """A key bias [B, Nk] (f16). (With soft-capping on top, the wgmma
    backward spills, as softcap30's does: softcap30 is test_score_mod.py's.)"""
    return lambda s, b, h, q, kv: s + bias[b, kv]


def documents(ids):
    """Scores across documents (ids [B, max(Nq, Nk)], int32) lowered by 4."""
    return lambda s, b, h, q, kv: mods.where(ids[b, q] == ids[b, kv], s, s - 4.0)


def tensors(kind, b, h, nq, nk, device, gen=None):
    """Random tensors of `kind` for a problem of these sizes."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)
    if kind == "alibi":
        return (torch.exp2(-8.0 * torch.arange(1, h + 1, device=device) / h) *
                (0.5 + randn(h).abs()),)
    if kind == "relative":
        return ((2 * randn(h, 2 * REL_N - 1)).to(torch.bfloat16),)
    if kind == "key_bias":
        return ((3 * randn(b, nk)).to(torch.float16),)
    n = max(nq, nk)
    steps = (torch.rand(b, n, generator=gen, device=device) < 0.05).to(torch.int32)
    return (steps.cumsum(1, dtype=torch.int32),)


KINDS = {"alibi": alibi, "relative": relative, "key_bias": key_bias,
         "documents": documents}


def traced_names():
    """kind -> the name fa.mods gives its function (any tensors of the right
    dtypes and ranks: the name does not depend on their values)."""
    return {kind: mods.trace(make(*tensors(kind, 1, 1, 1, 1, "cpu"))).name
            for kind, make in KINDS.items()}


# bf16 forwards on wgmma and mma.sync, each with a backward, over the masks.
CONFIGS = ["fwd:bf16:d128:none:wgmma", "bwd:bf16:d128:none:wgmma",
           "fwd:bf16:d128:causal:wgmma", "bwd:bf16:d128:causal:wgmma",
           "fwd:bf16:d64:causal_bottom_right", "bwd:bf16:d64:causal_bottom_right",
           "fwd:bf16:d128:window:l64:r16:wgmma", "bwd:bf16:d128:window:l64:r16:wgmma"]


def prepare(out, fa_aot):
    names = traced_names()
    os.makedirs(out, exist_ok=True)
    library = os.path.join(out, "pymods.mlir")
    mods.write_library(library, *[mods.trace(KINDS[k](*tensors(k, 1, 1, 1, 1, "cpu")))
                                  for k in KINDS])
    configs = os.path.join(out, "configs.txt")
    with open(configs, "w") as f:
        for name in names.values():
            f.write("".join("%s:mod=%s\n" % (c, name) for c in CONFIGS))
    subprocess.run([fa_aot, "--score-mods", library, "--config-file", configs, "-o", out],
                   check=True)
    print("bundle %s: %s" % (out, ", ".join("%s=%s" % kv for kv in names.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="OUT", help="build the bundle into OUT and exit")
    ap.add_argument("--fa-aot", default="build/bin/fa-aot")
    ap.add_argument("--bundle")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    if args.prepare:
        prepare(args.prepare, args.fa_aot)
        return 0
    from test_attention import random_case, run_case
    from test_score_mod import configs

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kind_of = {name: kind for kind, name in traced_names().items()}
    cfgs = [c for c in configs([k for k in bundle.kernels() if k["score_mod"]])
            if c[0]["score_mod"] in kind_of]
    if not cfgs:
        print("FAIL: %s has no kernels of these score_mods (%s): build it with --prepare"
              % (args.bundle, ", ".join(sorted(kind_of))))
        return 1
    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    failures, t0 = 0, time.time()
    for i in range(max(args.cases, len(cfgs))):
        cfg, has_bwd, det = cfgs[i % len(cfgs)]
        case = random_case(rng, cfg, has_bwd, det)
        kind = kind_of[cfg["score_mod"]]
        fn = KINDS[kind](*tensors(kind, case["b"], case["h"], case["nq"], case["nk"], dev, gen))
        assert mods.trace(fn).name == cfg["score_mod"], (kind, mods.trace(fn).name)
        case["score_mod"] = fn
        try:
            res = run_case(case, gen, dev)
        except Exception as e:  # noqa: BLE001 -- a kernel error is a failed case
            res = [{"what": "exception", "ok": False, "message": str(e)}]
        ok = all(r["ok"] for r in res)
        failures += not ok
        shown = {k: v for k, v in case.items() if k != "score_mod"}
        print("%s %s %s" % ("ok  " if ok else "FAIL", kind, shown if ok else
                            (shown, [r for r in res if not r["ok"]])), flush=True)
    n = max(args.cases, len(cfgs))
    print("Python score_mods with captured tensors: %d/%d cases passed in %.1f s"
          % (n - failures, n, time.time() - t0))
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d)" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
