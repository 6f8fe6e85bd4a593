"""score_mods written in Python (fa.mods), end to end on the CPU: each is
traced into fa's IR, run by fa-run inside attn.attention (f32), and checked
against a float64 attention that calls the same Python function on numbers;
the library of traced functions is also what fa-aot compiles for the GPU.

    python_mods.py make DIR    # DIR/mods.mlir (library), DIR/attention.mlir, inputs
    python_mods.py check DIR   # compares DIR/o_<name>.npy with float64
"""
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
from npy import load, save  # noqa: E402
from fa import mods  # noqa: E402

B, H, HKV, NQ, NK, D = 1, 4, 2, 5, 7, 3
SCALE = 0.7


def softcap(s, b, h, q, kv):
    return 30 * mods.tanh(s / 30)


def alibi(s, b, h, q, kv):
    slope = mods.exp2(-0.5 * (h + 1))
    return s - slope * abs(q - kv)


def buckets(s, b, h, q, kv):
    # integer arithmetic on indices: a bias per relative-position bucket
    rel = (kv - q) // 2 + (h % 2)
    return s + 0.25 * mods.where(rel > 0, rel, -rel) - 0.1 * mods.sqrt(q + 1.0)


def piecewise(s, b, h, q, kv):
    near = (abs(q - kv) <= 1) | (kv == 0)
    capped = mods.clamp(s, min=-1.5, max=2.0)
    return mods.where(near & ~(q == kv), capped + 0.5, mods.log(1 + mods.exp(s)))


def constant(s, b, h, q, kv):
    return s * 0 + 1.5 * (q >= kv)


FNS = [softcap, alibi, buckets, piecewise, constant]


def region(mod):
    """The traced function's body as an attn score_mod region."""
    lines = mod.mlir.splitlines()
    body = [l.replace("%score", "%s") for l in lines[1:-2]]
    result = lines[-2].split()[1].replace("%score", "%s")
    return ("score_mod {\n  ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):\n"
            + "\n".join("  " + l for l in body) + "\n    attn.yield %s : f32\n  }" % result)


def make(out):
    rng = random.Random(3)
    tensors = {"q": [B, H, NQ, D], "k": [B, HKV, NK, D], "v": [B, HKV, NK, D]}
    for name, shape in tensors.items():
        n = math.prod(shape)
        save(os.path.join(out, name + ".npy"), shape, [rng.uniform(-2, 2) for _ in range(n)])
    traced = [mods.trace(fn, name=fn.__name__) for fn in FNS]
    with open(os.path.join(out, "mods.mlir"), "w") as f:
        f.write("\n".join(m.mlir for m in traced))
    t = lambda s: "tensor<%sxf32>" % "x".join(map(str, s))
    with open(os.path.join(out, "attention.mlir"), "w") as f:
        for m in traced:
            f.write("func.func @%s(%%Q: %s, %%K: %s, %%V: %s) -> (%s, %s) {\n"
                    "  %%o, %%lse = attn.attention %%Q, %%K, %%V {scale = %r : f32} %s : %s, %s, %s -> %s, %s\n"
                    "  return %%o, %%lse : %s, %s\n}\n"
                    % (m.name, t(tensors["q"]), t(tensors["k"]), t(tensors["v"]),
                       t([B, H, NQ, D]), t([B, H, NQ]), SCALE, region(m), t(tensors["q"]),
                       t(tensors["k"]), t(tensors["v"]), t([B, H, NQ, D]), t([B, H, NQ]),
                       t([B, H, NQ, D]), t([B, H, NQ])))


def reference(fn, q, k, v):
    """float64 attention with score_mod fn applied to Python numbers."""
    o = []
    for h in range(H):
        hk = h // (H // HKV)
        for i in range(NQ):
            s = []
            for j in range(NK):
                dot = sum(q[(h * NQ + i) * D + c] * k[(hk * NK + j) * D + c] for c in range(D))
                s.append(fn(SCALE * dot, 0, h, i, j))
            m = max(s)
            p = [math.exp(x - m) for x in s]
            l = sum(p)
            o.extend(sum(p[j] * v[(hk * NK + j) * D + c] for j in range(NK)) / l
                     for c in range(D))
    return o


def check(out):
    q, k, v = (load(os.path.join(out, n + ".npy"))[1] for n in ("q", "k", "v"))
    worst = 0.0
    for fn in FNS:
        got = load(os.path.join(out, "o_%s.npy" % fn.__name__))[1]
        want = reference(fn, q, k, v)
        err = max(abs(a - b) for a, b in zip(got, want))
        print("%s max error %.2e" % (fn.__name__, err))
        worst = max(worst, err)
    print("OK" if worst < 2e-5 else "FAIL: worst error %.2e" % worst)


def errors(_=None):
    """Functions that cannot be traced, each with the message it gets."""
    table = [1.0, 2.0]  # a list: only torch tensors are read as mod_args
    cases = {
        "branch": lambda s, b, h, q, kv: s if s > 0 else -s,
        "tensor": lambda s, b, h, q, kv: s + table[kv],
        "infinite": lambda s, b, h, q, kv: s + float("inf"),
        "truediv": lambda s, b, h, q, kv: s + (q - kv) / (kv + 1),
        "string": lambda s, b, h, q, kv: s + "x",
        "arity": lambda s: s,
    }
    for name, fn in cases.items():
        try:
            mods.trace(fn)
            print("%s: traced" % name)
        except mods.FaError as e:
            print("%s: %s" % (name, e))
    for bad in ("1x", "a-b", "x" * 65):
        try:
            mods.trace(softcap, name=bad)
        except mods.FaError as e:
            print("name: %s" % e)


if __name__ == "__main__":
    {"make": make, "check": check, "errors": errors}[sys.argv[1]](*sys.argv[2:])
