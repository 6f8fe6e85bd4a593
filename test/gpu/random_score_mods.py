"""Random score_mod programs for the GPU tests: expression trees over every op
the backward has a derivative rule for (addf, subf, mulf, divf, negf,
select on cmpf, maximumf, minimumf, tanh, exp, exp2, log, sqrt, absf), with
the score, constants and the indices (b, h, q, kv) as leaves. Each program is
written both as a score-mod library function (fa-aot --score-mods) and as a
PyTorch function with FlexAttention's score_mod signature, its reference;
both come from the same seed, so the GPU machine (no MLIR) rebuilds the
references from the kernel names alone: program "rnd<seed>_<i>" is
program(seed, i).

Domain guards keep every value finite: exp and exp2 see tanh(x), log and
sqrt see x·x + 1, a divisor is y·y + 1, and every program stays within a
few times the score's magnitude.

    python3 test/gpu/random_score_mods.py --seed 1 --count 12 \\
        --mlir out/random_mods.mlir --configs out/random_mods.txt
    build/bin/fa-aot --score-mods out/random_mods.mlir \\
        --config-file out/random_mods.txt -o out/bundle-rnd
"""
import argparse
import random
import re

UNARY = ["neg", "tanh", "abs", "exp", "exp2", "log", "sqrt"]
BINARY = ["add", "sub", "mul", "div", "max", "min", "select"]
INDICES = ["b", "h", "q", "kv"]


class Program:
    """One random tree; `mlir()` and `__call__` evaluate the same math."""

    def __init__(self, seed, index, depth=3):
        self.name = "rnd%d_%d" % (seed, index)
        rng = random.Random(seed * 100003 + index)
        while True:
            self.tree = self._node(rng, depth)
            if self._uses_score(self.tree):
                break

    # -- the tree ------------------------------------------------------------
    def _node(self, rng, depth):
        r = rng.random()
        if depth == 0 or r < 0.25:
            return self._leaf(rng)
        if r < 0.55:
            return (rng.choice(UNARY), self._node(rng, depth - 1))
        return (rng.choice(BINARY), self._node(rng, depth - 1), self._node(rng, depth - 1))

    @staticmethod
    def _leaf(rng):
        r = rng.random()
        if r < 0.5:
            return ("s",)
        if r < 0.75:
            return ("const", round(rng.uniform(-2, 2), 3) or 0.5)
        # An index scaled to stay within a few units over the test shapes.
        return ("index", rng.choice(INDICES), round(rng.uniform(-0.02, 0.02), 4) or 0.01)

    def _uses_score(self, node):
        return node[0] == "s" or any(self._uses_score(c) for c in node[1:]
                                     if isinstance(c, tuple))

    # -- PyTorch -------------------------------------------------------------
    def __call__(self, score, b, h, q_idx, kv_idx):
        env = {"b": b, "h": h, "q": q_idx, "kv": kv_idx}
        return self._torch(self.tree, score, env)

    def _torch(self, node, s, env):
        import torch
        op = node[0]
        if op == "s":
            return s
        if op == "const":
            return torch.full_like(s, node[1])
        if op == "index":
            # Integer index to the score's dtype, then scaled, as the kernel
            # does in float32.
            return env[node[1]].to(s.dtype) * node[2] + torch.zeros_like(s)
        args = [self._torch(c, s, env) for c in node[1:]]
        x = args[0]
        if op == "neg":
            return -x
        if op == "tanh":
            return torch.tanh(x)
        if op == "abs":
            return x.abs()
        if op == "exp":
            return torch.exp(torch.tanh(x))
        if op == "exp2":
            return torch.exp2(torch.tanh(x))
        if op == "log":
            return torch.log(x * x + 1)
        if op == "sqrt":
            return torch.sqrt(x * x + 1)
        y = args[1]
        if op == "add":
            return x + y
        if op == "sub":
            return x - y
        if op == "mul":
            return x * torch.tanh(y)
        if op == "div":
            return x / (y * y + 1)
        if op == "max":
            return torch.maximum(x, y)
        if op == "min":
            return torch.minimum(x, y)
        if op == "select":
            return torch.where(x > y, x, y * 0.5)
        raise ValueError(op)

    # -- MLIR ----------------------------------------------------------------
    def mlir(self):
        lines, counter = [], [0]

        def fresh():
            counter[0] += 1
            return "%%v%d" % counter[0]

        def emit(text):
            v = fresh()
            lines.append("  %s = %s" % (v, text))
            return v

        def const(c):
            return emit("arith.constant %r : f32" % float(c))

        def go(node):
            op = node[0]
            if op == "s":
                return "%s"
            if op == "const":
                return const(node[1])
            if op == "index":
                i = emit("arith.index_cast %%%s : index to i32" % node[1])
                f = emit("arith.sitofp %s : i32 to f32" % i)
                return emit("arith.mulf %s, %s : f32" % (f, const(node[2])))
            x = go(node[1])
            if op == "neg":
                return emit("arith.negf %s : f32" % x)
            if op == "tanh":
                return emit("math.tanh %s : f32" % x)
            if op == "abs":
                return emit("math.absf %s : f32" % x)
            if op in ("exp", "exp2"):
                t = emit("math.tanh %s : f32" % x)
                return emit("math.%s %s : f32" % (op, t))
            if op in ("log", "sqrt"):
                sq = emit("arith.mulf %s, %s : f32" % (x, x))
                a = emit("arith.addf %s, %s : f32" % (sq, const(1.0)))
                return emit("math.%s %s : f32" % (op, a))
            y = go(node[2])
            if op == "add":
                return emit("arith.addf %s, %s : f32" % (x, y))
            if op == "sub":
                return emit("arith.subf %s, %s : f32" % (x, y))
            if op == "mul":
                t = emit("math.tanh %s : f32" % y)
                return emit("arith.mulf %s, %s : f32" % (x, t))
            if op == "div":
                sq = emit("arith.mulf %s, %s : f32" % (y, y))
                d = emit("arith.addf %s, %s : f32" % (sq, const(1.0)))
                return emit("arith.divf %s, %s : f32" % (x, d))
            if op == "max":
                return emit("arith.maximumf %s, %s : f32" % (x, y))
            if op == "min":
                return emit("arith.minimumf %s, %s : f32" % (x, y))
            if op == "select":
                c = emit("arith.cmpf ogt, %s, %s : f32" % (x, y))
                half = emit("arith.mulf %s, %s : f32" % (y, const(0.5)))
                return emit("arith.select %s, %s, %s : f32" % (c, x, half))
            raise ValueError(op)

        result = go(self.tree)
        body = "\n".join(lines)
        return ("func.func @%s(%%s: f32, %%b: index, %%h: index, %%q: index, %%kv: index)"
                " -> f32 {\n%s\n  return %s : f32\n}\n" % (self.name, body, result))

    def ops(self):
        """The op names of the tree (coverage)."""
        out, stack = set(), [self.tree]
        while stack:
            n = stack.pop()
            out.add(n[0])
            stack.extend(c for c in n[1:] if isinstance(c, tuple))
        return out


_NAME = re.compile(r"rnd(\d+)_(\d+)$")


def program(seed, index):
    return Program(seed, index)


def lookup(name):
    """The program named rnd<seed>_<i>, or None."""
    m = _NAME.match(name)
    return program(int(m.group(1)), int(m.group(2))) if m else None


# Kernel families the programs are compiled for, cycled over the programs:
# the mma.sync forward and backward at several head dims and masks, and the
# sm_90a wgmma forward and backward.
FAMILIES = [
    "bf16:d64:causal", "f16:d128:none", "bf16:d96:window:l64:r16",
    "bf16:d128:causal:wgmma", "f16:d64:none:wgmma", "bf16:d32:causal_bottom_right",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--mlir", required=True, help="score-mod library to write")
    ap.add_argument("--configs", required=True, help="fa-aot config file to write")
    args = ap.parse_args()
    programs = [program(args.seed, i) for i in range(args.count)]
    with open(args.mlir, "w") as f:
        f.write("// Generated by test/gpu/random_score_mods.py --seed %d --count %d\n\n"
                % (args.seed, args.count))
        f.write("\n".join(p.mlir() for p in programs))
    with open(args.configs, "w") as f:
        for i, p in enumerate(programs):
            family = FAMILIES[i % len(FAMILIES)]
            f.write("fwd:%s:mod=%s\nbwd:%s:mod=%s\n" % (family, p.name, family, p.name))
    covered = set().union(*(p.ops() for p in programs))
    missing = sorted(set(UNARY + BINARY) - covered)
    print("%d programs; ops not drawn: %s" % (len(programs), ", ".join(missing) or "none"))


if __name__ == "__main__":
    main()
