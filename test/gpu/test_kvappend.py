#!/usr/bin/env python3
"""Differential GPU test of fa_kv_append (H200 only, never CI): new keys and
values appended into a KV cache, rotary optional, then the paged decode,
through fa.attention_with_kvcache(q, k_cache, v_cache, k=, v=, rotary_cos=,
rotary_sin=, cache_seqlens=, page_table=, rotary_interleaved=, causal=).

Random cases over the bundle's kv_append kernels: pages of 16, 64 or 256
keys shuffled through a pool (partly filled pages, appends that cross a
page boundary), some caches contiguous (no page table), Nnew 1..16, Sq 1..16,
rotary off / on with rotary_dim D or D/2, interleaved and not, causal and
not. After each call:
  - the whole cache is compared bitwise with a torch reference: the old
    cache with the new rows written, the keys rotated in float32 (separately
    rounded products, as the kernel) and rounded to bf16;
  - O and LSE against a float64 reference over cache_seqlens + Nnew keys
    (q rotated as flash-attn: at cache_seqlens + i when causal, at
    cache_seqlens otherwise), flash-attn rule of test_attention.py.
Then a capacity overflow and a bad page-table entry must raise FaError and
leave the cache untouched. Every launch is followed by
torch.cuda.synchronize(); each step runs under a watchdog
(faulthandler.dump_traceback_later) that names the step and exits on a hang.

Built on the development machine:
    build/bin/fa-aot --config-file test/gpu/configs_kvappend.txt -o out/bundle-kvappend
On the GPU machine:
    python3 test/gpu/test_kvappend.py --bundle out/bundle-kvappend --lib <libfa_runtime.so>
"""
import argparse
import faulthandler
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_attention import DTYPES, judge, lse_slack, reference  # noqa: E402

STEP_TIMEOUT_S = 60


class Step:
    """Names a step and arms the watchdog for it."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        print("step: %s" % self.name, flush=True)
        faulthandler.dump_traceback_later(STEP_TIMEOUT_S, exit=True)

    def __exit__(self, *exc):
        faulthandler.cancel_dump_traceback_later()


def rotate_ref(x, cos, sin, pos, interleaved):
    """x [N, H, D] (bf16) rotated at positions pos [N]: float32, separately
    rounded products, rounded once to x's dtype."""
    half = cos.shape[1]
    rd = 2 * half
    xf = x.float()
    c = cos[pos].float().unsqueeze(1)  # [N, 1, half]
    s = sin[pos].float().unsqueeze(1)
    if interleaved:
        x1, x2 = xf[..., 0:rd:2], xf[..., 1:rd:2]
    else:
        x1, x2 = xf[..., :half], xf[..., half:rd]
    o1 = x1 * c - x2 * s
    o2 = x1 * s + x2 * c
    out = xf.clone()
    if interleaved:
        out[..., 0:rd:2], out[..., 1:rd:2] = o1, o2
    else:
        out[..., :half], out[..., half:rd] = o1, o2
    return out.to(x.dtype)


def random_case(rng, kernel, index):
    h, hkv = rng.choice([(32, 8), (8, 1), (16, 2)] if kernel["pack_gqa"] else [(8, 8), (2, 2)])
    page = rng.choice([16, 64, 256])
    batch = rng.randint(1, 5)
    new = rng.choice([1, 1, 2, 3, 7, 16, rng.randint(1, 16)])
    counts = [rng.choice([0, 1, page - 1, page, rng.randint(2, 3 * page)]) for _ in range(batch)]
    d = kernel["head_dim"]
    rotary = rng.choice([None, d, d // 2])
    return {"tag": kernel["tag"], "d": d, "mask": kernel["mask"], "h": h, "hkv": hkv,
            "page": page, "counts": counts, "new": new,
            "sq": new if rng.random() < 0.7 else rng.randint(1, 16),
            "contiguous": index % 5 == 4, "rotary": rotary,
            "interleaved": rng.random() < 0.5, "spare": rng.randint(0, 3)}


def build_cache(case, gen, dev):
    """Pools with room for every sequence's counts + new rows (shuffled
    pages), or contiguous caches; junk in every row."""
    dt, d, page = DTYPES["bf16"], case["d"], case["page"]
    need = [c + case["new"] for c in case["counts"]]
    pages_of = [-(-n // page) for n in need]
    max_pages = max(pages_of)
    if case["contiguous"]:
        shape = (len(need), max_pages * page, case["hkv"], d)
        return (torch.randn(shape, generator=gen, device=dev).to(dt),
                torch.randn(shape, generator=gen, device=dev).to(dt), None)
    num_pages = sum(pages_of) + case["spare"]
    # randperm takes a generator of its own device: a CPU one, seeded from `gen`.
    seed = int(torch.randint(0, 2 ** 31, (1,), generator=gen, device=dev))
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.zeros((len(need), max_pages), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_of):
        for slot in range(n):
            table[b, slot] = order[used]
            used += 1
    shape = (num_pages, page, case["hkv"], d)
    return (torch.randn(shape, generator=gen, device=dev).to(dt),
            torch.randn(shape, generator=gen, device=dev).to(dt), table.to(dev))


def rows_of(table, b, start, n, page):
    """(page, slot) indices of rows start .. start + n - 1 of sequence b."""
    pos = torch.arange(start, start + n)
    if table is None:
        return torch.full_like(pos, b), pos
    return table[b].cpu().long()[pos // page], pos % page


def run_case(case, b, gen, dev, index):
    dt, d, page = DTYPES["bf16"], case["d"], case["page"]
    batch, new, sq, h, hkv = len(case["counts"]), case["new"], case["sq"], case["h"], case["hkv"]
    k_cache, v_cache, table = build_cache(case, gen, dev)
    page = k_cache.shape[1]
    k_new = torch.randn((batch, new, hkv, d), generator=gen, device=dev).to(dt)
    v_new = torch.randn((batch, new, hkv, d), generator=gen, device=dev).to(dt)
    q = torch.randn((batch, sq, h, d), generator=gen, device=dev).to(dt)
    seqlens = torch.tensor(case["counts"], dtype=torch.int32, device=dev)
    cos = sin = None
    if case["rotary"]:
        max_pos = max(case["counts"]) + max(new, sq) + 5
        angle = torch.rand((max_pos, case["rotary"] // 2), generator=gen, device=dev) * 6.3
        cos, sin = torch.cos(angle), torch.sin(angle)
    causal = case["mask"] == "causal_bottom_right"
    # The reference of the append, before the call changes the caches.
    want_k, want_v = k_cache.clone(), v_cache.clone()
    q_ref = q.clone()
    for s, n in enumerate(case["counts"]):
        pages, slots = rows_of(table, s, n, new, page)
        kr = k_new[s]
        if cos is not None:
            pos = torch.arange(n, n + new, device=dev)
            kr = rotate_ref(kr, cos, sin, pos, case["interleaved"])
            qpos = torch.arange(n, n + sq, device=dev) if causal else torch.full(
                (sq,), n, device=dev)
            q_ref[s] = rotate_ref(q[s], cos, sin, qpos, case["interleaved"])
        want_k[pages.to(dev), slots.to(dev)] = kr
        want_v[pages.to(dev), slots.to(dev)] = v_new[s]
    with Step("case %d: append + decode (%s)" % (index, case["tag"])):
        o, lse = fa.attention_with_kvcache(
            q, k_cache, v_cache, k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin,
            cache_seqlens=seqlens, page_table=table, causal=causal,
            rotary_interleaved=case["interleaved"], return_lse=True, bundle=b)
        torch.cuda.synchronize()
    results, ok = [], True
    for name, got, want in (("k_cache", k_cache, want_k), ("v_cache", v_cache, want_v)):
        same = torch.equal(got.view(torch.int16), want.view(torch.int16))
        diff = int((got.view(torch.int16) != want.view(torch.int16)).sum())
        results.append({"what": name + " bitwise", "ok": same, "differing": diff})
        ok &= same
    scale = 1 / math.sqrt(d)
    for s, n0 in enumerate(case["counts"]):
        n = n0 + new
        pages, slots = rows_of(table, s, 0, n, page)
        ks = want_k[pages.to(dev), slots.to(dev)].transpose(0, 1).unsqueeze(0)
        vs = want_v[pages.to(dev), slots.to(dev)].transpose(0, 1).unsqueeze(0)
        qs = q_ref[s:s + 1].transpose(1, 2)
        i = torch.arange(sq, device=dev).view(-1, 1)
        j = torch.arange(n, device=dev).view(1, -1)
        allowed = (j <= i + n - sq) if causal else torch.ones((sq, n), dtype=torch.bool,
                                                              device=dev)
        o64, lse64 = reference(qs.double(), ks.double(), vs.double(), allowed, scale)
        low, _ = reference(qs, ks, vs, allowed, scale)
        lse32 = reference(qs.float(), ks.float(), vs.float(), allowed, scale)[1]
        got_o = o[s:s + 1].transpose(1, 2)
        ok &= judge("O[%d]" % s, got_o, low, o64, results)
        ok &= judge("LSE[%d]" % s, lse[s:s + 1], lse32, lse64, results,
                    slack=lse_slack(qs, ks, lse64, scale))
    return ok, results


def expect_rejected(b, dev):
    """An overflow or a bad page entry raises FaError and writes nothing."""
    dt = torch.bfloat16
    pool = torch.zeros((4, 16, 8, 128), dtype=dt, device=dev)
    vpool = torch.zeros_like(pool)
    q = torch.zeros((1, 1, 32, 128), dtype=dt, device=dev)
    k = torch.ones((1, 2, 8, 128), dtype=dt, device=dev)
    table = torch.tensor([[0, 1]], dtype=torch.int32, device=dev)
    bad_table = torch.tensor([[0, 9]], dtype=torch.int32, device=dev)
    cases = [
        ("capacity", lambda: fa.attention_with_kvcache(
            q, pool, vpool, k=k, v=k, cache_seqlens=31, page_table=table, bundle=b),
         "overflows the cache"),
        ("page entry", lambda: fa.attention_with_kvcache(
            q, pool, vpool, k=k, v=k, cache_seqlens=15, page_table=bad_table, bundle=b),
         "outside the pool"),
        ("k without v", lambda: fa.attention_with_kvcache(
            q, pool, vpool, k=k, cache_seqlens=3, page_table=table, bundle=b), "k and v")]
    for label, call, expect in cases:
        with Step("rejection: %s" % label):
            try:
                call()
                torch.cuda.synchronize()
            except fa.FaError as e:
                if expect not in str(e):
                    print("FAIL %s: %s" % (label, e))
                    return False
                if pool.any() or vpool.any():
                    print("FAIL %s: the cache was written" % label)
                    return False
                continue
        print("FAIL %s: no FaError" % label)
        return False
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", required=True)
    p.add_argument("--lib", default=None)
    p.add_argument("--cases", type=int, default=120)
    p.add_argument("--seed", type=int, default=17)
    a = p.parse_args()
    dev = torch.device("cuda")
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    kernels = [k for k in b.kernels() if k.get("kv_append")]
    if not kernels:
        sys.exit("no kv_append kernels in %s" % a.bundle)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    passed = failed = 0
    for index in range(a.cases):
        kernel = kernels[index % len(kernels)]
        case = random_case(rng, kernel, index)
        try:
            ok, results = run_case(case, b, gen, dev, index)
        except fa.FaError as e:
            ok, results = False, [{"what": "FaError: %s" % e, "ok": False}]
        passed += ok
        failed += not ok
        if not ok:
            bad = [r for r in results if not r["ok"]]
            print("FAIL %s h%d/%d page%d counts %s new %d sq %d rotary %s%s%s: %s" % (
                case["tag"], case["h"], case["hkv"], case["page"], case["counts"], case["new"],
                case["sq"], case["rotary"], " interleaved" if case["interleaved"] else "",
                " contiguous" if case["contiguous"] else "", bad[:3]))
    ok = expect_rejected(b, dev)
    print("kvappend: %d passed, %d failed%s" % (passed, failed,
                                                "" if ok else ", rejections FAILED"))
    sys.exit(0 if failed == 0 and ok else 1)


if __name__ == "__main__":
    main()
