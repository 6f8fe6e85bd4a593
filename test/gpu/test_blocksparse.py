#!/usr/bin/env python3
"""Differential tests of block-sparse forwards (docs/ABI.md "Block sparsity")
on the GPU through the runtime: fa.block_mask builds the block mask from the
kernel's mask_mod on the GPU; the test checks its counts, index lists and
grid orders against a classification computed here from the mask itself, then runs
fa.forward_into(block_mask=) and fa.backward_into(block_mask=) (the mask_mod
backward) against float64 under the flash-attn rule (test_attention.py's
references and judge). Masks: documents of random lengths (1-8 per row), the
same and every earlier document (doc[q] >= doc[kv]), a causal band shifted by
a per-row offset (kv + shift[b] <= q, index compares),
random 64 x 64 tile patterns of density 5-90% (whole tiles visible, hidden or
a checkerboard, so 128 x 128 blocks come out full, empty and partial), and
one pattern per head (per_head=True). Shapes have ragged tails, GQA, Nq != Nk.
It also checks that the same block mask serves a second call with new q, k, v
(reuse), that BlockMask.rebuild after new mod_arg contents in place gives the
new mask's lists (then serves the second call), that block_class holds every
block's class, and that plain queries never get a block-sparse kernel.

Where the bundle has the block-sparse backward of the mask_mod (bwd
...:blocksparse), fa.backward_into(block_mask=) runs it: the test then also
checks the backward's own block mask (block_q 64, block_kv 128; the
transposed per-key-block lists it walks) and says "+sparse-bwd"; a per-head
mask with GQA falls back to the mask_mod backward. Each case prints its name
before it runs and has a watchdog (--timeout, faulthandler): a hang on the GPU
ends the process with the case named and a traceback, never silently.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_blocksparse.txt \\
        --score-mods test/gpu/block_masks.mlir -o out/bundle-blocksparse
Then, on the GPU machine:
    python3 test/gpu/test_blocksparse.py --bundle out/bundle-blocksparse --lib <libfa_runtime.so>
"""
import argparse
import faulthandler
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa._runtime import FWD  # noqa: E402
from test_attention import (DTYPES, delta_terms, judge, lse_slack, poisoned,  # noqa: E402
                            reference)


def document_ids(b, n, rng, dev):
    ids = torch.zeros(b, n, dtype=torch.int32)
    for row in range(b):
        for _ in range(rng.randint(0, 7)):
            ids[row, rng.randint(0, n - 1):] += 1
    return ids.to(dev)


def tile_pattern(shape, density, rng, dev):
    """Tiles 0 (hidden), 1 (visible), 2 (checkerboard) with about `density`
    of the elements visible."""
    g = torch.Generator().manual_seed(rng.randint(0, 2 ** 31))
    u = torch.rand(shape, generator=g)
    t = torch.zeros(shape, dtype=torch.int32)
    t[u < density] = 1
    checker = (u >= density) & (u < min(1.0, density + 0.15))
    t[checker] = 2
    return t.to(dev)


def allowed_of(name, arg, b, h, nq, nk, dev):
    """[B, H or 1, Nq, Nk] bool: what the mask_mod keeps."""
    i = torch.arange(nq, device=dev).view(nq, 1)
    j = torch.arange(nk, device=dev).view(1, nk)
    if name == "document":
        return (arg[:, :nq].view(b, nq, 1) == arg[:, :nk].view(b, 1, nk)).unsqueeze(1)
    if name == "earlier_documents":
        return (arg[:, :nq].view(b, nq, 1) >= arg[:, :nk].view(b, 1, nk)).unsqueeze(1)
    if name == "shifted_causal":
        return (j.view(1, 1, nk) + arg.long().view(b, 1, 1) <= i.view(1, nq, 1)).unsqueeze(1)
    checker = ((i + j) % 2 == 0)
    if name == "tile_pattern":
        t = arg[:, (i // 64).view(-1)][:, :, (j // 64).view(-1)]  # [B, Nq, Nk]
        return ((t == 1) | ((t == 2) & checker)).unsqueeze(1)
    t = arg[:, :, (i // 64).view(-1)][:, :, :, (j // 64).view(-1)]  # [B, H, Nq, Nk]
    return (t == 1) | ((t == 2) & checker)


def expected_lists(allowed, bq, bkv, nq, nk):
    """Per (b, mask head, query block): partial and full key-block lists, as
    the block mask must hold them (full: every element of rows < Nq visible
    and the block inside Nk)."""
    b, hm = allowed.shape[:2]
    nqb, nkb = -(-nq // bq), -(-nk // bkv)
    pad = torch.zeros(b, hm, nqb * bq, nkb * bkv, dtype=torch.bool, device=allowed.device)
    pad[:, :, :nq, :nk] = allowed
    rows_ok = torch.zeros(nqb * bq, dtype=torch.bool, device=allowed.device)
    rows_ok[:nq] = True
    blocks = pad.view(b, hm, nqb, bq, nkb, bkv)
    any_ = blocks.any(-1).any(-2)
    # all over valid rows: invalid rows count as visible.
    vis = blocks | ~rows_ok.view(1, 1, nqb, bq, 1, 1)
    all_ = vis.all(-1).all(-2)
    inside = torch.tensor([(kb + 1) * bkv <= nk for kb in range(nkb)], device=allowed.device)
    full = all_ & inside.view(1, 1, 1, nkb)
    partial = any_ & ~full
    return partial, full


def check_block_mask(bm, allowed, bq, bkv, nq, nk, results):
    partial, full = expected_lists(allowed, bq, bkv, nq, nk)
    b, hm, nqb, nkb = partial.shape
    data = bm.data
    rows = b * hm
    kv_count = data[:rows * nqb].view(b, hm, nqb)
    full_count = data[rows * nqb:2 * rows * nqb].view(b, hm, nqb)
    off = 2 * rows * nqb
    q_count = data[off:off + rows * nkb].view(b, hm, nkb)
    full_q_count = data[off + rows * nkb:off + 2 * rows * nkb].view(b, hm, nkb)
    off += 2 * rows * nkb
    pairs = rows * nqb * nkb
    kv_index = data[off:off + pairs].view(b, hm, nqb, nkb)
    full_kv_index = data[off + pairs:off + 2 * pairs].view(b, hm, nqb, nkb)
    q_index = data[off + 2 * pairs:off + 3 * pairs].view(b, hm, nkb, nqb)
    full_q_index = data[off + 3 * pairs:off + 4 * pairs].view(b, hm, nkb, nqb)
    block_class = data[off + 4 * pairs:off + 5 * pairs].view(b, hm, nqb, nkb)
    off += 5 * pairs
    kv_order = data[off:off + rows * nqb].view(b, hm, nqb)
    q_order = data[off + rows * nqb:off + rows * (nqb + nkb)].view(b, hm, nkb)
    ok = torch.equal(block_class, (2 * full.int() + partial.int())) and torch.equal(
        kv_count, partial.sum(-1).int()) and torch.equal(
        full_count, full.sum(-1).int()) and torch.equal(
        q_count, partial.sum(-2).int()) and torch.equal(full_q_count, full.sum(-2).int())
    if ok:
        for bi in range(b):
            for hi in range(hm):
                for qb in range(nqb):
                    for counts, index, want in ((kv_count, kv_index, partial),
                                                (full_count, full_kv_index, full)):
                        n = int(counts[bi, hi, qb])
                        got = index[bi, hi, qb, :n].tolist()
                        ok &= got == want[bi, hi, qb].nonzero().view(-1).tolist()
                for kb in range(nkb):
                    for counts, index, want in ((q_count, q_index, partial),
                                                (full_q_count, full_q_index, full)):
                        n = int(counts[bi, hi, kb])
                        got = index[bi, hi, kb, :n].tolist()
                        ok &= got == want[bi, hi, :, kb].nonzero().view(-1).tolist()
                # The grid orders: lines by decreasing list length, ties ascending.
                for order, lengths in ((kv_order, (partial | full).sum(-1)),
                                       (q_order, (partial | full).sum(-2))):
                    n = lengths[bi, hi].tolist()
                    want_order = sorted(range(len(n)), key=lambda i: (-n[i], i))
                    ok &= order[bi, hi].tolist() == want_order
    density = float(allowed.float().mean())
    results.append({"what": "block mask lists (density %.2f, %d full / %d partial of %d)"
                    % (density, int(full.sum()), int(partial.sum()), full.numel()), "ok": ok})


def mod_arg_of(case, rng, dev):
    """A random mod_arg of the case's mask_mod (document ids or tiles)."""
    b, h, nq, nk = (case[x] for x in ("b", "h", "nq", "nk"))
    name = case["mask_mod"]
    if name in ("document", "earlier_documents"):
        return document_ids(b, max(nq, nk), rng, dev)
    if name == "shifted_causal":
        return torch.tensor([rng.randint(-300, 300) for _ in range(b)], dtype=torch.int32,
                            device=dev)
    if name == "tile_pattern":
        return tile_pattern((b, -(-nq // 64), -(-nk // 64)), case["density"], rng, dev)
    return tile_pattern((b, h, -(-nq // 64), -(-nk // 64)), case["density"], rng, dev)


def run_case(case, rng, gen, dev, bundle):
    dt = DTYPES[case["dtype"]]
    b, h, hkv, nq, nk, d = (case[x] for x in ("b", "h", "hkv", "nq", "nk", "d"))
    name = case["mask_mod"]
    arg = mod_arg_of(case, rng, dev)
    per_head = name == "head_tile_pattern"
    allowed = allowed_of(name, arg, b, h, nq, nk, dev)
    results = []
    bm = fa.block_mask(name, b, h, nq, nk, mod_args=[arg], kv_heads=hkv, per_head=per_head,
                       head_dim=d, dtype=dt, bundle=bundle)
    torch.cuda.synchronize()
    info = bundle._info(bm.kernel)
    check_block_mask(bm, allowed, info["block_q"], info["block_kv"], nq, nk, results)
    scale = d ** -0.5
    for call in range(2 if case["reuse"] else 1):  # the same block mask, new data
        if call == 1 and case["rebuild"]:
            # New mod_arg contents in place, the block mask rebuilt into its
            # buffer (BlockMask.rebuild), the second call under the new mask.
            arg.copy_(mod_arg_of(case, rng, dev))
            allowed = allowed_of(name, arg, b, h, nq, nk, dev)
            bm.rebuild()
            torch.cuda.synchronize()
            check_block_mask(bm, allowed, info["block_q"], info["block_kv"], nq, nk, results)
            results[-1]["what"] = "rebuilt " + results[-1]["what"]
        q = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
        k = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
        v = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
        do = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        o64, lse64 = reference(q64, k64, v64, allowed, scale)
        ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
        ol, _ = reference(ql, kl, vl, allowed, scale)
        o = poisoned(b, h, nq, d, dtype=dt, device=dev)
        lse = poisoned(b, h, nq, dtype=torch.float32, device=dev)
        fa.forward_into(q, k, v, o, lse, mod_args=[arg], block_mask=bm, bundle=bundle)
        torch.cuda.synchronize()
        judge("o", o, ol, o64, results)
        with torch.no_grad():
            _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale)
        judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
        empty = ~allowed.expand(b, h, nq, nk).any(-1)
        if empty.any():
            ok = bool(torch.isneginf(lse[empty]).all()) and o[empty].abs().max().item() == 0
            results.append({"what": "rows without keys: O = 0, LSE = -inf", "ok": ok})
        if case["bwd"] and call == 0:
            o64.backward(do.double())
            ol.backward(do)
            dq = poisoned(*q.shape, dtype=dt, device=dev)
            dk = poisoned(*k.shape, dtype=dt, device=dev)
            dvv = poisoned(*v.shape, dtype=dt, device=dev)
            fa.backward_into(q, k, v, o, do, lse, dq, dk, dvv, mod_args=[arg], block_mask=bm,
                             bundle=bundle, mma="wgmma")
            torch.cuda.synchronize()
            sparse = bm._backward
            if sparse:  # the block-sparse backward ran: check its own mask
                binfo = bundle._info(sparse[0])
                check_block_mask(type("M", (), {"data": sparse[1]})(), allowed,
                                 binfo["block_q"], binfo["block_kv"], nq, nk, results)
                results[-1]["what"] = "backward " + results[-1]["what"]
                results.append({"what": "+sparse-bwd", "ok": True})
            shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do,
                                                             allowed, scale, lse64)
            judge("dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q,
                  slack=slack_q)
            judge("dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k,
                  slack=slack_k)
            judge("dv", dvv, vl.grad, v64.grad, results)
    return results


def random_case(rng, fwd, has_bwd, index):
    hkv = rng.choice([1, 2])
    h = hkv * rng.choice([1, 2, 3])
    nq = rng.choice([1, 127, 128, 129, rng.randint(2, 900), 1024, 1500])
    nk = nq if rng.random() < 0.6 else rng.randint(1, 1100)
    # Densities spread over 5-90%.
    density = [0.05, 0.15, 0.3, 0.5, 0.7, 0.9][index % 6]
    return {"dtype": fwd["dtype"], "d": fwd["head_dim"], "mask_mod": fwd["mask_mod"],
            "b": rng.randint(1, 2), "h": h, "hkv": hkv, "nq": nq, "nk": nk,
            "density": density, "bwd": has_bwd, "reuse": index % 4 == 0 or index % 4 == 2,
            "rebuild": index % 4 == 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=12, help="cases per block-sparse forward")
    ap.add_argument("--timeout", type=float, default=60,
                    help="seconds one case may take before the process is ended as hung")
    args = ap.parse_args()
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = bundle.kernels()
    fwds = [k for k in kernels if k.get("block_sparse") and k["direction"] == "fwd"]
    if not fwds:
        sys.exit("no block-sparse forwards in %s" % args.bundle)
    rng = random.Random(11)
    gen = torch.Generator(device=dev).manual_seed(11)
    failed = total = 0
    for fwd in fwds:
        has_bwd = any(k["direction"] == "bwd" and k["mask_mod"] == fwd["mask_mod"]
                      and k["dtype"] == fwd["dtype"] and k["head_dim"] == fwd["head_dim"]
                      and k["mask"] == "none" for k in kernels)
        for n in range(args.cases):
            case = random_case(rng, fwd, has_bwd, n)
            name = "%s %s B%d H%d/%d Nq%d Nk%d density %.2f" % (
                fwd["tag"], case["mask_mod"], case["b"], case["h"], case["hkv"], case["nq"],
                case["nk"], case["density"])
            print("running: " + name, flush=True)
            # A hang (e.g. an mbarrier nobody arrives at) ends the process here,
            # naming the case above.
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            results = run_case(case, rng, gen, dev, bundle)
            faulthandler.cancel_dump_traceback_later()
            bad = [r for r in results if not r["ok"]]
            total += 1
            failed += bool(bad)
            print("%s %s B%d H%d/%d Nq%d Nk%d density %.2f%s%s: %s" % (
                fwd["tag"], case["mask_mod"], case["b"], case["h"], case["hkv"], case["nq"],
                case["nk"], case["density"], " +bwd" if has_bwd else "",
                " +rebuild" if case["rebuild"] else " +reuse" if case["reuse"] else "",
                "FAIL " + "; ".join("%s %s" % (r["what"], r.get("err", "")) for r in bad)
                if bad else "ok [%s]%s" % (results[0]["what"], " +sparse-bwd" if any(
                    r["what"] == "+sparse-bwd" for r in results) else "")), flush=True)
    # Plain mask_mod queries never get a block-sparse kernel.
    f = fwds[0]
    try:
        plain = bundle.find(FWD, f["dtype"], f["head_dim"], f["head_dim_v"], "none", (-1, -1),
                            90, mask_mod=f["mask_mod"])
        plain_ok = not bundle._info(plain)["block_sparse"]
    except fa.FaError:
        plain_ok = True
    total += 1
    failed += not plain_ok
    print("mask_mod query without a block mask gets no block-sparse kernel: %s"
          % ("ok" if plain_ok else "FAIL"))
    print("block-sparse: %d of %d cases passed" % (total - failed, total))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
