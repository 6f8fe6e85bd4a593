#!/usr/bin/env python3
"""Ring attention's schedule, on the CPU: fa.distributed with fa's kernels
replaced by exact float64 attention (forward with LSE, and the recompute
backward from a given O and LSE, as fa's backward kernel computes it).

Then every difference from attention on the whole sequence is the schedule's:
which (query, key) slices each rank computes at each step, the LSE merge, dQ
accumulating where the queries live and dK, dV following their chunk around
the ring. Checked for W in 1..8, both layouts, causal and not, GQA, local
lengths with odd halves, O, LSE, dQ, dK, dV within 1e-10: first with
ring_attention_simulated (every rank in this process), then with
ring_attention itself, autograd included, on W = 2, 3, 4 processes joined by
torch.distributed's gloo backend on the CPU (NCCL's transfers, the same
P2P calls, are the GPU's). The kernels' own numerics are
test/gpu/test_ring.py's, on the GPU.

    python3 test/Python/test_ring_schedule.py
"""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import fa.distributed as fad  # noqa: E402


def scores(q, k, causal, scale):
    g = q.shape[1] // k.shape[1]
    s = torch.matmul(q, k.repeat_interleave(g, 1).transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2:]
        keep = torch.arange(m)[None, :] <= torch.arange(n)[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    return s


def exact_attention(q, k, v, causal=False, scale=None, return_lse=True, bundle=None):
    s = scores(q, k, causal, scale)
    lse = torch.logsumexp(s, -1)
    g = q.shape[1] // k.shape[1]
    p = torch.exp(s - lse[..., None]).nan_to_num()
    return torch.matmul(p, v.repeat_interleave(g, 1)), lse


def exact_backward(q, k, v, o, do, lse, dq, dk, dv, causal=False, scale=None, bundle=None):
    """fa's recompute backward: P from the given LSE, Delta from the given O."""
    g = q.shape[1] // k.shape[1]
    fold = lambda t: t.view(t.shape[0], k.shape[1], g, *t.shape[2:]).sum(2)  # noqa: E731
    p = torch.exp(scores(q, k, causal, scale) - lse[..., None]).nan_to_num()
    dp = torch.matmul(do, v.repeat_interleave(g, 1).transpose(-1, -2))
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    dq.copy_(scale * torch.matmul(ds, k.repeat_interleave(g, 1)))
    dk.copy_(fold(scale * torch.matmul(ds.transpose(-1, -2), q)))
    dv.copy_(fold(torch.matmul(p.transpose(-1, -2), do)))


def check(world, layout, causal, n_local, gqa):
    q, k, v, do = inputs(world, n_local, gqa, world * 100 + n_local)
    d = q.shape[-1]
    o, lse = exact_attention(q, k, v, causal, d ** -0.5)
    o.backward(do)

    part = lambda t: [fad.shard(t.detach(), r, world, layout) for r in range(world)]  # noqa
    got = fad.ring_attention_simulated(part(q), part(k), part(v), causal=causal,
                                       layout=layout, dos=part(do))
    want = (o, lse, q.grad, k.grad, v.grad)
    errs = [(fad.unshard(g, layout) - w.detach()).abs().max().item() for g, w in zip(got, want)]
    ok = max(errs) <= 1e-10
    print("%s W=%d %s %s n_local=%d %s: max err o %.1e lse %.1e dq %.1e dk %.1e dv %.1e" % (
        "ok  " if ok else "FAIL", world, layout, "causal" if causal else "full", n_local,
        "gqa" if gqa else "mha", *errs))
    return ok


def inputs(world, n_local, gqa, seed):
    torch.manual_seed(seed)
    b, h, d = 2, 4, 8
    hkv = 2 if gqa else h
    n = world * n_local
    q = torch.randn(b, h, n, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, hkv, n, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, hkv, n, d, dtype=torch.float64, requires_grad=True)
    return q, k, v, torch.randn(b, h, n, d, dtype=torch.float64)


def rank_main(rank, world, port, results):
    """One process of the ring: its shards through fad.ring_attention and
    backward, against its shards of the whole sequence's results."""
    import torch.distributed as dist
    fad.attention, fad.backward_into = exact_attention, exact_backward
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    worst = 0.0
    for layout, causal, gqa in itertools.product(fad.LAYOUTS, (False, True), (False, True)):
        q, k, v, do = inputs(world, 6, gqa, 7)
        o, lse = exact_attention(q, k, v, causal, q.shape[-1] ** -0.5)
        o.backward(do)
        mine = lambda t: fad.shard(t.detach(), rank, world, layout)  # noqa: E731
        ql, kl, vl = (mine(t).requires_grad_() for t in (q, k, v))
        ol, lsel = fad.ring_attention(ql, kl, vl, causal=causal, layout=layout,
                                      return_lse=True)
        ol.backward(mine(do))
        for got, want in ((ol, o), (lsel, lse), (ql.grad, q.grad), (kl.grad, k.grad),
                          (vl.grad, v.grad)):
            worst = max(worst, (got.detach() - mine(want)).abs().max().item())
    results[rank] = worst
    dist.destroy_process_group()


def distributed(world):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(rank_main, args=(world, port, results), nprocs=world)
    worst = max(results.values())
    ok = worst <= 1e-10
    print("%s ring_attention on %d gloo processes (both layouts, causal and not, GQA, "
          "autograd): max err %.1e" % ("ok  " if ok else "FAIL", world, worst))
    return ok


def main():
    fad.attention, fad.backward_into = exact_attention, exact_backward
    failed = 0
    total = 0
    for world, layout, causal, n_local, gqa in itertools.product(
            range(1, 9), fad.LAYOUTS, (False, True), (6, 10), (False, True)):
        total += 1
        failed += not check(world, layout, causal, n_local, gqa)
    # Bad layouts and lengths are refused with a message.
    for bad in (lambda: fad.shard(torch.zeros(1, 1, 6, 1), 0, 4, "zigzag"),
                lambda: fad.shard(torch.zeros(1, 1, 6, 1), 0, 4, "stripes")):
        try:
            bad()
            print("FAIL: accepted a bad shard")
            failed += 1
        except fad.FaError as e:
            print("refused: %s" % e)
    for world in (2, 3, 4):
        total += 1
        failed += not distributed(world)
    print("ring schedule: %d/%d configurations exact" % (total - failed, total))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
