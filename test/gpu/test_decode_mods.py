#!/usr/bin/env python3
"""Decode with score_mods and mask_mods written in Python, on the GPU, JIT:
fa.attention(q, k, v, score_mod=fn, mask_mod=fn[, sinks=t]) on decode shapes
must take the split-KV kernels (packed GQA where the query heads of a key head
share a tile, the unpacked split kernel for MHA) compiled with those mods, and
fa.attention_with_kvcache(..., score_mod=fn, mask_mod=fn, softcap=30) over
shuffled pages the paged ones; each agrees with float64 under the flash-attn
rule (test_attention.py's judge).

MLIR is not installed on the GPU machine, so the kernels are compiled here
into fa's disk cache as a miss on an sm_90 device compiles them
(jit.decode_config with the traced names), and the cache is carried:
    python3 test/gpu/test_decode_mods.py --prepare --fa-aot build/bin/fa-aot \\
        --cache out/jit-decode-mods              (any Python; PyTorch's CPU build will do)
On the device FA_AOT is test_maskmod_python.py's stand-in (it compiles
nothing), so a call that left the split path would need a kernel the cache
lacks and fail:
    python3 test/gpu/test_decode_mods.py --cache out/jit-decode-mods --lib <libfa_runtime.so>
Each case draws new tensors (slopes, key biases, per-sequence cache starts,
document ids) for the shape's batch and a random key count, builds the mods
over them as a user would, and evaluates the same functions on index tensors
for the reference. Every launch of a case is recorded: all must be split-KV
launches (paged ones for a paged cache). Rows whose keys are all hidden must
get O = 0 and LSE = -inf (with sinks: LSE = the sink).
"""
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)


def softcap(s, b, h, q, kv):
    from fa import mods
    return 30 * mods.tanh(s / 30)


def alibi(slopes):
    """ALiBi with slopes [H] (float32); the query sits at the cache's end."""
    return lambda s, b, h, q, kv: s + slopes[h] * (kv - q)


def key_bias(bias):
    """A bias per cached key [B, Nk] (float16)."""
    return lambda s, b, h, q, kv: s + bias[b, kv]


def cache_start(start):
    """Left-padded caches: sequence b's keys start at start[b] (int32 [B])."""
    return lambda b, h, q, kv: kv >= start[b]


def document(qdoc, kdoc):
    """The query of document qdoc[b, q] sees the keys of its document."""
    return lambda b, h, q, kv: qdoc[b, q] == kdoc[b, kv]


# kind -> (score_mod maker, mask_mod maker); a maker takes the case's tensors.
KINDS = {"softcap": (lambda t: softcap, None),
         "alibi": (lambda t: alibi(t["slopes"]), None),
         "key_bias": (lambda t: key_bias(t["bias"]), None),
         "cache_start": (None, lambda t: cache_start(t["start"])),
         "document+softcap": (lambda t: softcap, lambda t: document(t["qdoc"], t["kdoc"]))}

# (B, H, Hkv, Nq, most keys, dtype, d, mask, sinks, page size or 0): the
# 16-row TMA tile, a 16-row tile with a mask, the 32-row TMA tile, MHA
# (unpacked), d64, sinks; then paged caches through fa.attention_with_kvcache
# (its softcap argument for "softcap"), pages of 16, 64 and 256.
SHAPES = [(1, 32, 8, 1, 8192, "bf16", 128, "none", False, 0),
          (2, 32, 8, 4, 3000, "bf16", 128, "causal_bottom_right", False, 0),
          (1, 8, 1, 4, 16384, "bf16", 128, "none", False, 0),
          (2, 16, 16, 1, 5000, "f16", 64, "none", False, 0),
          (3, 32, 8, 1, 777, "bf16", 64, "none", False, 0),
          (2, 32, 8, 1, 4100, "bf16", 128, "none", True, 0),
          (2, 32, 8, 1, 6000, "bf16", 128, "none", False, 64),
          (3, 8, 1, 4, 2000, "bf16", 128, "causal_bottom_right", False, 16),
          (1, 32, 8, 1, 20000, "f16", 64, "none", True, 256)]


def tensors(b, h, nq, nk, rng, device):
    """Random tensors of every kind for a problem of these sizes."""
    import torch
    gen = torch.Generator().manual_seed(rng.randint(0, 1 << 30))
    slopes = torch.exp2(-8.0 * torch.arange(1, h + 1) / h) * (0.5 + torch.rand(h, generator=gen))
    bias = (3 * torch.randn(b, nk, generator=gen)).to(torch.float16)
    # Some sequences empty (start = nk: only a sink, if any, is seen).
    start = torch.tensor([rng.choice([0, rng.randint(0, nk), nk]) for _ in range(b)],
                         dtype=torch.int32)
    kdoc = torch.zeros(b, nk, dtype=torch.int32)
    for row in range(b):
        for _ in range(rng.randint(0, 6)):
            kdoc[row, rng.randint(0, nk):] += 1
    # The queries continue the cache's last document, or start a new one.
    qdoc = kdoc[:, -1:].expand(b, nq) + (torch.rand(b, nq, generator=gen) < 0.2).to(torch.int32)
    return {name: t.to(device) for name, t in (("slopes", slopes), ("bias", bias),
                                                ("start", start), ("qdoc", qdoc.contiguous()),
                                                ("kdoc", kdoc))}


def mods_of(kind, t):
    score, mask = KINDS[kind]
    return (score(t) if score else None), (mask(t) if mask else None)


def traced_names(kind, shape):
    """(score_mod name, mask_mod name) of `kind`: the names depend on the
    tensors' dtypes and ranks only, so placeholder tensors name them."""
    from fa import mods
    b, h, _, nq, nk = shape[:5]
    score, mask = mods_of(kind, tensors(b, h, nq, nk, random.Random(0), "cpu"))
    return (mods.trace(score).name if score else None,
            mods.trace_mask(mask).name if mask else None)


def config_of(kind, shape):
    """The decode config a miss on sm_90 compiles for this kind and shape
    (as Bundle._compile_decode asks it), and its mods' library."""
    from fa import jit, mods
    b, h, hkv, nq, nk, dtype, d, mask, sinks, page = shape
    score_name, mask_name = traced_names(kind, shape)
    group = h // hkv
    packed = 1 < group and nq < 64
    config = jit.decode_config(dtype, d, d, mask, (-1, -1), 90, packed, (group, nq),
                               score_name, mask_name) + (":paged" if page else "") + (
                                   ":sinks" if sinks else "")
    return config, mods.library_for(score_name, mask_name)


def prepare(args):
    os.environ["FA_CACHE_DIR"] = os.path.abspath(args.cache)
    os.environ["FA_AOT"] = os.path.abspath(args.fa_aot)
    from fa import jit
    for shape in SHAPES:
        for kind in KINDS:
            config, library = config_of(kind, shape)
            print("cached %s (%s) in %s" % (config, kind, jit.compile_bundle(config, library)))
    with open(os.path.join(args.cache, "fa-aot-version.txt"), "w") as f:
        f.write(jit.compiler_version(args.fa_aot) + "\n")


def paged_call(q, k, v, page, kw, rng):
    """fa.attention_with_kvcache on k, v [B, Hkv, Nk, D] spread over a pool
    of shuffled pages of `page` keys (one spare page a sequence), with
    fa.attention's keyword arguments `kw` (softcap=30 for softcap); O and LSE
    as fa.attention returns them."""
    import torch
    import fa
    b, hkv, nk, d = k.shape
    per_seq = (nk + page - 1) // page + 1
    order = list(range(b * per_seq))
    rng.shuffle(order)
    table = torch.tensor(order, dtype=torch.int32, device=q.device).view(b, per_seq)

    def pool(t):
        rows = torch.zeros(b, per_seq * page, hkv, d, dtype=t.dtype, device=t.device)
        rows[:, :nk] = t.transpose(1, 2)
        out = torch.empty(b * per_seq, page, hkv, d, dtype=t.dtype, device=t.device)
        out[table.view(-1).long()] = rows.view(b * per_seq, page, hkv, d)
        return out
    kw = dict(kw)
    causal = kw.pop("causal_bottom_right")
    if kw["score_mod"] is softcap:
        kw["score_mod"], kw["softcap"] = None, 30.0
    seqlens = torch.full((b,), nk, dtype=torch.int32, device=q.device)
    o, lse = fa.attention_with_kvcache(q.transpose(1, 2), pool(k), pool(v),
                                       cache_seqlens=seqlens, page_table=table, causal=causal,
                                       return_lse=True, **kw)
    return o.transpose(1, 2), lse


def run_case(kind, shape, rng, gen, dev, launches):
    import torch
    import fa
    import score_mods
    from test_attention import DTYPES, allowed_mask, judge, lse_slack
    from test_sinks import reference
    b, h, hkv, nq, most, dtype, d, mask, with_sinks, page = shape
    nk = rng.randint(most // 2, most)
    dt = DTYPES[dtype]
    q, k, v = (torch.randn(b, n, length, d, generator=gen, device=dev).to(dt)
               for n, length in ((h, nq), (hkv, nk), (hkv, nk)))
    scale = d ** -0.5
    score, mask_fn = mods_of(kind, tensors(b, h, nq, nk, rng, dev))
    idx = lambda n, dim: torch.arange(n, device=dev).view(  # noqa: E731
        [n if i == dim else 1 for i in range(4)])
    allowed = allowed_mask(mask, (-1, -1), nq, nk, dev).expand(b, h, nq, nk)
    if mask_fn is not None:  # the same function on index tensors
        allowed = allowed & mask_fn(idx(b, 0), idx(h, 1), idx(nq, 2), idx(nk, 3))
    score_name = None
    if score is not None:
        score_name = fa.mods.trace(score).name
        score_mods.SCORE_MODS[score_name] = score  # its reference: the function on tensors
    sinks = (2 * torch.randn(h, generator=gen, device=dev) if with_sinks
             else torch.full((h,), float("-inf"), device=dev))
    kw = dict(causal_bottom_right=mask == "causal_bottom_right", score_mod=score,
              mask_mod=mask_fn)
    if with_sinks:
        kw["sinks"] = sinks
    del launches[:]
    with torch.no_grad():
        o, lse = (paged_call(q, k, v, page, kw, rng) if page else
                  fa.attention(q, k, v, return_lse=True, **kw))
    torch.cuda.synchronize()
    want = "paged" if page else "splitkv"
    results = [{"what": "%s launches (%s)" % (want, ", ".join(launches)),
                "ok": bool(launches) and all(want in n for n in launches)}]
    o64, lse64 = reference(q.double(), k.double(), v.double(), sinks.double(), allowed, scale,
                           score_name)
    ol, _ = reference(q, k, v, sinks, allowed, scale, score_name)
    judge("o", o, ol, o64, results)
    _, lse32 = reference(q.float(), k.float(), v.float(), sinks, allowed, scale, score_name)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    empty = ~allowed.any(-1)
    if empty.any():
        want = sinks.view(1, h, 1).expand(b, h, nq)[empty]
        # With sinks the row's LSE is its sink (to float32 rounding).
        ok = o[empty].abs().max().item() == 0 and (
            bool(((lse[empty] - want).abs() <= 1e-5 * (1 + want.abs())).all()) if with_sinks
            else bool(torch.isneginf(lse[empty]).all()))
        results.append({"what": "rows without keys", "ok": ok})
    return results, nk, int(empty.sum())


def run(args):
    import torch
    import fa
    from test_maskmod_python import cache_session
    work, bundle, dev = cache_session(args, "fa-decode-mods-")
    launches, launch = [], fa._launch

    def recording(lib, fn, *rest):
        launches.append(fn.__name__)
        return launch(lib, fn, *rest)

    fa._launch = recording
    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    combos = [(kind, shape) for shape in SHAPES for kind in KINDS]
    n = max(args.cases, len(combos))
    failures = hidden_cases = 0
    t0 = time.time()
    for i in range(n):
        kind, shape = combos[i % len(combos)]
        try:
            results, nk, hidden = run_case(kind, shape, rng, gen, dev, launches)
        except Exception as e:  # noqa: BLE001 -- a kernel error is a failed case
            results, nk, hidden = [{"what": "exception", "ok": False, "message": str(e)}], 0, 0
        ok = all(r["ok"] for r in results)
        failures += not ok
        hidden_cases += hidden > 0
        b, h, hkv, nq, _, dtype, d, mask, sinks, page = shape
        print("%s %s %s d%d %s B%d H%d/%d Nq%d Nk%d%s%s (%d hidden rows): %s" % (
            "ok  " if ok else "FAIL", kind, dtype, d, mask, b, h, hkv, nq, nk,
            " sinks" if sinks else "", " pages of %d" % page if page else "", hidden,
            ", ".join("%s %.1e" % (r["what"], r["err"]) for r in results if "err" in r)
            if ok else [r for r in results if not r["ok"]]), flush=True)
    tags = sorted(k["tag"] for k in bundle.kernels())
    print("JIT kernels loaded from the cache (%d): %s" % (len(tags), ", ".join(tags)))
    if len(tags) != len(combos):
        print("FAIL expected %d kernels (one per kind and shape)" % len(combos))
        failures += 1
    if not hidden_cases:
        print("FAIL no case hid a whole row")
        failures += 1
    subprocess.run(["rm", "-rf", work])
    print("decode with Python mods (JIT, split-KV): %d/%d cases passed in %.1f s"
          % (n - min(failures, n), n, time.time() - t0))
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d)" % failures))
    return 1 if failures else 0


def main():
    from test_maskmod_python import cache_test_parser
    args = cache_test_parser(__doc__, cases=120, seed=5).parse_args()
    if args.prepare:
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
