#!/usr/bin/env python3
"""mask_mods written in Python (fa.mods.trace_mask) on the GPU, JIT-compiled:
fa.attention(q, k, v, mask_mod=fn[, score_mod=fn]) forward and backward
against float64 under the flash-attn rule (test_attention.py's reference and
judge), with no bundle loaded at all.

MLIR is not installed on the GPU machine, so the kernels are compiled here
into fa's disk cache exactly as a miss on an sm_90 device compiles them (the
JIT's configs and cache layout), and the cache is carried:
    python3 test/gpu/test_maskmod_python.py --prepare --fa-aot build/bin/fa-aot \\
        --cache out/jit-maskmod                  (any Python; PyTorch's CPU build will do)
On the device FA_AOT is a stand-in that answers --version as the recorded
compiler and fails any compile, so every kernel must come from the cache:
    python3 test/gpu/test_maskmod_python.py --cache out/jit-maskmod --lib <libfa_runtime.so>
Each case draws new tensors (document ids of 1-8 documents of random lengths,
prefix lengths in [0, Nk]) for random shapes (B 1-3, GQA/MQA, ragged Nq != Nk,
Nq = 1), builds the mask_mod over them as a user would (a new closure: the
same traced name, so the same kernels), and evaluates the same function on
index tensors for the reference. Rows whose keys are all hidden must get
O = 0 and LSE = -inf. Then fa.block_mask(fn) of a Python document mask and
the block-sparse forward_into / backward_into with it.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

WINDOW = 256


def document(ids):
    """Document masking of packed sequences: ids [B, max(Nq, Nk)] int32."""
    return lambda b, h, q, kv: ids[b, q] == ids[b, kv]


def prefix_lm(prefix):
    """The first prefix[b] keys seen by every query, the rest causally."""
    return lambda b, h, q, kv: (kv < prefix[b]) | (kv <= q)


def sliding(_=None):
    """A causal sliding window of WINDOW keys, from the indices alone."""
    return lambda b, h, q, kv: (kv <= q) & (q - kv < WINDOW)


def doc_blocks(ids):
    """Documents, block-causal in 64-token blocks (// on the indices)."""
    return lambda b, h, q, kv: (ids[b, q] == ids[b, kv]) & (kv // 64 <= q // 64)


def softcap(s, b, h, q, kv):
    from fa import mods
    return 30 * mods.tanh(s / 30)


MASK_KINDS = {"document": document, "prefix_lm": prefix_lm, "sliding": sliding,
              "doc_blocks": doc_blocks}

# (mask_mod kind, dtype, head dim, enum mask, score_mod): each compiled
# forward and backward, as fa.attention asks on sm_90 (wgmma where fa has it).
CONFIGS = [("document", "bf16", 128, "causal", None),
           ("document", "bf16", 64, "none", None),
           ("prefix_lm", "f16", 128, "none", None),
           ("sliding", "bf16", 128, "none", None),
           ("doc_blocks", "bf16", 64, "causal_bottom_right", None),
           ("document", "bf16", 64, "causal", softcap),
           ("prefix_lm", "bf16", 96, "none", None),
           ("document", "bf16", 128, "none", None)]
# The block-sparse forward (fa.block_mask) of a Python document mask; its
# backward is the last config's.
BLOCK_SPARSE = ("document", "bf16", 128)


def mask_tensor(kind, b, nq, nk, rng, device):
    """The tensor `kind` captures, random for these sizes (None: none)."""
    import torch
    if kind in ("document", "doc_blocks"):
        n = max(nq, nk)
        ids = torch.zeros(b, n, dtype=torch.int32)
        for row in range(b):
            for _ in range(rng.randint(0, 7)):
                ids[row, rng.randint(0, n):] += 1
        return ids.to(device)
    if kind == "prefix_lm":
        return torch.tensor([rng.randint(0, nk) for _ in range(b)], dtype=torch.int32,
                            device=device)
    return None


def traced_names(kind, score):
    """(score_mod name, mask_mod name): the names depend on the tensors'
    dtypes and ranks only, so placeholder tensors name them."""
    import random as _random
    from fa import mods
    tensor = mask_tensor(kind, 1, 4, 4, _random.Random(0), "cpu")
    return (mods.trace(score).name if score else None,
            mods.trace_mask(MASK_KINDS[kind](tensor)).name)


def prepare(args):
    os.environ["FA_CACHE_DIR"] = os.path.abspath(args.cache)
    os.environ["FA_AOT"] = os.path.abspath(args.fa_aot)
    from fa import jit, mods
    for kind, dtype, d, mask, score in CONFIGS:
        score_name, mask_name = traced_names(kind, score)
        library = mods.library_for(score_name, mask_name)
        for direction in (0, 1):
            # As Bundle._compile asks on a miss on sm_90 (mma "any").
            config = jit.config_text(direction, dtype, d, d, mask, (-1, -1), 90,
                                     score_mod=score_name, mask_mod=mask_name)
            print("cached %s (%s) in %s" % (config, kind, jit.compile_bundle(config, library)))
    kind, dtype, d = BLOCK_SPARSE
    _, mask_name = traced_names(kind, None)
    # As Bundle.find_block_sparse compiles on a miss.
    config = jit.config_text(0, dtype, d, d, "none", (-1, -1), 90, "wgmma",
                             mask_mod=mask_name) + ":blocksparse"
    print("cached %s (%s) in %s" % (config, kind,
                                    jit.compile_bundle(config, mods.library_for(mask_name))))
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


def random_shape(rng):
    hkv = rng.choice([1, 2, 4])
    h = hkv * rng.choice([1, 2, 4])
    nq = rng.choice([1, 63, 64, 65, 129, rng.randint(2, 700), 1024])
    nk = nq if rng.random() < 0.6 else rng.randint(1, 800)
    return rng.randint(1, 3), h, hkv, nq, nk


def run_case(config, shape, rng, gen, dev):
    import torch
    import fa
    import score_mods
    from test_attention import (DTYPES, allowed_mask, delta_terms, judge, lse_slack,
                                reference)
    kind, dtype, d, mask, score = config
    b, h, hkv, nq, nk = shape
    dt = DTYPES[dtype]
    q, k, v = (torch.randn(b, n, length, d, generator=gen, device=dev).to(dt)
               for n, length in ((h, nq), (hkv, nk), (hkv, nk)))
    do = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
    scale = d ** -0.5
    fn = MASK_KINDS[kind](mask_tensor(kind, b, nq, nk, rng, dev))
    idx = lambda n, dim: torch.arange(n, device=dev).view(  # noqa: E731
        [n if i == dim else 1 for i in range(4)])
    # The same function on index tensors: the reference's mask.
    keep = torch.as_tensor(fn(idx(b, 0), idx(h, 1), idx(nq, 2), idx(nk, 3)), device=dev)
    allowed = (allowed_mask(mask, (-1, -1), nq, nk, dev) & keep).expand(b, h, nq, nk)
    score_name = None
    if score is not None:
        score_name = fa.mods.trace(score).name
        score_mods.SCORE_MODS[score_name] = score  # its reference: the function on tensors
    results = []
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference(q64, k64, v64, allowed, scale, score_name)
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    ol, _ = reference(ql, kl, vl, allowed, scale, score_name)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    kw = dict(causal=mask == "causal", causal_bottom_right=mask == "causal_bottom_right",
              mask_mod=fn, score_mod=score)
    o, lse = fa.attention(qa, ka, va, return_lse=True, **kw)
    torch.cuda.synchronize()
    judge("o", o, ol, o64, results)
    with torch.no_grad():
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale, score_name)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    empty = ~allowed.any(-1)
    if empty.any():
        ok = bool(torch.isneginf(lse[empty]).all()) and o[empty].abs().max().item() == 0
        results.append({"what": "rows without keys: O = 0, LSE = -inf", "ok": ok})
    with torch.no_grad():  # the no-grad forward: the same kernel, the same bits
        same = torch.equal(fa.attention(q, k, v, **kw), o.detach())
    results.append({"what": "no-grad forward == autograd forward", "ok": same})
    o.backward(do)
    o64.backward(do.double())
    ol.backward(do)
    torch.cuda.synchronize()
    shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o.detach(), o64, do,
                                                     allowed, scale, lse64, score_name)
    judge("dq", qa.grad, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q, slack=slack_q)
    judge("dk", ka.grad, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k, slack=slack_k)
    judge("dv", va.grad, vl.grad, v64.grad, results)
    return results, int(empty.sum()), allowed.float().mean().item()


def run_block_sparse(shape, rng, gen, dev):
    """fa.block_mask(fn) of a Python document mask, then forward_into and
    backward_into with it (the mod_args: the block mask's), against float64."""
    import torch
    import fa
    from test_attention import (DTYPES, delta_terms, judge, lse_slack, poisoned,
                                reference)
    kind, dtype, d = BLOCK_SPARSE
    b, h, hkv, nq, nk = shape
    dt = DTYPES[dtype]
    fn = MASK_KINDS[kind](mask_tensor(kind, b, nq, nk, rng, dev))
    idx = lambda n, dim: torch.arange(n, device=dev).view(  # noqa: E731
        [n if i == dim else 1 for i in range(4)])
    allowed = fn(idx(b, 0), idx(h, 1), idx(nq, 2), idx(nk, 3)).expand(b, h, nq, nk)
    bm = fa.block_mask(fn, b, h, nq, nk, kv_heads=hkv, head_dim=d, dtype=dt, device=dev)
    q, k, v = (torch.randn(b, n, length, d, generator=gen, device=dev).to(dt)
               for n, length in ((h, nq), (hkv, nk), (hkv, nk)))
    do = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
    scale = d ** -0.5
    results = []
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference(q64, k64, v64, allowed, scale)
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    ol, _ = reference(ql, kl, vl, allowed, scale)
    o = poisoned(b, h, nq, d, dtype=dt, device=dev)
    lse = poisoned(b, h, nq, dtype=torch.float32, device=dev)
    fa.forward_into(q, k, v, o, lse, block_mask=bm)
    torch.cuda.synchronize()
    judge("o", o, ol, o64, results)
    with torch.no_grad():
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    o64.backward(do.double())
    ol.backward(do)
    dq, dk, dv = (poisoned(*t.shape, dtype=dt, device=dev) for t in (q, k, v))
    fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, block_mask=bm, mma="wgmma")
    torch.cuda.synchronize()
    shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do, allowed,
                                                     scale, lse64)
    judge("dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q, slack=slack_q)
    judge("dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k, slack=slack_k)
    judge("dv", dv, vl.grad, v64.grad, results)
    return results, allowed.float().mean().item()


def cache_session(args, prefix):
    """(work folder, JIT-only bundle, device) of a run from the cache
    args.cache: FA_AOT the stand-in, FA_CACHE_DIR the cache, TF32 off for
    the references."""
    import torch
    import fa
    torch.backends.cuda.matmul.allow_tf32 = False
    work = tempfile.mkdtemp(prefix=prefix)
    os.environ["FA_AOT"] = stand_in(args.cache, work)
    os.environ["FA_CACHE_DIR"] = os.path.abspath(args.cache)
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    return work, fa.load(None, args.lib), dev


def run(args):
    import torch
    work, bundle, dev = cache_session(args, "fa-maskmod-python-")
    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    failures = hidden_cases = 0
    t0 = time.time()
    n = max(args.cases, len(CONFIGS))
    for i in range(n):
        config = CONFIGS[i % len(CONFIGS)]
        shape = random_shape(rng)
        try:
            results, hidden, density = run_case(config, shape, rng, gen, dev)
        except Exception as e:  # noqa: BLE001 -- a kernel error is a failed case
            results, hidden, density = [{"what": "exception", "ok": False,
                                         "message": str(e)}], 0, 0.0
        ok = all(r["ok"] for r in results)
        failures += not ok
        hidden_cases += hidden > 0
        kind, dtype, d, mask, score = config
        print("%s %s%s %s d%d %s B%d H%d/%d Nq%d Nk%d (%.0f%% visible, %d hidden rows): %s" % (
            "ok  " if ok else "FAIL", kind, "+softcap" if score else "", dtype, d, mask,
            *shape, 100 * density, hidden,
            ", ".join("%s %.1e" % (r["what"], r["err"]) for r in results if "err" in r)
            if ok else [r for r in results if not r["ok"]]), flush=True)
    for i in range(args.block_sparse_cases):
        shape = random_shape(rng)
        try:
            results, density = run_block_sparse(shape, rng, gen, dev)
        except Exception as e:  # noqa: BLE001 -- a kernel error is a failed case
            results, density = [{"what": "exception", "ok": False, "message": str(e)}], 0.0
        ok = all(r["ok"] for r in results)
        failures += not ok
        n += 1
        print("%s block_mask(Python document mask) B%d H%d/%d Nq%d Nk%d (%.0f%% visible): %s"
              % ("ok  " if ok else "FAIL", *shape, 100 * density,
                 ", ".join("%s %.1e" % (r["what"], r["err"]) for r in results if "err" in r)
                 if ok else [r for r in results if not r["ok"]]), flush=True)
    tags = sorted(k["tag"] for k in bundle.kernels())
    print("JIT kernels loaded from the cache (%d): %s" % (len(tags), ", ".join(tags)))
    want = 2 * len(CONFIGS) + (1 if args.block_sparse_cases else 0)
    if len(tags) != want:
        print("FAIL expected %d kernels (each config forward and backward, the block-sparse "
              "forward)" % want)
        failures += 1
    if not hidden_cases:
        print("FAIL no case hid a whole row")
        failures += 1
    subprocess.run(["rm", "-rf", work])
    print("Python mask_mods (JIT): %d/%d cases passed in %.1f s" % (n - min(failures, n), n,
                                                                  time.time() - t0))
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d)" % failures))
    return 1 if failures else 0


def cache_test_parser(doc, cases, seed):
    """The command line of a GPU test whose kernels come from a JIT disk
    cache made here: --cache, --prepare (with --fa-aot), --lib, --cases,
    --seed."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--fa-aot", default="build/bin/fa-aot")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=cases)
    ap.add_argument("--seed", type=int, default=seed)
    return ap


def main():
    ap = cache_test_parser(__doc__, cases=56, seed=11)
    ap.add_argument("--block-sparse-cases", type=int, default=8)
    args = ap.parse_args()
    if args.prepare:
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
