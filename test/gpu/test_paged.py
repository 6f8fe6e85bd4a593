#!/usr/bin/env python3
"""Differential GPU test of the paged-KV split-KV decode kernels (H200 only,
never CI), through fa.attention_with_kvcache and the runtime.

Random cases over the bundle's paged kernels (packed GQA and not, every
head dim and mask it has): GQA 32/8 and 8/1, Nq 1, 4 or 16, 1-6 sequences
whose key counts are 0, 1, whole pages, ragged or up to 4k, pages of 16,
64 or 256 keys shuffled through a pool with spare pages, page-table entries
past a sequence's pages left as junk (out of range too: never read), counts
past the capacity (clamped by the kernel), split counts 1..64, and some caches passed contiguous (no page table: a page per
sequence); the rows of a sequence's last page past its count are NaN (stale
memory, which a kernel must not read: the TMA kernels' last tile); kernels with attention sinks get random sinks (-inf, 8, random),
which the merge joins (a row without keys then has LSE = its sink). Each sequence is compared with a float64 reference over the keys
its pages hold (causal and windows aligned bottom-right with its own count,
as flash-attn; a run-time window kernel under a window drawn per case, -1
sides and sizes up to 2^31 - 1 included) under the flash-attn rule of
test_attention.py; rows that see
no key must be exactly O = 0, LSE = -inf. Bad page sizes and tables must
raise FaError before any launch.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_paged.txt -o out/bundle-paged
(configs_paged_tma.txt: the kernels that load K/V by TMA). Then, on the GPU machine:
    python3 test/gpu/test_paged.py --bundle out/bundle-paged --lib <libfa_runtime.so>
"""
import argparse
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_attention import DTYPES, allowed_mask, judge, lse_slack, reference  # noqa: E402
from test_sinks import random_sinks  # noqa: E402
from test_sinks import reference as sinks_reference  # noqa: E402


def random_case(rng, kernel, index):
    # The packed kernels serve GQA decode (attention_with_kvcache takes them
    # for G > 1); the unpacked ones one query head per key head.
    h, hkv = rng.choice([(32, 8), (8, 1), (16, 2)] if kernel["pack_gqa"] else
                        [(8, 8), (16, 16), (2, 2)])
    page = rng.choice([16, 64, 256])
    batch = rng.randint(1, 6)
    longest = rng.choice([300, 1024, 4096])
    counts = [rng.choice([0, 1, page * rng.randint(1, 4), rng.randint(2, 130),
                          rng.randint(1, longest), rng.randint(1, longest)])
              for _ in range(batch)]
    return {"tag": kernel["tag"], "dtype": kernel["dtype"], "d": kernel["head_dim"],
            "mask": kernel["mask"], "h": h, "hkv": hkv, "nq": rng.choice([1, 4, 16]),
            "page": page, "counts": counts, "spare": rng.randint(0, 5),
            "splits": rng.choice([0, 1, 2, 3, 8, 16, 33, 64]),
            "contiguous": index % 7 == 6,
            # Drawn, not tied to the index: every kernel meets each edge.
            "past_capacity": rng.random() < 0.15, "negative": rng.random() < 0.1,
            "scale": rng.choice([None, 0.3]),
            # A run-time window kernel: a window drawn per case (flash-attn's
            # window_size; (-1, -1) would be no window).
            "window": random_window(rng, longest) if kernel["mask"] == "window" else None,
            # A kernel with attention sinks: one logit per query head (-inf,
            # large and random ones), joined by the merge.
            "sinks": kernel.get("sinks", False)}


def random_window(rng, longest):
    side = lambda: rng.choice([-1, 0, rng.randint(1, 64), rng.randint(1, longest),  # noqa: E731
                               2 ** 31 - 1])
    window = (-1, -1)
    while window == (-1, -1):
        window = (side(), side())
    return window


def build_cache(case, gen, dev):
    """K, V pools, the page table (shuffled pages, junk past each sequence's
    pages) and the counts; contiguous: [B, Nk, Hkv, D] caches."""
    dt, d, page = DTYPES[case["dtype"]], case["d"], case["page"]
    counts = case["counts"]
    pages_of = [max(1, -(-c // page)) for c in counts]
    max_pages = max(pages_of)
    if case["contiguous"]:
        shape = (len(counts), max_pages * page, case["hkv"], d)
        k = torch.randn(shape, generator=gen, device=dev).to(dt)
        v = torch.randn(shape, generator=gen, device=dev).to(dt)
        for b, n in enumerate(counts):
            if not case["past_capacity"]:
                poison(k[b, n:], v[b, n:])
        return k, v, None, max_pages * page
    num_pages = sum(pages_of) + case["spare"]
    # randperm takes a generator of its own device: a CPU one, seeded from `gen`.
    seed = int(torch.randint(0, 2 ** 31, (1,), generator=gen, device=dev))
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.full((len(counts), max_pages), 0, dtype=torch.int32)
    junk = [-1, num_pages + 9, 0, num_pages - 1]
    used = 0
    for b, n in enumerate(pages_of):
        for slot in range(max_pages):
            if slot < n:
                table[b, slot] = order[used]
                used += 1
            else:
                table[b, slot] = junk[(b + slot) % len(junk)]
    shape = (num_pages, page, case["hkv"], d)
    k = torch.randn(shape, generator=gen, device=dev).to(dt)
    v = torch.randn(shape, generator=gen, device=dev).to(dt)
    for b, n in enumerate(counts):
        if 0 < n < pages_of[b] * page and not case["past_capacity"]:
            last = int(table[b, pages_of[b] - 1])
            poison(k[last, n % page:], v[last, n % page:])
    return k, v, table.to(dev), max_pages * page


def poison(*rows):
    """A page's rows past its sequence are stale memory: NaN here, which a
    kernel must not read (P = 0 times NaN is NaN). Not in a past_capacity
    case, whose first sequence reads the whole capacity (its table's junk
    slots too, clamped into pages that other sequences own)."""
    for r in rows:
        r.fill_(float("nan"))


def gathered(pool, table, b, count, page):
    """Sequence b's first `count` keys [1, Hkv, count, D] from the pool."""
    if table is None:
        return pool[b, :count].transpose(0, 1).unsqueeze(0)
    keys = torch.arange(count, device=pool.device)
    # A junk entry (read only for a count past the pages the sequence
    # owns) is clamped into the pool, as the kernel clamps it.
    pages = table[b, keys // page].long().clamp(0, pool.shape[0] - 1)
    return pool[pages, keys % page].transpose(0, 1).unsqueeze(0)


def run_case(case, b, gen, dev):
    dt, d = DTYPES[case["dtype"]], case["d"]
    batch, nq, h = len(case["counts"]), case["nq"], case["h"]
    k, v, table, capacity = build_cache(case, gen, dev)
    counts = [min(c, capacity) for c in case["counts"]]
    given = list(counts)
    if case["past_capacity"]:
        # The kernel clamps a count past the cache's capacity (never read
        # on the host): the reference sees the whole cache.
        given[0], counts[0] = capacity + 7, capacity
    if case["negative"]:
        # A negative count sees no key (the kernel clamps it to 0).
        given[-1], counts[-1] = -5, 0
    seqlens = torch.tensor(given, dtype=torch.int32, device=dev)
    q = torch.randn((batch, nq, h, d), generator=gen, device=dev).to(dt)
    causal = case["mask"] == "causal_bottom_right"
    window = case.get("window")
    scale = case["scale"] if case["scale"] is not None else 1 / math.sqrt(d)
    mask_kw = {"window_size": window} if window else {"causal": causal}
    sinks = random_sinks(random.Random(sum(given) + h), h, dev) if case["sinks"] else None
    if sinks is not None:
        mask_kw["sinks"] = sinks
    o, lse = fa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table,
                                       softmax_scale=case["scale"], num_splits=case["splits"],
                                       return_lse=True, bundle=b, **mask_kw)
    torch.cuda.synchronize()
    # A row that sees no key: O = 0 and LSE = -inf, or its head's sink.
    empty_lse = (sinks.view(h, 1) if sinks is not None else
                 torch.full((h, 1), float("-inf"), device=dev))

    def exactly_empty(rows_o, rows_lse):
        return bool((rows_o == 0).all()) and bool(
            (rows_lse == empty_lse.expand_as(rows_lse)).all())

    results, ok = [], True
    for s, n in enumerate(counts):
        got_o = o[s:s + 1].transpose(1, 2)
        if n == 0:
            # No key: exactly (the references cannot reduce over no keys).
            exact = exactly_empty(got_o[0], lse[s])
            results.append({"what": "no keys[%d]" % s, "ok": exact})
            ok &= exact
            continue
        page = k.shape[1]
        ks = gathered(k, table, s, n, page)
        vs = gathered(v, table, s, n, page)
        qs = q[s:s + 1].transpose(1, 2)
        i = torch.arange(nq, device=dev).view(-1, 1)
        j = torch.arange(n, device=dev).view(1, -1)
        if window:
            allowed = allowed_mask("window", window, nq, n, dev)
        else:
            allowed = (j <= i + n - nq) if causal else torch.ones((nq, n), dtype=torch.bool,
                                                                  device=dev)
        if sinks is None:
            ref = lambda x, y, z: reference(x, y, z, allowed, scale)  # noqa: E731
        else:
            ref = lambda x, y, z: sinks_reference(x, y, z, sinks.to(x.dtype),  # noqa: E731
                                                  allowed, scale)
        o64, lse64 = ref(qs.double(), ks.double(), vs.double())
        low, _ = ref(qs, ks, vs)
        lse32 = ref(qs.float(), ks.float(), vs.float())[1]
        ok &= judge("O[%d]" % s, got_o, low, o64, results)
        ok &= judge("LSE[%d]" % s, lse[s:s + 1], lse32, lse64, results,
                    slack=lse_slack(qs, ks, lse64, scale))
        empty = ~allowed.any(-1)
        if empty.any():
            exact = exactly_empty(got_o[0][:, empty], lse[s][:, empty])
            results.append({"what": "empty rows[%d]" % s, "ok": exact})
            ok &= exact
    return ok, results


def expect_rejected(b, dev):
    """Bad inputs raise FaError before any launch."""
    q = torch.zeros((1, 1, 32, 128), dtype=torch.bfloat16, device=dev)
    pool = torch.zeros((4, 24, 8, 128), dtype=torch.bfloat16, device=dev)
    table = torch.zeros((1, 2), dtype=torch.int32, device=dev)
    for label, call, expect in [
            ("page size 24", lambda: fa.attention_with_kvcache(q, pool, pool, 5, table, bundle=b),
             "multiple of 16"),
            ("int64 table", lambda: fa.attention_with_kvcache(
                q, pool[:, :16], pool[:, :16], 5, table.long(), bundle=b), "int32"),
            ("count too big", lambda: fa.attention_with_kvcache(
                q, pool[:, :16], pool[:, :16], 33, table, bundle=b), "cache_seqlens 33")]:
        try:
            call()
        except fa.FaError as e:
            if expect not in str(e):
                print("FAIL %s: %s" % (label, e))
                return False
            continue
        print("FAIL %s: no FaError" % label)
        return False
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", required=True)
    p.add_argument("--lib", default=None)
    p.add_argument("--cases", type=int, default=160)
    p.add_argument("--seed", type=int, default=16)
    a = p.parse_args()
    dev = torch.device("cuda")
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    kernels = [k for k in b.kernels() if k.get("paged")]
    if not kernels:
        sys.exit("no paged kernels in %s" % a.bundle)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    passed = failed = 0
    for index in range(a.cases):
        kernel = kernels[index % len(kernels)]
        case = random_case(rng, kernel, index)
        try:
            ok, results = run_case(case, b, gen, dev)
        except fa.FaError as e:
            ok, results = False, [{"what": "FaError: %s" % e, "ok": False}]
        passed += ok
        failed += not ok
        if not ok:
            bad = [r for r in results if not r["ok"]]
            print("FAIL %s h%d/%d nq%d page%d counts %s splits %d%s: %s" % (
                case["tag"], case["h"], case["hkv"], case["nq"], case["page"], case["counts"],
                case["splits"], " contiguous" if case["contiguous"] else "", bad[:3]))
    ok = expect_rejected(b, dev)
    print("paged: %d passed, %d failed%s" % (passed, failed, "" if ok else ", rejections FAILED"))
    sys.exit(0 if failed == 0 and ok else 1)


if __name__ == "__main__":
    main()
