#!/usr/bin/env python3
"""Captures every kernel of an fa bundle into a CUDA graph and replays it with
new data in the same buffers, against eager launches (H200 only, never CI).

Each kernel is launched directly through fa_attention_forward /
fa_attention_backward with its own handle (as test_every_kernel.py does), so
wgmma kernels with tensor maps, persistent forwards (a tile-counter workspace
per launch) and deterministic backwards (a semaphore workspace per launch) are
all captured, on two shapes:

  ragged   B 2, H 6 / Hkv 2, Nq 333, Nk 461 (partial first and last tiles)
  grid     B 2, H 16 / Hkv 4, Nq 1100, Nk 1050 (more query tiles than SMs)

Per kernel and shape: one eager launch (it loads the module), then
torch.cuda.graph captures the same launch twice back to back (so a replay
also shows that a workspace is zeroed again inside the graph). Then,
for two rounds of new random inputs copied into the captured buffers, outputs
NaN-poisoned: replay, keep the outputs, poison them again, launch eagerly on
the same inputs and compare. Forward O and LSE, backward dK and dV, and every
output of a deterministic backward must be bit-identical; dQ (summed with
unordered atomics) within 2 units in the last place of the largest |dQ|. A
replay must also change the outputs from the previous round's (the graph
reads the buffers, not a copy made at capture), and no output may keep a NaN.

Then the Python API as a model would use it: fa.attention forward and
backward (autograd, the runtime's kernel choice, workspaces from PyTorch's
allocator) captured whole with torch.cuda.graph after a warm-up on a side
stream, replayed on new Q, K, V, dO and compared with eager calls on the same
data (O, dK, dV bit-identical; dQ within 2 ulp of max |dQ|), for bf16 d 64
and 128, causal and not, deterministic backward or not, on the shapes above.

    python3 test/gpu/test_cuda_graph.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_every_kernel import (DTYPES, Shape, launch_backward, load_kernels,  # noqa: E402
                               launch_forward)

SHAPES = [
    Shape("ragged", 2, 6, 2, 333, 461, 1.0, False),
    Shape("grid", 2, 16, 4, 1100, 1050, 1.0, False),
]
ROUNDS = 2


def buffers(kernel, shape, dev):
    """The captured launch's tensors: inputs (refilled each round) and
    outputs (poisoned before each launch)."""
    dtype = DTYPES[kernel["dtype"]]
    d, dv = kernel["head_dim"], kernel["head_dim_v"]
    b, h, hkv, nq, nk = shape.b, shape.h, shape.hkv, shape.nq, shape.nk

    def empty(*size, dt=dtype):
        return torch.empty(*size, device=dev, dtype=dt)

    ins = {"q": empty(b, h, nq, d), "k": empty(b, hkv, nk, d), "v": empty(b, hkv, nk, dv)}
    if kernel["direction"] == "fwd":
        outs = {"o": empty(b, h, nq, dv), "lse": empty(b, h, nq, dt=torch.float32)}
    else:
        ins.update({"o": empty(b, h, nq, dv), "do": empty(b, h, nq, dv),
                    "lse": empty(b, h, nq, dt=torch.float32)})
        outs = {"dq": empty(b, h, nq, d), "dk": empty(b, hkv, nk, d),
                "dv": empty(b, hkv, nk, dv), "delta": empty(b, h, nq, dt=torch.float32),
                "acc": empty(b, h, nq, d, dt=torch.float32)}
    return ins, outs


def refill(ins, scale, gen):
    """New inputs, in place. The backward's O and LSE are those of unmasked
    attention on the new Q, K, V (float32): with any mask, P = exp(s - LSE)
    stays at most 1, and replay and eager launch see the same inputs."""
    for name in ("q", "k", "v", "do"):
        if name in ins:
            t = torch.randn(ins[name].shape, generator=gen, device=ins[name].device)
            ins[name].copy_(t)
    if "o" in ins:
        q, k, v = (ins[n].float() for n in ("q", "k", "v"))
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        ins["lse"].copy_(torch.logsumexp(s, -1))
        ins["o"].copy_(torch.matmul(torch.softmax(s, -1), v))


def launcher(bundle, kernel, ins, outs, scale):
    if kernel["direction"] == "fwd":
        return lambda: launch_forward(bundle, kernel, ins["q"], ins["k"], ins["v"], outs["o"],
                                      outs["lse"], scale)
    return lambda: launch_backward(bundle, kernel, ins["q"], ins["k"], ins["v"], ins["o"],
                                   ins["do"], ins["lse"], outs["dq"], outs["dk"], outs["dv"],
                                   outs["delta"], outs["acc"], scale)


def poison(outs):
    for t in outs.values():
        t.fill_(float("nan"))


def compared(kernel):
    """The outputs compared, each with whether it must be bit-identical."""
    if kernel["direction"] == "fwd":
        return {"o": True, "lse": True}
    exact = kernel["deterministic"]
    return {"dq": exact, "dk": True, "dv": True}


def same(name, exact, got, want):
    """'' if got matches want, else what differs."""
    g, w = got.float(), want.float()
    both_nan = torch.isnan(g) & torch.isnan(w)
    if exact:
        # -inf LSE rows compare equal; NaN only where both are NaN (none are
        # expected: checked separately).
        bad = ~((g == w) | both_nan)
        n = int(bad.sum())
        return "" if n == 0 else "%s: %d elements differ (max |diff| %.3g)" % (
            name, n, float((g - w).abs().nan_to_num(float("inf"))[bad].max()))
    ulp = 2.0 ** -7 if got.dtype == torch.bfloat16 else 2.0 ** -10
    tol = 2 * ulp * float(w.abs().max())
    err = float((g - w).abs().max())
    return "" if err <= tol else "%s: max |diff| %.3g > %.3g" % (name, err, tol)


def run_case(bundle, kernel, shape, dev, seed):
    scale = shape.scale / math.sqrt(kernel["head_dim"])
    ins, outs = buffers(kernel, shape, dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    refill(ins, scale, gen)
    launch = launcher(bundle, kernel, ins, outs, scale)
    poison(outs)
    launch()  # eager first: loads the module in this context
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
        launch()
    checks = compared(kernel)
    previous = None
    for _ in range(ROUNDS):
        refill(ins, scale, gen)
        poison(outs)
        graph.replay()
        torch.cuda.synchronize()
        replayed = {n: outs[n].clone() for n in checks}
        poison(outs)
        launch()
        torch.cuda.synchronize()
        for name, exact in checks.items():
            if torch.isnan(replayed[name]).any():
                return "%s: the replay left NaN" % name
            problem = same(name, exact, replayed[name], outs[name])
            if problem:
                return "replay vs eager: " + problem
        if previous is not None and all(torch.equal(previous[n], replayed[n]) for n in checks):
            return "the replay gave the previous round's outputs: it did not read the new inputs"
        previous = replayed
    del graph
    return ""


def run_api_case(shape, d, causal, deterministic, dev, seed):
    """fa.attention + backward captured whole; '' if replays match eager."""
    dtype = torch.bfloat16
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    def rand(*size):
        return torch.randn(*size, generator=gen, device=dev).to(dtype)

    b, h, hkv, nq, nk = shape.b, shape.h, shape.hkv, shape.nq, shape.nk
    q, k, v = (rand(b, n_h, n, d).requires_grad_() for n_h, n in ((h, nq), (hkv, nk), (hkv, nk)))
    do = rand(b, h, nq, d)

    def step():
        o = fa.attention(q, k, v, causal=causal, deterministic=deterministic)
        o.backward(do)
        return o

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            q.grad = k.grad = v.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    q.grad = k.grad = v.grad = None
    with torch.cuda.graph(graph):
        o_static = step()
    for _ in range(ROUNDS):
        with torch.no_grad():
            for t in (q, k, v, do):
                t.copy_(rand(*t.shape))
        graph.replay()
        torch.cuda.synchronize()
        got = {"o": o_static.detach().clone(), "dq": q.grad.clone(), "dk": k.grad.clone(),
               "dv": v.grad.clone()}
        eq, ek, ev = (t.detach().clone().requires_grad_() for t in (q, k, v))
        eo = fa.attention(eq, ek, ev, causal=causal, deterministic=deterministic)
        eo.backward(do)
        torch.cuda.synchronize()
        want = {"o": eo.detach(), "dq": eq.grad, "dk": ek.grad, "dv": ev.grad}
        for name in got:
            if torch.isnan(got[name]).any():
                return "%s: the replay left NaN" % name
            problem = same(name, name != "dq" or deterministic, got[name], want[name])
            if problem:
                return "replay vs eager: " + problem
    del graph
    return ""


def run_api(results, dev, progress):
    """The fa.attention cases; kernels the bundle lacks are reported, not run."""
    for shape in SHAPES:
        for d in (64, 128):
            for causal in (False, True):
                for deterministic in (False, True):
                    name = "api d%d %s%s" % (d, "causal" if causal else "none",
                                             " det" if deterministic else "")
                    if progress:
                        print("... %s %s" % (name, shape.name), flush=True)
                    try:
                        problem = run_api_case(shape, d, causal, deterministic, dev,
                                               seed=len(results))
                    except fa.FaError as e:
                        if e.status == 2:  # FA_ERROR_NOT_FOUND: not in this bundle
                            print("skip %s %s: %s" % (name, shape.name, str(e).splitlines()[0]))
                            continue
                        problem = "FaError: %s" % e
                    except RuntimeError as e:
                        problem = "RuntimeError: %s" % e
                    results.append({"tag": name, "shape": shape.name, "ok": not problem,
                                    "problem": problem})
                    print("%s %s %s %s" % ("ok  " if not problem else "FAIL", name,
                                           shape.name, problem))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--json", default=None, help="write per-kernel results here")
    ap.add_argument("--only", default=None, help="kernels whose tag contains this")
    ap.add_argument("--progress", action="store_true", help="print each case before it runs")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    torch.cuda.init()
    bundle, kernels = load_kernels(args)
    if not kernels:
        print("FAIL: no kernels to capture in %s" % args.bundle)
        return 1
    cc = torch.cuda.get_device_capability(dev)
    results, t0 = [], time.time()
    for i, kernel in enumerate(kernels):
        runs = kernel["target"] != "sm_90a" or cc == (9, 0)
        for shape in SHAPES:
            if not runs:
                continue
            if args.progress:
                print("... %s %s" % (kernel["tag"], shape.name), flush=True)
            try:
                problem = run_case(bundle, kernel, shape, dev, seed=1000 * i + len(results))
            except (fa.FaError, RuntimeError) as e:
                problem = "%s: %s" % (type(e).__name__, e)
            ok = not problem
            results.append({"tag": kernel["tag"], "shape": shape.name, "ok": ok,
                            "problem": problem})
            print("%s %s %s %s" % ("ok  " if ok else "FAIL", kernel["tag"], shape.name,
                                   problem))
    captured = {r["tag"] for r in results}
    run_api(results, dev, args.progress)
    failed = [r for r in results if not r["ok"]]
    missing = [k["tag"] for k in kernels if k["tag"] not in captured]
    print("RESULT: %d of %d captures replayed like eager launches (%d kernels and the "
          "fa.attention cases, %.1f s)%s" % (
        len(results) - len(failed), len(results), len(captured), time.time() - t0,
        "; not run on this device: " + ", ".join(missing) if missing else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
