#!/usr/bin/env python3
"""JIT-compiled kernels on the GPU machine, through fa's disk cache.

MLIR is not installed on the GPU machine, so the kernels are compiled here
and the cache is carried:
    python3 test/gpu/test_jit_device.py --prepare --fa-aot build/bin/fa-aot --cache out/jit-cache
compiles CASES with fa.jit exactly as a miss on an sm_90 device would (the
same configs, the same cache layout) and records `fa-aot --version`. On the
device,
    python3 test/gpu/test_jit_device.py --cache out/jit-cache --lib <libfa_runtime.so>
loads no bundle at all (fa.load(None): every kernel by JIT) with FA_AOT a
stand-in that answers --version as the recorded compiler and fails any
compile, so each case must be served from the cache: it runs fa.attention
forward and backward through test_attention.run_case (the float64 reference
and the DESIGN.md rule of the GPU differential tests), then
checks that a config missing from the cache does reach the compiler (the
stand-in's failure, named in the FaError).

It also runs score_mods written in Python (fa.mods, PY_MODS): --prepare traces
them and compiles their kernels into the cache; on the device fa.attention
(score_mod=<the function>) traces them again, finds those kernels, and is
judged against the same functions applied to float64 scores.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

# (dtype, D, mask): none of them is in the default bundle (bf16 d64/d128).
CASES = [("bf16", 96, "causal"), ("f16", 64, "none"), ("bf16", 32, "none")]
MISSING = ("bf16", 80, "none")


def py_softcap(s, b, h, q, kv):
    from fa import mods
    return 20 * mods.tanh(s / 20)


def py_alibi_window(s, b, h, q, kv):
    # Indices meet the score in its dtype (x.to(s.dtype)), as FlexAttention
    # score_mods are written: the bf16 reference stays bf16.
    from fa import mods
    distance = abs(q - kv)
    slope = mods.exp2(-0.5 * (h + 1).to(s.dtype))
    return mods.where(distance <= 96, s - slope * distance.to(s.dtype), s - 40.0)


# (function, dtype, D, mask): Python score_mods, traced and JIT-compiled.
PY_MODS = [(py_softcap, "bf16", 128, "causal"), (py_alibi_window, "bf16", 64, "none")]


def py_mod_configs(fn, dtype, d, mask):
    from fa import jit, mods
    name = mods.trace(fn).name
    return name, [jit.config_text(direction, dtype, d, d, mask, (-1, -1), 90, score_mod=name)
                  for direction in (0, 1)]


def configs(case):
    from fa import jit
    dtype, d, mask = case
    return [jit.config_text(direction, dtype, d, d, mask, (-1, -1), 90)
            for direction in (0, 1)]


def prepare(args):
    os.environ["FA_CACHE_DIR"] = os.path.abspath(args.cache)
    os.environ["FA_AOT"] = os.path.abspath(args.fa_aot)
    from fa import jit
    for case in CASES:
        for config in configs(case):
            print("cached %s in %s" % (config, jit.compile_bundle(config)))
    from fa import mods
    for fn, *case in PY_MODS:
        name, cfgs = py_mod_configs(fn, *case)
        for config in cfgs:
            print("cached %s (%s) in %s" % (config, fn.__name__,
                                            jit.compile_bundle(config, mods.library_for(name))))
    with open(os.path.join(args.cache, "fa-aot-version.txt"), "w") as f:
        f.write(jit.compiler_version(args.fa_aot) + "\n")


def stand_in(cache, work):
    """An fa-aot that reports the recorded version and compiles nothing."""
    with open(os.path.join(cache, "fa-aot-version.txt")) as f:
        version = f.read().strip()
    path = os.path.join(work, "fa-aot")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '%s'; exit 0; fi\n"
                "echo \"fa-aot stand-in: no compiler on the device ($*)\" >&2; exit 3\n"
                % version.replace("'", ""))
    os.chmod(path, 0o755)
    return path


def case_of(dtype, d, mask, autograd):
    """A test_attention.run_case case: mma and bwd_mma None, as fa.attention
    asks by default, so the queries are those --prepare compiled for."""
    return {"dtype": dtype, "d": d, "dv": d, "mask": mask, "window": (-1, -1), "mma": None,
            "b": 2, "h": 4, "hkv": 2, "nq": 200, "nk": 170 if mask == "none" else 200,
            "scale": None, "bwd": True, "bwd_mma": None, "autograd": autograd, "det": False,
            "ramp": False, "repeat": False}


def run(args):
    import torch
    import fa
    from test_attention import run_case
    work = tempfile.mkdtemp(prefix="fa-jit-device-")
    os.environ["FA_AOT"] = stand_in(args.cache, work)
    os.environ["FA_CACHE_DIR"] = os.path.abspath(args.cache)
    torch.zeros(1, device="cuda")
    bundle = fa.load(None, args.lib)
    failed = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype, d, mask in CASES:
        for autograd in (False, True):
            results = run_case(case_of(dtype, d, mask, autograd), gen, "cuda")
            ok = all(r["ok"] for r in results)
            print("%s %s d%d %s (%s): %s" % (
                "ok" if ok else "FAIL", dtype, d, mask,
                "fa.attention" if autograd else "forward_into/backward_into",
                ", ".join("%s err %.2e (math %.2e)" % (r["what"], r["err"], r["math_err"])
                          for r in results)))
            failed |= not ok
        tags = sorted(k["tag"] for k in bundle.kernels()
                      if k["head_dim"] == d and k["dtype"] == dtype and k["mask"] == mask)
        print("   JIT kernels loaded from the cache: %s" % ", ".join(tags))
        failed |= len(tags) != 2
    failed |= run_py_mods(gen)
    dtype, d, mask = MISSING
    x = torch.randn(1, 1, 64, d, device="cuda", dtype=torch.bfloat16)
    try:
        fa.attention(x, x, x)
        print("FAIL a config missing from the cache ran without compiling")
        failed = True
    except fa.FaError as e:
        reached = "stand-in: no compiler" in str(e) and configs(MISSING)[0] in str(e)
        print("%s a miss reaches the compiler: %s" % ("ok" if reached else "FAIL",
                                                      str(e).splitlines()[-1][:160]))
        failed |= not reached
    subprocess.run(["rm", "-rf", work])
    print("RESULT: JIT on the device %s" % ("FAILED" if failed else "passed"))
    sys.exit(1 if failed else 0)


def run_py_mods(gen):
    """fa.attention with score_mod=<Python function>: JIT kernels from the
    cache, judged by test_attention's rule with the function as reference."""
    import torch
    import fa
    import score_mods
    from test_attention import run_case
    failed = False
    for fn, dtype, d, mask in PY_MODS:
        name, _ = py_mod_configs(fn, dtype, d, mask)
        score_mods.SCORE_MODS[name] = fn  # the reference: the same function on tensors
        case = dict(case_of(dtype, d, mask, True), score_mod=name)
        results = run_case(case, gen, "cuda")
        ok = all(r["ok"] for r in results)
        # The function itself, not its name: the same kernels, the same bits.
        q = torch.randn(1, 2, 130, d, device="cuda", dtype=torch.bfloat16)
        same = torch.equal(fa.attention(q, q, q, score_mod=fn, causal=mask == "causal"),
                           fa.attention(q, q, q, score_mod=name, causal=mask == "causal"))
        print("%s Python score_mod %s (%s, %s d%d %s): %s; by function == by name: %s" % (
            "ok" if ok and same else "FAIL", fn.__name__, name, dtype, d, mask,
            ", ".join("%s err %.2e (math %.2e)" % (r["what"], r["err"], r["math_err"])
                      for r in results if "err" in r), same))
        failed |= not (ok and same)
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--fa-aot", default="build/bin/fa-aot")
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    prepare(args) if args.prepare else run(args)


if __name__ == "__main__":
    main()
