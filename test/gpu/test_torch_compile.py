#!/usr/bin/env python3
"""fa.attention under torch.compile(fullgraph=True), on the GPU machine.

A small transformer (two pre-norm blocks: fa attention, causal, bf16 Q/K/V,
the rest f32) fits one batch for a few AdamW steps from one initialisation,
three ways: eager with fa, torch.compile(fullgraph=True) with fa, and eager
with PyTorch SDPA. Checks:
  - torch._dynamo.explain of the compiled step's forward reports 0 graph
    breaks and its graph calls fa::attention_fwd (not a fallback);
  - the eager loss falls; compiled and eager fa losses agree step by step
    (rtol 1e-2: the same fa kernels, inductor's f32 fusions around them), and
    fa's eager losses agree with SDPA's (rtol 3e-2: another bf16 attention),
    so the backward through fa::attention_bwd is right, not only consistent;
  - torch.library.opcheck passes on fa::attention_fwd and fa::attention_bwd
    (schema, fake tensors, autograd registration, AOT dispatch).
Prints one line per check and RESULT; --json writes the numbers.

    python3 test/gpu/test_torch_compile.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import fa  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads)
        q, k, v = (t.transpose(1, 2).contiguous().to(torch.bfloat16) for t in qkv.unbind(2))
        o = self.attention(q, k, v)
        x = x + self.proj(o.transpose(1, 2).reshape(b, n, c).float())
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, dim, heads, depth, attention):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(depth))
        self.head = nn.Linear(dim, dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def fa_attention(q, k, v):
    return fa.attention(q, k, v, causal=True)


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def train(attention, compiled, data, args):
    """Losses of args.steps AdamW steps from the seed-0 initialisation."""
    torch.manual_seed(0)
    model = Model(args.dim, args.heads, 2, attention).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = torch.compile(model, fullgraph=True) if compiled else model
    losses = []
    for x, target in data:
        loss = F.mse_loss(run(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def agree(a, b, rtol):
    return all(abs(x - y) <= rtol * abs(y) + 1e-6 for x, y in zip(a, b))


def opcheck(args, log):
    """torch.library.opcheck on both ops with small causal inputs."""
    if not hasattr(torch.library, "opcheck"):
        log.append(("opcheck", None, "torch.library.opcheck missing in torch %s"
                    % torch.__version__))
        return True
    b = fa._bundle(None)
    q, k, v = (torch.randn(1, 2, 96, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    fwd_args = (q, k, v, b.id, "causal", -1, -1, None, "", False, "", False)
    o, lse = torch.ops.fa.attention_fwd(*fwd_args)
    bwd_args = tuple(t.detach() for t in (q, k, v, o, torch.randn_like(o), lse)) + (
        b.id, "causal", -1, -1, None, False, "", False)
    ok = True
    for name, op, op_args in (("fa::attention_fwd", torch.ops.fa.attention_fwd.default,
                               fwd_args),
                              ("fa::attention_bwd", torch.ops.fa.attention_bwd.default,
                               bwd_args)):
        try:  # raises at the first failing test by default
            result = torch.library.opcheck(op, op_args)
            bad = {test: r for test, r in result.items() if r != "SUCCESS"}
        except Exception as e:  # noqa: BLE001 - reported as the check's failure
            bad = {"raised": "%s: %s" % (type(e).__name__, str(e)[:400])}
        log.append((name, not bad, "opcheck %s" % (bad or "all SUCCESS")))
        ok = ok and not bad
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print("torch", torch.__version__, torch.cuda.get_device_name())
    fa.load(args.bundle, args.lib)
    # One batch every step: the loss must fall as the model fits it.
    gen = torch.Generator(device="cuda").manual_seed(1)
    batch = (torch.randn(args.batch, args.seq, args.dim, device="cuda", generator=gen),
             torch.randn(args.batch, args.seq, args.dim, device="cuda", generator=gen))
    data = [batch] * args.steps
    log, failed = [], False

    torch.manual_seed(0)
    model = Model(args.dim, args.heads, 2, fa_attention).cuda()
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda x: F.mse_loss(model(x), data[0][1]))(data[0][0])
    code = "\n".join(g.code for g in explanation.graphs if hasattr(g, "code"))
    traced_op = "fa.attention_fwd" in code
    breaks = explanation.graph_break_count
    ok = breaks == 0 and traced_op
    log.append(("explain", ok, "%d graph(s), %d graph break(s)%s; fa::attention_fwd in the "
                "graph: %s" % (explanation.graph_count, breaks,
                               "" if not breaks else " " + str(explanation.break_reasons),
                               traced_op)))
    failed |= not ok
    torch._dynamo.reset()

    t0 = time.time()
    eager, _ = train(fa_attention, False, data, args)
    t1 = time.time()
    compiled, _ = train(fa_attention, True, data, args)
    t2 = time.time()
    sdpa, _ = train(sdpa_attention, False, data, args)
    finite = all(math.isfinite(x) for x in eager + compiled + sdpa)
    decreasing = eager[-1] < eager[0]
    ok = finite and decreasing and agree(compiled, eager, 1e-2)
    log.append(("compiled vs eager", ok, "losses compiled %s, eager %s (eager %.1f s, "
                "compile + train %.1f s)" % (["%.5f" % x for x in compiled],
                                            ["%.5f" % x for x in eager], t1 - t0, t2 - t1)))
    failed |= not ok
    ok = finite and agree(eager, sdpa, 3e-2)
    log.append(("fa vs sdpa", ok, "losses sdpa %s" % ["%.5f" % x for x in sdpa]))
    failed |= not ok

    failed |= not opcheck(args, log)
    for name, ok, text in log:
        print("%s %s: %s" % ({True: "ok", False: "FAIL", None: "skip"}[ok], name, text))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "eager": eager, "compiled": compiled,
                       "sdpa": sdpa, "graph_breaks": breaks,
                       "checks": [{"name": n, "ok": o, "text": t} for n, o, t in log]}, f,
                      indent=1)
    print("RESULT: torch.compile %s" % ("FAILED" if failed else "passed"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
