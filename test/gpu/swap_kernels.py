#!/usr/bin/env python3
"""Writes a control bundle for test_every_kernel.py: each of a few causal
kernels (forward and backward, mma.sync and wgmma where the bundle has them)
keeps its manifest entry (tag, mask) but points at the code of its twin
without a mask (same dtype, head dims, tiles, instructions and grid). The
bundle holds only those kernels, and the suite must fail every one of them:
a suite that passes a kernel running the wrong code checks nothing.

    python3 test/gpu/swap_kernels.py --bundle out/bundle --out /tmp/swapped
"""
import argparse
import json
import os
import shutil
import sys

# What must agree for the twin's code to take the kernel's arguments.
SAME = ("direction", "dtype", "head_dim", "head_dim_v", "block_q", "block_kv", "warps",
        "stages", "target", "mma", "dsplit", "deterministic", "tensor_maps")


def twin_key(k):
    grids = tuple(sorted((r, e.get("grid", "blocks")) for r, e in k["entries"].items()))
    return tuple(json.dumps(k.get(f), sort_keys=True) for f in SAME) + grids


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    unmasked = {twin_key(k): k for k in manifest["kernels"] if k["mask"] == "none"}
    swapped, seen = [], set()
    for k in manifest["kernels"]:
        twin = unmasked.get(twin_key(k))
        kind = (k["direction"], k.get("mma", "mma_sync"))
        if k["mask"] != "causal" or twin is None or kind in seen:
            continue
        seen.add(kind)
        k = dict(k, entries={r: dict(e, name=twin["entries"][r]["name"])
                             for r, e in k["entries"].items()})
        for field in ("ptx", "cubin"):
            if field in twin:
                k[field] = twin[field]
            else:
                k.pop(field, None)
        swapped.append(k)
        print("%s runs the code of %s" % (k["tag"], twin["tag"]))
    if not swapped:
        print("no causal kernel with an unmasked twin in %s" % args.bundle)
        return 1
    os.makedirs(args.out, exist_ok=True)
    for k in swapped:
        for field in ("ptx", "cubin"):
            if field in k:
                shutil.copy(os.path.join(args.bundle, k[field]), args.out)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(dict(manifest, kernels=swapped), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
