#!/usr/bin/env python3
"""mask_mods written in Python (fa.mods.trace_mask), without a GPU: Debian's
CPU PyTorch.

- Tracing: the IR of causal, sliding-window, document (doc ids [B, N] int32
  captured) and prefix-LM (prefix lengths [B]) mask_mods, checked line by
  line; names follow the program and the tensors' dtypes and ranks, not
  their values.
- CPU numerics: each traced mask_mod (and one beside a traced score_mod
  reading its own tensor) becomes the mask_mod region of attn.attention and
  attn.attention_backward in one function that fa-run compiles and runs in
  f32 on the CPU; O, LSE, dQ, dK, dV are compared with float64 attention in
  PyTorch whose mask is the same Python function evaluated on index tensors
  (rows with no visible key included: O = 0, LSE = -inf, zero gradients).
- JIT: Bundle.find(mask_mod=fn) on a miss compiles forward and backward with
  fa-aot (config maskmod=<traced name>) into the disk cache, whose manifest
  lists the mask_mod and its mod_args; a new function over new tensors of
  the same dtype reuses them without compiling; a traced score_mod and
  mask_mod together, a traced mod beside a named one of a user library, and
  the block-sparse forward of a traced mask_mod (fa.block_mask's kernel).
- A bundle built by fa-aot from fa.mods.write_library serves the traced
  mask_mod without JIT (and its kernels do not spill); a miss without JIT
  names the fa-aot command.
- Errors: what cannot be traced, and fa.attention's checks before a launch.

    test_mask_mods.py --fa-aot build/bin/fa-aot --fa-run build/bin/fa-run \\
        --lib build/lib/libfa_runtime.so --bundle build/test/Runtime/fixture-bundle \\
        --library test/gpu/mask_mods.mlir
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import fa  # noqa: E402
from support import expect_error  # noqa: E402
from fa import mods  # noqa: E402
from fa._runtime import BWD, FWD  # noqa: E402

B, H, HKV, NQ, NK, D = 2, 4, 2, 13, 17, 8
SCALE = 0.35
WINDOW = 4

# Captured tensors of the masks below: doc ids [B, max(NQ, NK)] (three
# documents in batch 0, one in batch 1) and prefix lengths [B].
DOC = torch.tensor([[0] * 5 + [1] * 7 + [2] * 5, [0] * 17], dtype=torch.int32)
PREFIX = torch.tensor([6, 0], dtype=torch.int32)
GATE = torch.tensor([0.5, 1.0, 2.0, 4.0])  # float32 [H]
BIAS = torch.linspace(-1.0, 1.0, B * NK).view(B, NK)  # float32 [B, NK]


def causal(b, h, q, kv):
    return kv <= q


def sliding(b, h, q, kv):
    return (kv <= q) & (q - kv < WINDOW)


def document(b, h, q, kv):
    return DOC[b, q] == DOC[b, kv]


def prefix_lm(b, h, q, kv):
    return (kv < PREFIX[b]) | (kv <= q)


def strided_doc_strict(b, h, q, kv):
    """// and %, where of conditions, a float tensor per head, and rows that
    see no key (the first of each document: kv < q strictly)."""
    same = (DOC[b, q] == DOC[b, kv]) & (kv < q)
    dilated = mods.where(h % 2 == 0, kv % 2 == q % 2, ~(kv // 3 == 1))
    return same & dilated | (GATE[h] * (q - kv) > 10.0)


def global_ids(b, h, q, kv):
    """Reads the module's IDS, which the test rebinds."""
    return IDS[b, q] == IDS[b, kv]


IDS = DOC


def key_bias(s, b, h, q, kv):
    return s + BIAS[b, kv]


MASKS = [causal, sliding, document, prefix_lm, strided_doc_strict]


def body(mod):
    """The lines between a traced function's signature and its return."""
    return [line.strip() for line in mod.mlir.splitlines()[1:-2]]


def check_tracing():
    c = mods.trace_mask(causal)
    assert re.fullmatch(r"py_mask_[0-9a-f]{16}", c.name), c.name
    assert c.mlir == ("func.func @%s(%%b: index, %%h: index, %%q: index, %%kv: index) -> i1 {\n"
                      "  %%v0 = arith.cmpi sle, %%kv, %%q : index\n"
                      "  return %%v0 : i1\n}\n" % c.name), c.mlir
    assert c.tensors == ()
    s = mods.trace_mask(sliding)
    assert body(s) == ["%v0 = arith.cmpi sle, %kv, %q : index",
                       "%v1 = arith.subi %q, %kv : index",
                       "%v2 = arith.constant 4 : index",
                       "%v3 = arith.cmpi slt, %v1, %v2 : index",
                       "%v4 = arith.andi %v0, %v3 : i1"], s.mlir
    d = mods.trace_mask(document)
    assert d.tensors == (DOC,) and d.mlir.startswith(
        "func.func @%s(%%b: index, %%h: index, %%q: index, %%kv: index, "
        "%%m0: tensor<?x?xi32>) -> i1 {" % d.name), d.mlir
    assert body(d) == ["%v0 = tensor.extract %m0[%b, %q] : tensor<?x?xi32>",
                       "%v1 = arith.index_cast %v0 : i32 to index",
                       "%v2 = tensor.extract %m0[%b, %kv] : tensor<?x?xi32>",
                       "%v3 = arith.index_cast %v2 : i32 to index",
                       "%v4 = arith.cmpi eq, %v1, %v3 : index"], d.mlir
    p = mods.trace_mask(prefix_lm)
    assert p.tensors == (PREFIX,) and "%m0: tensor<?xi32>" in p.mlir, p.mlir
    assert body(p) == ["%v0 = tensor.extract %m0[%b] : tensor<?xi32>",
                       "%v1 = arith.index_cast %v0 : i32 to index",
                       "%v2 = arith.cmpi slt, %kv, %v1 : index",
                       "%v3 = arith.cmpi sle, %kv, %q : index",
                       "%v4 = arith.ori %v2, %v3 : i1"], p.mlir
    x = mods.trace_mask(strided_doc_strict)
    assert x.tensors == (DOC, GATE), x.tensors
    for op in ("arith.remsi", "arith.floordivsi", "arith.select %", ": i1",
               "tensor.extract %m1[%h] : tensor<?xf32>", "arith.cmpf ogt",
               "arith.xori"):
        assert op in x.mlir, (op, x.mlir)
    # The name follows the program and the tensors' dtypes and ranks: other
    # ids of the same dtype share it (and the kernels), int64 ids do not.
    other = torch.zeros(3, 40, dtype=torch.int32)
    again = mods.trace_mask(lambda b, h, q, kv: other[b, q] == other[b, kv])
    assert again.name == d.name and again.tensors == (other,), again
    wide = other.long()
    assert mods.trace_mask(lambda b, h, q, kv: wide[b, q] == wide[b, kv]).name != d.name
    assert mods.trace_mask(causal) is c  # the same function is traced once
    # A global the function reads rebound to new ids: traced anew, reading them.
    global IDS
    first = mods.trace_mask(global_ids)
    IDS = other
    again_ids = mods.trace_mask(global_ids)
    assert first.tensors[0] is DOC and again_ids.tensors[0] is other, "stale captured tensor"
    # A constant mask and the naming of a mask_mod.
    assert "arith.constant true" in mods.trace_mask(lambda b, h, q, kv: True).mlir
    assert mods.trace_mask(causal, name="my_causal").name == "my_causal"
    print("ok tracing: causal %s, sliding, document %s, prefix-LM %s, strided" %
          (c.name, d.name, p.name))


def region(mod, kind, offset, all_args):
    """`mod`'s function as an attn region of `kind` whose block takes every
    mod_arg of the op (`all_args`: (name, type)); its own tensors start at
    `offset` among them."""
    lines = mod.mlir.splitlines()

    def rename(text):
        """The op's names of the mod_args and of the values (one set per
        region), the reads typed as the op's static tensors."""
        text = re.sub(r"%m(\d+)", lambda m: "%%m%d" % (int(m.group(1)) + offset), text)
        read = re.search(r"tensor\.extract %m(\d+)\[", text)
        if read:
            text = text[:text.rindex(": ") + 2] + all_args[int(read.group(1))][1]
        return text.replace("%v", "%" + kind[0] + "v")
    lead = {"score_mod": "%score: f32, ", "mask_mod": ""}[kind]
    block = lead + "%b: index, %h: index, %q: index, %kv: index" + \
        "".join(", %s: %s" % a for a in all_args)
    result = lines[-2].split()[1]
    return ("%s {\n  ^bb0(%s):\n%s\n    attn.yield %s : %s\n  }"
            % (kind, block, "\n".join("  " + rename(l) for l in lines[1:-2]),
               rename(result), "f32" if kind == "score_mod" else "i1"))


def entry_text(name, mask, score=None):
    """A function running attn.attention then attn.attention_backward with
    the traced mods, returning O, LSE, dQ, dK, dV."""
    t = lambda *s: "tensor<%sxf32>" % "x".join(map(str, s))
    tq, tk, to, tl = t(B, H, NQ, D), t(B, HKV, NK, D), t(B, H, NQ, D), t(B, H, NQ)
    tensors = (score.tensors if score else ()) + mask.tensors
    element = lambda x: mods._tensor_type(x)[1]
    args = [("%%m%d" % i, "tensor<%sx%s>" % ("x".join(map(str, x.shape)), element(x)))
            for i, x in enumerate(tensors)]
    # The function's tensors (%aN) feed the op, whose regions name them %mN.
    mod_args = (" mod_args(%s : %s)" % (", ".join(a.replace("%m", "%a") for a, _ in args),
                                        ", ".join(ty for _, ty in args))) if args else ""
    regions = ((region(score, "score_mod", 0, args) + " ") if score else "") + \
        region(mask, "mask_mod", len(score.tensors) if score else 0, args)
    attrs = "{scale = %r : f32}" % SCALE
    return ("func.func @%s(%%Q: %s, %%K: %s, %%V: %s, %%dO: %s%s)\n"
            "    -> (%s, %s, %s, %s, %s) {\n"
            "  %%o, %%lse = attn.attention %%Q, %%K, %%V%s %s %s : %s, %s, %s -> %s, %s\n"
            "  %%dq, %%dk, %%dv = attn.attention_backward %%Q, %%K, %%V, %%o, %%dO, %%lse%s %s %s"
            " : %s, %s, %s, %s, %s, %s -> %s, %s, %s\n"
            "  return %%o, %%lse, %%dq, %%dk, %%dv : %s, %s, %s, %s, %s\n}\n"
            % (name, tq, tk, tk, to,
               "".join(", %s: %s" % (a.replace("%m", "%a"), ty) for a, ty in args),
               to, tl, tq, tk, tk,
               mod_args, attrs, regions, tq, tk, tk, to, tl,
               mod_args, attrs, regions, tq, tk, tk, to, to, tl, tq, tk, tk,
               to, tl, tq, tk, tk))


def allowed(mask):
    """[B, H, NQ, NK] bool: the mask_mod evaluated on index tensors (the
    same Python function as the kernels', on torch values)."""
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    q = torch.arange(NQ).view(1, 1, NQ, 1)
    kv = torch.arange(NK).view(1, 1, 1, NK)
    return torch.as_tensor(mask(b, h, q, kv)).expand(B, H, NQ, NK)


def reference(q, k, v, keep, score=None):
    """float64 attention (differentiable): O = 0, LSE = -inf on rows that see
    no key."""
    g = H // HKV
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * SCALE
    if score is not None:
        s = s + BIAS.double().view(B, 1, 1, NK)
    s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p / torch.where(l > 0, l, torch.ones_like(l)), v)
    lse = torch.where(l > 0, torch.log(l) + m, torch.full_like(l, float("-inf")))
    return o, lse.squeeze(-1)


def max_err(got, want):
    if (torch.isinf(got) != torch.isinf(want)).any() or torch.isnan(got).any():
        return float("inf")
    finite = torch.isfinite(want)
    return (got[finite] - want[finite]).abs().max().item()


def check_cpu(args, work):
    gen = torch.Generator().manual_seed(5)
    inputs = {"q": torch.randn(B, H, NQ, D, generator=gen, dtype=torch.float64),
              "k": torch.randn(B, HKV, NK, D, generator=gen, dtype=torch.float64),
              "v": torch.randn(B, HKV, NK, D, generator=gen, dtype=torch.float64),
              "do": torch.randn(B, H, NQ, D, generator=gen, dtype=torch.float64)}
    # What the f32 kernels see.
    inputs = {n: x.float().double() for n, x in inputs.items()}
    for n, x in inputs.items():
        np.save(os.path.join(work, n + ".npy"), x.numpy())
    cases = [(m, None) for m in MASKS] + [(document, key_bias)]
    with open(os.path.join(work, "attention.mlir"), "w") as f:
        for i, (mask, score) in enumerate(cases):
            f.write(entry_text("case%d" % i, mods.trace_mask(mask),
                               mods.trace(score) if score else None))
    hidden_rows = 0
    for i, (mask, score) in enumerate(cases):
        tensors = (mods.trace(score).tensors if score else ()) + mods.trace_mask(mask).tensors
        extra = []
        for j, x in enumerate(tensors):
            path = os.path.join(work, "case%d_m%d.npy" % (i, j))
            np.save(path, x.double().numpy())  # fa-run converts to the argument's type
            extra += ["--input", path]
        outs = [os.path.join(work, "case%d_%s.npy" % (i, n)) for n in ("o", "lse", "dq", "dk",
                                                                         "dv")]
        cmd = [args.fa_run, os.path.join(work, "attention.mlir"), "--entry", "case%d" % i] + \
            sum((["--input", os.path.join(work, n + ".npy")] for n in ("q", "k", "v", "do")),
                []) + extra + sum((["--output", o] for o in outs), [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        assert run.returncode == 0, "fa-run failed on %s: %s" % (mask.__name__, run.stderr)
        got = [torch.from_numpy(np.load(o)).double() for o in outs]
        keep = allowed(mask)
        q, k, v = (inputs[n].clone().requires_grad_() for n in ("q", "k", "v"))
        o, lse = reference(q, k, v, keep, score)
        o.backward(inputs["do"])
        want = [o.detach(), lse.detach(), q.grad, k.grad, v.grad]
        errs = [max_err(g, w) for g, w in zip(got, want)]
        hidden = int((~keep.any(-1)).sum())
        hidden_rows += hidden
        assert 0 < keep.sum() < keep.numel() or mask is causal, mask.__name__
        ok = max(errs) < 2e-4
        print("%s CPU %s%s: visible %.0f%%, %d hidden rows; max err o %.1e lse %.1e dq %.1e "
              "dk %.1e dv %.1e" % ("ok" if ok else "FAIL", mask.__name__,
                                   " + score_mod " + score.__name__ if score else "",
                                   100.0 * keep.float().mean(), hidden, *errs))
        assert ok, (mask.__name__, errs)
    assert hidden_rows > 0, "no case hid a whole row"


def logging_aot(work, real):
    """An fa-aot that logs each compile (not --version) to work/compiles.log."""
    log = os.path.join(work, "compiles.log")
    path = os.path.join(work, "fa-aot-logged")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n[ \"$1\" = --version ] || echo \"$*\" >> %s\nexec %s \"$@\"\n"
                % (log, real))
    os.chmod(path, 0o755)
    return path, log


def compiles(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return sum(1 for _ in f)


def check_jit(args, work):
    os.environ["FA_AOT"], log = logging_aot(work, args.fa_aot)
    b = fa.Bundle(args.bundle, args.lib)
    doc = mods.trace_mask(document)
    for direction in (FWD, BWD):
        info = b._info(b.find(direction, "bf16", 64, 64, "causal", (-1, -1), 90,
                              mask_mod=document))
        assert info["mask_mod"] == doc.name and info["score_mod"] is None, info
        assert info["mod_args"] == [{"dtype": "i32", "dims": ["any", "any"]}], info
        assert info["tag"].endswith("_maskmod_" + doc.name), info["tag"]
    assert compiles(log) == 2, compiles(log)
    with open(log) as f:
        assert all(":maskmod=%s" % doc.name in line and "--score-mods" in line for line in f)
    # A new function over new ids of the same dtype in a new Bundle: the
    # same kernels, from the disk cache.
    ids = torch.ones(4, 64, dtype=torch.int32)
    again = fa.Bundle(args.bundle, args.lib)
    kernel = again.find(FWD, "bf16", 64, 64, "causal", (-1, -1), 90,
                        mask_mod=lambda b_, h, q, kv: ids[b_, q] == ids[b_, kv])
    assert again._info(kernel)["mask_mod"] == doc.name and compiles(log) == 2, compiles(log)
    print("ok JIT: a Python document mask compiled forward and backward (%s), then served "
          "from the disk cache to a new function over new ids" % doc.name)

    # A traced score_mod and mask_mod on one kernel: the score_mod's tensors
    # come first among the mod_args.
    score = mods.trace(key_bias)
    info = b._info(b.find(BWD, "bf16", 64, 64, "none", (-1, -1), 90, score_mod=key_bias,
                          mask_mod=prefix_lm))
    assert info["score_mod"] == score.name and info["mask_mod"] == \
        mods.trace_mask(prefix_lm).name, info
    assert [m["dtype"] for m in info["mod_args"]] == ["f32", "i32"], info["mod_args"]
    # A traced mod beside a named one of the user's library (both compiled
    # from one library: the user's with the traced functions added).
    named = fa.Bundle(args.bundle, args.lib, score_mod_file=args.library)
    info = named._info(named.find(FWD, "bf16", 64, 64, "causal", (-1, -1), 90,
                                  score_mod="softcap30", mask_mod=sliding))
    assert info["score_mod"] == "softcap30" and info["mask_mod"] == \
        mods.trace_mask(sliding).name and info["mod_args"] == [], info
    info = named._info(named.find(FWD, "bf16", 64, 64, "none", (-1, -1), 90,
                                  score_mod=key_bias, mask_mod="document"))
    assert info["mask_mod"] == "document" and [m["dtype"] for m in info["mod_args"]] == \
        ["f32", "i32"], info
    # A user library in a module that already holds the traced function
    # (as write_library writes it): the traced one is not added twice.
    wrapped = os.path.join(work, "wrapped.mlir")
    with open(wrapped, "w") as f:
        f.write("// softcap and a traced mask_mod\nmodule {\n"
                "func.func @cap(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {\n"
                "  %t = math.tanh %s : f32\n  return %t : f32\n}\n"
                + mods.trace_mask(sliding).mlir + "}\n")
    user = fa.Bundle(args.bundle, args.lib, score_mod_file=wrapped)
    info = user._info(user.find(FWD, "bf16", 64, 64, "none", (-1, -1), 90, score_mod="cap",
                                mask_mod=sliding))
    assert (info["score_mod"], info["mask_mod"]) == ("cap", mods.trace_mask(sliding).name), info
    expect_error(lambda: b.find(FWD, "bf16", 64, 64, "none", (-1, -1), 90, mask_mod="document",
                                score_mod=key_bias),
                 "needs the score_mod library", "maskmod=document")
    print("ok JIT: score_mod=fn with mask_mod=fn (mod_args f32 then i32), and traced mods "
          "beside a library's named ones")
    # The block-sparse forward of a Python mask_mod (what fa.block_mask asks).
    before = compiles(log)
    kernel = b.find_block_sparse("bf16", 128, 128, 90, 1024, document)
    info = b._info(kernel)
    assert info["block_sparse"] and info["mask_mod"] == doc.name and info["mma"] == "wgmma", info
    assert compiles(log) == before + 1, compiles(log)
    assert b.find_block_sparse("bf16", 128, 128, 90, 1024, document).value == kernel.value
    print("ok JIT: the block-sparse forward of a Python document mask (%s)" % info["tag"])


def check_bundle(args, work):
    """fa-aot builds a bundle from the traced functions; it serves them with
    no JIT, and its kernels do not spill."""
    library = os.path.join(work, "pymasks.mlir")
    names = mods.write_library(library, mods.trace_mask(document), mods.trace_mask(prefix_lm),
                               mods.trace(key_bias))
    doc, prefix, bias = names
    out = os.path.join(work, "bundle")
    configs = ["fwd:bf16:d64:causal:mma_sync:maskmod=%s" % doc,
               "bwd:bf16:d64:causal:mma_sync:maskmod=%s" % doc,
               "fwd:f16:d128:none:wgmma:maskmod=%s" % prefix,
               "fwd:bf16:d64:none:mma_sync:mod=%s:maskmod=%s" % (bias, doc)]
    run = subprocess.run([args.fa_aot, "--score-mods", library, "-o", out] +
                         sum((["--config", c] for c in configs), []),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    spills = re.findall(r"(\S+): registers \d+, spill bytes (\d+)", run.stdout)
    assert len(spills) == len(configs) and all(n == "0" for _, n in spills), run.stdout
    b = fa.Bundle(out, args.lib, jit=False)
    info = b._info(b.find(BWD, "bf16", 64, 64, "causal", (-1, -1), 90, "mma_sync",
                          mask_mod=document))
    assert info["mask_mod"] == doc, info
    info = b._info(b.find(FWD, "bf16", 64, 64, "none", (-1, -1), 90, "mma_sync",
                          score_mod=key_bias, mask_mod=document))
    assert (info["score_mod"], info["mask_mod"]) == (bias, doc), info
    assert b.dirs == [out], b.dirs
    expect_error(lambda: b.find(FWD, "bf16", 64, 64, "causal", (-1, -1), 90, "mma_sync",
                                mask_mod=sliding),
                 "JIT is off", "maskmod=%s" % mods.trace_mask(sliding).name, "--score-mods")
    print("ok a bundle from fa.mods.write_library serves the Python mask_mods without JIT "
          "(%d kernels, no spills)" % len(spills))


def check_errors(args):
    cases = {
        "if": (lambda b, h, q, kv: True if kv <= q else False, "a mask_mod branched on a "
               "traced value", "combine conditions with & | ~"),
        "and": (lambda b, h, q, kv: (kv <= q) and (q - kv < 8), "branched on a traced value"),
        "float": (lambda b, h, q, kv: (q - kv) * 0.5, "returned a float32 value",
                  "a mask_mod returns a condition"),
        "index": (lambda b, h, q, kv: q - kv, "returned an integer index value"),
        "number": (lambda b, h, q, kv: 1, "returned 1 (int)"),
        "float index": (lambda b, h, q, kv: DOC[b, q * 0.5] == 0, "a tensor index is a f32"),
        "list": (lambda b, h, q, kv: [0, 1][kv] == 0, "a mask_mod used a traced value as a "
                 "Python integer"),
        "arity": (lambda b, h, q: q > 0, "tracing mask_mod", "TypeError",
                  "(b, h, q_idx, kv_idx) -> bool"),
        "float64": (lambda b, h, q, kv: GATE.double()[h] > 0, "a mask_mod read a tensor of "
                    "dtype float64"),
        "string": (lambda b, h, q, kv: q > "x", "a mask_mod combined a traced value with 'x'"),
        "unsupported": (lambda b, h, q, kv: torch.sin(q) > 0, "torch.sin is not supported in "
                        "a mask_mod"),
    }
    for name, (fn, *needles) in cases.items():
        message = expect_error(lambda: mods.trace_mask(fn), *needles)
        print("ok error %s: %s" % (name, message.splitlines()[0][:110]))
    expect_error(lambda: mods.trace_mask(mods.trace(key_bias)),
                 "is a traced score_mod, given as a mask_mod")
    expect_error(lambda: mods.trace_mask(3), "expected a function (b, h, q_idx, kv_idx) -> bool")
    b = fa.Bundle(args.bundle, args.lib)
    q = torch.zeros(1, 4, 16, 64, dtype=torch.bfloat16, device="meta")
    k = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16, device="meta")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mask_mod=document,
                                      mod_args=[torch.ones(2)]),
                 "mod_args is for a score_mod or mask_mod given by name",
                 "a Python mask_mod passes the tensors it reads itself")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mask_mod=document),
                 "mod_args[0] is on cpu, but q is on meta")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mask_mod=7),
                 "mask_mod is 7; expected None, a function (b, h, q_idx, kv_idx) -> bool")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mask_mod="no such"),
                 "mask_mod is 'no such'")
    expect_error(lambda: fa.attention(q, k, k, bundle=b, mask_mod=lambda b_, h, i, j: i - j),
                 "returned an integer index value")
    print("ok fa.attention rejects bad mask_mods before any launch")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--fa-aot", "--fa-run", "--lib", "--bundle", "--library"):
        ap.add_argument(flag, required=True)
    args = ap.parse_args()
    for flag in ("fa_aot", "fa_run", "lib", "bundle", "library"):
        setattr(args, flag, os.path.abspath(getattr(args, flag)))
    with tempfile.TemporaryDirectory(prefix="fa-mask-mods-") as work:
        os.environ["FA_CACHE_DIR"] = os.path.join(work, "cache")
        os.environ.pop("FA_SCORE_MODS", None)
        check_tracing()
        check_cpu(args, work)
        check_jit(args, work)
        check_bundle(args, work)
        check_errors(args)
    print("RESULT: Python mask_mod tests passed")


if __name__ == "__main__":
    main()
