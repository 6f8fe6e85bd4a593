#!/usr/bin/env python3
"""The launch workspaces of persistent forwards and deterministic backwards
under concurrency (H200 only, never CI).

An eager persistent forward reuses its stream's tile counter (the kernel
stores 0 back at its end) and a deterministic backward takes its semaphores
from the runtime's memory pool; a captured launch takes graph-owned memory.
If two launches could ever share a counter or semaphores, tiles would be
skipped or computed twice and the outputs would differ from a serial run.

For every persistent forward and deterministic backward of the bundle, on
two shapes (few tiles; more query tiles than SMs), with 4 side streams each
holding its own inputs (different head counts, so different tile counts):
  serial      each stream's launch alone, synchronised: the reference
  concurrent  ROUNDS rounds of one launch per stream, no synchronisation in
              between, outputs NaN-poisoned on their stream before each
  graph       the launch of stream 0 captured on stream 0, then replayed on
              stream 1 while stream 0 keeps launching eagerly
Every output must equal the reference bit for bit (both kinds of kernel are
deterministic).

    python3 test/gpu/test_streams.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_every_kernel import (DTYPES, launch_backward, launch_forward,  # noqa: E402
                               load_kernels)

STREAMS = 4
ROUNDS = 10
# (batch, query heads per stream, key heads, nq, nk): stream s has heads[s].
SHAPES = {"few": (1, [2, 4, 6, 8], 2, 200, 300), "grid": (2, [16, 12, 8, 20], 4, 1100, 1050)}


def mask_kwargs(kernel):
    mask = kernel["mask"]
    if mask == "window":
        return {"window": (kernel["window_left"], kernel["window_right"])}
    return {"causal": mask == "causal", "causal_bottom_right": mask == "causal_bottom_right"}


def make_launch(bundle, kernel, heads, shape, dev):
    """(launch on the current stream, output tensors) for one stream's
    inputs."""
    b, _, hkv, nq, nk = shape
    dtype, d, dv = DTYPES[kernel["dtype"]], kernel["head_dim"], kernel["head_dim_v"]
    q = torch.randn(b, heads, nq, d, device=dev, dtype=dtype)
    k = torch.randn(b, hkv, nk, d, device=dev, dtype=dtype)
    v = torch.randn(b, hkv, nk, dv, device=dev, dtype=dtype)
    o = torch.empty(b, heads, nq, dv, device=dev, dtype=dtype)
    lse = torch.empty(b, heads, nq, device=dev, dtype=torch.float32)
    scale = d ** -0.5
    if kernel["direction"] == "fwd":
        return (lambda: launch_forward(bundle, kernel, q, k, v, o, lse, scale)), (o, lse)
    # The backward's O and LSE from the bundle's forward of its config.
    fa.forward_into(q, k, v, o, lse, scale=scale, bundle=bundle, **mask_kwargs(kernel),
                    score_mod=kernel.get("score_mod"))
    do = torch.randn_like(o)
    dq, dk, dvt = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(lse)
    acc = torch.empty(q.shape, device=dev, dtype=torch.float32)
    return (lambda: launch_backward(bundle, kernel, q, k, v, o, do, lse, dq, dk, dvt, delta,
                                    acc, scale)), (dq, dk, dvt)


def poison(outputs):
    for t in outputs:
        t.fill_(float("nan"))


def run_kernel(bundle, kernel, shape, dev):
    """'' if every concurrent and graph output equals the serial one, else
    what differed."""
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    launches = [make_launch(bundle, kernel, heads, shape, dev) for heads in shape[1]]
    torch.cuda.synchronize()
    reference = []
    for launch, outputs in launches:
        poison(outputs)
        launch()
        torch.cuda.synchronize()
        reference.append([t.clone() for t in outputs])

    def compare(what, s, outputs):
        for i, (got, want) in enumerate(zip(outputs, reference[s])):
            if not torch.equal(got, want):
                bad = (got != want) | got.isnan()
                return "%s: stream %d output %d differs at %d of %d elements" % (
                    what, s, i, int(bad.sum()), got.numel())
        return ""

    torch.cuda.synchronize()
    for r in range(ROUNDS):
        for s, (launch, outputs) in enumerate(launches):
            with torch.cuda.stream(streams[s]):
                poison(outputs)
                launch()
        torch.cuda.synchronize()
        for s, (_, outputs) in enumerate(launches):
            err = compare("concurrent round %d" % r, s, outputs)
            if err:
                return err

    # Stream 0's launch captured on stream 0 and replayed on stream 1, while
    # stream 0 launches the same kernel eagerly into other buffers.
    launch, outputs = launches[0]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=streams[0]):
        launch()
    torch.cuda.synchronize()
    eager_launch, eager_outputs = launches[2]
    for r in range(ROUNDS):
        with torch.cuda.stream(streams[1]):
            poison(outputs)
            graph.replay()
        with torch.cuda.stream(streams[0]):
            poison(eager_outputs)
            eager_launch()
        torch.cuda.synchronize()
        err = compare("graph replay round %d" % r, 0, outputs) or \
            compare("eager beside a replay, round %d" % r, 2, eager_outputs)
        if err:
            return err
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--only", default=None, help="kernels whose tag contains this")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    bundle, kernels = load_kernels(args)
    kernels = [k for k in kernels if (k["direction"] == "fwd" and k["persistent_grid"]) or
               (k["direction"] == "bwd" and k["deterministic"])]
    results, failures = [], 0
    for kernel in kernels:
        for name, shape in SHAPES.items():
            err = run_kernel(bundle, kernel, shape, dev)
            results.append({"tag": kernel["tag"], "shape": name, "ok": not err, "error": err})
            failures += bool(err)
            print("%s %s %s%s" % ("FAIL" if err else "ok", kernel["tag"], name,
                                  ": " + err if err else ""))
    print("RESULT: %d/%d kernel x shape runs bit-identical to serial on %d concurrent streams "
          "and beside a graph replay" % (len(results) - failures, len(results), STREAMS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    sys.exit(1 if failures or not results else 0)


if __name__ == "__main__":
    main()
