#!/usr/bin/env python3
"""Ring attention (fa.distributed) against fa on one GPU at the same work per GPU.

Ideal scaling: W GPUs each holding n tokens of a sequence of N = W·n take the
time one GPU takes for the whole sequence divided by W (the work divides
evenly: zigzag balances the causal mask). Efficiency = (T_one(N) / W) / T_ring.

Multi-GPU (torchrun --nproc_per_node=W bench/ring.py --bundle B --lib L):
per GPU, forward and forward + backward, the ring's TFLOP/s and efficiency,
and the share of the transfers hidden under compute:
  hidden = (T_compute + T_comm - T_ring) / T_comm,
with T_compute the same steps on data already in place (no transfer) and
T_comm the transfers alone.

One GPU (--simulate W): every rank's steps run one after the other on this
GPU, each timed; a lockstep ring with free transfers would take, per step,
the slowest rank's time. Their sum against T_one(N) / W is the schedule's
own efficiency (chunked kernels, the LSE merge, dK/dV accumulation): the
bound that communication can only lower.

    python3 bench/ring.py --bundle out/bundle --lib L --simulate 8 --tokens 32768
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa  # noqa: E402
import fa.distributed as fad  # noqa: E402


def timed(fn, reps):
    """Median ms of fn() over reps, CUDA events, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def flops(b, h, n, d, causal, backward):
    f = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
    return f * (3.5 if backward else 1.0)  # fwd + bwd: 1 + 2.5


def tensors(b, h, hkv, n, d, grad=False):
    mk = lambda heads: torch.randn(b, heads, n, d, device="cuda", dtype=torch.bfloat16,  # noqa
                                   requires_grad=grad)
    return mk(h), mk(hkv), mk(hkv), torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)


def one_gpu_ms(b, h, hkv, n, d, causal, reps):
    q, k, v, do = tensors(b, h, hkv, n, d, grad=True)
    with torch.no_grad():
        fwd = timed(lambda: fa.attention(q, k, v, causal=causal), reps)
    both = timed(lambda: fa.attention(q, k, v, causal=causal).backward(do), reps)
    return fwd, both


def simulate(args, causal):
    """Per-step times of every rank's steps on this GPU (module docstring)."""
    w, n = args.simulate, args.tokens
    b, h, hkv, d = args.batch, args.heads, args.kv_heads, args.head_dim
    q, k, v, do = tensors(b, h, hkv, w * n, d)
    part = lambda t: [fad.shard(t, r, w, args.layout) for r in range(w)]  # noqa: E731
    qs, ks, vs, dos = part(q), part(k), part(v), part(do)
    opts = fad._options(qs[0], causal, args.layout, None, None)
    fwd_steps, bwd_steps = [0.0] * w, [0.0] * w
    with torch.no_grad():
        outs = [fad._ForwardState(qs[r], d, opts) for r in range(w)]
        for s in range(w):
            for r in range(w):
                src = (r - s) % w
                fwd_steps[s] = max(fwd_steps[s], timed(
                    lambda: outs[r].step(r, src, ks[src], vs[src]), args.reps))
        states = []
        for r in range(w):
            o, lse = fad._ForwardState(qs[r], d, opts), None
            for s in range(w):
                src = (r - s) % w
                o.step(r, src, ks[src], vs[src])
            o, lse = o.result()
            states.append(fad._BackwardState(qs[r], o, dos[r], lse, opts))
        dk = [torch.zeros(t.shape, dtype=torch.float32, device="cuda") for t in ks]
        dv = [torch.zeros(t.shape, dtype=torch.float32, device="cuda") for t in vs]
        for s in range(w):
            for r in range(w):
                src = (r - s) % w
                bwd_steps[s] = max(bwd_steps[s], timed(
                    lambda: states[r].step(r, src, ks[src], vs[src], dk[src], dv[src]),
                    args.reps))
    one_fwd, one_both = one_gpu_ms(b, h, hkv, w * n, d, causal, args.reps)
    ring_fwd, ring_both = sum(fwd_steps), sum(fwd_steps) + sum(bwd_steps)
    f = flops(b, h, w * n, d, causal, False) / w
    fb = flops(b, h, w * n, d, causal, True) / w
    print("W=%d n=%d/GPU %s %s: fwd %.2f ms/GPU (%.0f TFLOP/s, %.0f%% of ideal %.2f ms); "
          "fwd+bwd %.2f ms/GPU (%.0f TFLOP/s, %.0f%% of ideal %.2f ms)" % (
              w, n, "causal" if causal else "full", args.layout,
              ring_fwd, f / ring_fwd / 1e9, 100 * one_fwd / w / ring_fwd, one_fwd / w,
              ring_both, fb / ring_both / 1e9, 100 * one_both / w / ring_both, one_both / w))


def distributed(args, causal):
    import torch.distributed as dist
    rank, w = dist.get_rank(), dist.get_world_size()
    n = args.tokens
    b, h, hkv, d = args.batch, args.heads, args.kv_heads, args.head_dim
    q, k, v, do = tensors(b, h, hkv, n, d, grad=True)
    ring = fad._Ring(None)
    opts = fad._options(q, causal, args.layout, None, None)

    def ring_fwd():
        with torch.no_grad():
            fad.ring_attention(q, k, v, causal=causal, layout=args.layout)

    def ring_both():
        fad.ring_attention(q, k, v, causal=causal, layout=args.layout).backward(do)

    def compute_only():  # the same steps, the chunk in place of the transfer
        with torch.no_grad():
            state = fad._ForwardState(q, d, opts)
            for s in range(w):
                state.step(rank, (rank - s) % w, k, v)

    def comm_only():
        kk, vv = k.detach(), v.detach()
        for _ in range(w - 1):
            (kk, vv), reqs = ring.start([kk, vv])
            ring.wait(reqs)

    dist.barrier()
    t = {name: timed(fn, args.reps) for name, fn in (
        ("ring_fwd", ring_fwd), ("ring_both", ring_both), ("compute", compute_only),
        ("comm", comm_only))}
    if rank == 0:
        one_fwd, one_both = one_gpu_ms(b, h, hkv, w * n, d, causal, args.reps)
        f = flops(b, h, w * n, d, causal, False) / w
        fb = flops(b, h, w * n, d, causal, True) / w
        hidden = (t["compute"] + t["comm"] - t["ring_fwd"]) / t["comm"] if t["comm"] else 1.0
        print("W=%d n=%d/GPU %s %s: fwd %.2f ms (%.0f TFLOP/s/GPU, %.0f%% of ideal); "
              "fwd+bwd %.2f ms (%.0f TFLOP/s/GPU, %.0f%% of ideal); transfers %.2f ms, "
              "%.0f%% hidden" % (
                  w, n, "causal" if causal else "full", args.layout,
                  t["ring_fwd"], f / t["ring_fwd"] / 1e9, 100 * one_fwd / w / t["ring_fwd"],
                  t["ring_both"], fb / t["ring_both"] / 1e9,
                  100 * one_both / w / t["ring_both"], t["comm"], 100 * hidden), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--simulate", type=int, default=0, help="W ranks on this one GPU")
    ap.add_argument("--tokens", type=int, default=32768, help="tokens per GPU")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--layout", choices=fad.LAYOUTS, default="zigzag")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.simulate:
        fa.load(args.bundle, args.lib)
        for causal in (False, True):
            simulate(args, causal)
        return 0
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    fa.load(args.bundle, args.lib)
    for causal in (False, True):
        distributed(args, causal)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
