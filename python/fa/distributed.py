"""Context parallelism: ring attention over torch.distributed (NCCL).

Each rank holds a chunk of the sequence: its queries stay, its keys and values
travel around the ring (rank r sends to r + 1 and receives from r - 1) on
NCCL's stream while the rank attends to the chunk it holds. Every step is one
of fa's kernels on a (query slice, key slice) pair with its LSE; the partial
results are merged by their LSE (the rule of attn.merge):

    lse = log(e^lse_a + e^lse_b),  O = e^(lse_a - lse) O_a + e^(lse_b - lse) O_b

The backward runs the same ring: each step is fa's backward kernel with the
merged O and LSE of the forward (so P and Delta = rowsum(dO∘O) are those of
the whole row), dQ accumulates where the queries live, and dK, dV travel one
hop behind K and V until they reach their owner.

Layouts of the sequence over W ranks (`layout`):
  "zigzag"      the sequence cut in 2W chunks; rank r holds chunks r and
                2W-1-r, so a causal mask gives every rank the same work;
  "contiguous"  rank r holds chunk r (causal: rank W-1 works W times rank 0).
`zigzag_shard` / `contiguous_shard` cut a whole [B, H, N, D] tensor, and
`unshard` puts the ranks' chunks back.

    out = fa.distributed.ring_attention(q_local, k_local, v_local, causal=True)

`ring_attention_simulated` runs the same steps for every rank in one process
(the ranks' chunks given as lists, the ring's transfers as list rotations):
the tests and benchmarks of one GPU use it.
"""

from . import FaError, attention, backward_into, forward_into, softmax_scale

LAYOUTS = ("zigzag", "contiguous")


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise FaError(1, "fa.distributed: layout %r; expected one of %s" % (layout, LAYOUTS))


def zigzag_shard(x, rank, world, dim=2):
    """Rank `rank`'s part of x in the zigzag layout: chunks rank and
    2W-1-rank of 2W along `dim`, concatenated."""
    import torch
    if x.shape[dim] % (2 * world):
        raise FaError(1, "fa.distributed: sequence length %d is not a multiple of 2 x %d ranks"
                      % (x.shape[dim], world))
    chunks = x.chunk(2 * world, dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim).contiguous()


def contiguous_shard(x, rank, world, dim=2):
    """Rank `rank`'s part of x in the contiguous layout: chunk rank of W."""
    if x.shape[dim] % world:
        raise FaError(1, "fa.distributed: sequence length %d is not a multiple of %d ranks"
                      % (x.shape[dim], world))
    return x.chunk(world, dim)[rank].contiguous()


def shard(x, rank, world, layout="zigzag", dim=2):
    _check_layout(layout)
    return (zigzag_shard if layout == "zigzag" else contiguous_shard)(x, rank, world, dim)


def unshard(parts, layout="zigzag", dim=2):
    """The whole tensor from the ranks' parts (a list indexed by rank)."""
    import torch
    _check_layout(layout)
    if layout == "contiguous":
        return torch.cat(parts, dim)
    world = len(parts)
    halves = [p.chunk(2, dim) for p in parts]
    return torch.cat([halves[r][0] for r in range(world)] +
                     [halves[r][1] for r in reversed(range(world))], dim)


def step_blocks(rank, src, causal, layout, n_local):
    """The attention a rank computes when it holds the keys of rank `src`:
    a list of (query slice, key slice, causal) over its local sequence of
    n_local rows. Positions along the sequence decide it: a query sees a key
    chunk whole when the chunk comes before it, along the diagonal when it is
    its own, not at all when it comes after."""
    whole = slice(0, n_local)
    if not causal:
        return [(whole, whole, False)]
    if src == rank:
        return [(whole, whole, True)]  # the local order is the global order
    if layout == "contiguous":
        return [(whole, whole, False)] if src < rank else []
    half = n_local // 2
    if src < rank:
        # Both query chunks come after the source's first chunk and before
        # its second (2W-1-src > 2W-1-rank > rank).
        return [(whole, slice(0, half), False)]
    # src > rank: the first query chunk comes before both key chunks; the
    # second after both.
    return [(slice(half, n_local), whole, False)]


def _rows(t, rows):
    """t[:, :, rows] as a dense tensor (fa's kernels take contiguous ones)."""
    if rows.start == 0 and rows.stop == t.shape[2]:
        return t
    return t[:, :, rows].contiguous()


def _acc_dtype(t):
    """Accumulators: float32, or the inputs' dtype where it is wider."""
    import torch
    return torch.promote_types(t.dtype, torch.float32)


def _merge(o_acc, lse_acc, o, lse):
    """The LSE merge of a partial into the running result, in place."""
    import torch
    new = torch.logaddexp(lse_acc, lse)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    o_acc.mul_(torch.exp(lse_acc - safe).unsqueeze(-1)).addcmul_(
        o, torch.exp(lse - safe).unsqueeze(-1))
    lse_acc.copy_(new)


_merge_fused = None


def merge_into(o_acc, lse_acc, o, lse):
    """o_acc, lse_acc (_acc_dtype) <- their merge with a partial (o, lse), in
    place; rows no partial has seen stay O = 0, LSE = -inf. On CUDA the merge
    is one fused kernel where torch.compile works (it reads O_acc and O once
    and writes O_acc once; eager it takes three passes), eager otherwise."""
    global _merge_fused
    if o_acc.is_cuda and _merge_fused is None:
        import torch
        try:
            fused = torch.compile(_merge, dynamic=True)
            # A trial on small tensors of the same kinds compiles it, or raises.
            fused(torch.zeros(1, 1, 2, 8, dtype=o_acc.dtype, device=o_acc.device),
                  torch.zeros(1, 1, 2, dtype=lse_acc.dtype, device=o_acc.device),
                  torch.zeros(1, 1, 2, 8, dtype=o.dtype, device=o_acc.device),
                  torch.zeros(1, 1, 2, dtype=lse.dtype, device=o_acc.device))
            _merge_fused = fused
        except Exception:  # no Triton or inductor here: the eager merge
            _merge_fused = _merge
    (_merge_fused if o_acc.is_cuda else _merge)(o_acc, lse_acc, o, lse)


class _ForwardState:
    """One rank's forward: its queries and the merged result so far."""

    def __init__(self, q, dv, opts):
        import torch
        self.q, self.opts = q, opts
        b, h, n, _ = q.shape
        acc = _acc_dtype(q)
        self.o = torch.zeros(b, h, n, dv, dtype=acc, device=q.device)
        self.lse = torch.full((b, h, n), float("-inf"), dtype=acc, device=q.device)
        self.empty = True

    def step(self, rank, src, k, v):
        n = self.q.shape[2]
        for rows, keys, causal in step_blocks(rank, src, self.opts["causal"],
                                              self.opts["layout"], n):
            o, lse = attention(_rows(self.q, rows), _rows(k, keys), _rows(v, keys),
                               causal=causal, scale=self.opts["scale"], return_lse=True,
                               bundle=self.opts["bundle"])
            if self.empty and rows == slice(0, n):  # the first partial: nothing to merge
                self.o.copy_(o)
                self.lse.copy_(lse)
            else:
                merge_into(self.o[:, :, rows], self.lse[:, :, rows], o, lse)
            self.empty = False

    def result(self):
        """O in the inputs' dtype, LSE in float32 (as fa.attention's)."""
        import torch
        return self.o.to(self.q.dtype), self.lse.to(torch.promote_types(self.q.dtype,
                                                                         torch.float32))


class _BackwardState:
    """One rank's backward: dQ of its queries, and the dK, dV accumulators
    of the key chunk it holds (they travel with it)."""

    def __init__(self, q, o, do, lse, opts):
        import torch
        self.q, self.o, self.do, self.lse, self.opts = q, o, do.contiguous(), lse, opts
        self.dq = torch.zeros(q.shape, dtype=_acc_dtype(q), device=q.device)

    def step(self, rank, src, k, v, dk, dv):
        """Adds this rank's share of dK, dV of the held chunk into dk, dv
        (_acc_dtype) and its dQ share into self.dq."""
        import torch
        for rows, keys, causal in step_blocks(rank, src, self.opts["causal"],
                                              self.opts["layout"], self.q.shape[2]):
            q, o, do, lse = (_rows(t, rows) for t in (self.q, self.o, self.do, self.lse))
            kk, vv = _rows(k, keys), _rows(v, keys)
            dq_p, dk_p, dv_p = torch.empty_like(q), torch.empty_like(kk), torch.empty_like(vv)
            backward_into(q, kk, vv, o, do, lse, dq_p, dk_p, dv_p, causal=causal,
                          scale=self.opts["scale"], bundle=self.opts["bundle"])
            self.dq[:, :, rows] += dq_p
            dk[:, :, keys] += dk_p
            dv[:, :, keys] += dv_p


def _options(q, causal, layout, scale, bundle):
    _check_layout(layout)
    if layout == "zigzag" and causal and q.shape[2] % 2:
        raise FaError(1, "fa.distributed: zigzag needs an even local length, got %d" % q.shape[2])
    return {"causal": bool(causal), "layout": layout, "bundle": bundle,
            "scale": softmax_scale(q.shape[-1], scale)}


def ring_attention_simulated(qs, ks, vs, causal=False, layout="zigzag", scale=None,
                             bundle=None, dos=None):
    """Every rank's ring steps in one process. qs, ks, vs: lists of the ranks'
    local tensors. Returns (outs, lses) per rank, and with dos (the ranks'
    output gradients) also (dqs, dks, dvs): the same steps, in the same order
    per rank, as ring_attention on W GPUs."""
    import torch
    world = len(qs)
    opts = _options(qs[0], causal, layout, scale, bundle)
    fwd = [_ForwardState(qs[r], vs[r].shape[-1], opts) for r in range(world)]
    for s in range(world):
        for r in range(world):
            src = (r - s) % world
            fwd[r].step(r, src, ks[src], vs[src])
    outs, lses = zip(*[f.result() for f in fwd])
    if dos is None:
        return list(outs), list(lses)
    bwd = [_BackwardState(qs[r], outs[r], dos[r], lses[r], opts) for r in range(world)]
    # dkv[j]: the accumulators of rank j's chunk, wherever it is on the ring.
    dkv = [(torch.zeros(k.shape, dtype=_acc_dtype(k), device=k.device),
            torch.zeros(v.shape, dtype=_acc_dtype(v), device=v.device)) for k, v in zip(ks, vs)]
    for s in range(world):
        for r in range(world):
            src = (r - s) % world
            bwd[r].step(r, src, ks[src], vs[src], *dkv[src])
    dqs = [b.dq.to(q.dtype) for b, q in zip(bwd, qs)]
    dks = [dk.to(k.dtype) for (dk, _), k in zip(dkv, ks)]
    dvs = [dv.to(v.dtype) for (_, dv), v in zip(dkv, vs)]
    return list(outs), list(lses), dqs, dks, dvs


class _Ring:
    """The ring's transfers over a torch.distributed group (NCCL): tensors
    sent to the next rank while those of the previous one arrive."""

    def __init__(self, group):
        import torch.distributed as dist
        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world) \
            if group is not None else (self.rank + 1) % self.world
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world) \
            if group is not None else (self.rank - 1) % self.world

    def start(self, tensors):
        """Posts the sends of `tensors` and the receives of the previous
        rank's; returns (the receive buffers, the requests)."""
        import torch
        incoming = [torch.empty_like(t) for t in tensors]
        ops = [self.dist.P2POp(self.dist.isend, t, self.next, self.group) for t in tensors]
        ops += [self.dist.P2POp(self.dist.irecv, t, self.prev, self.group) for t in incoming]
        return incoming, self.dist.batch_isend_irecv(ops)

    @staticmethod
    def wait(requests):
        for req in requests:
            req.wait()


def _ring_forward(ring, q, k, v, opts):
    state = _ForwardState(q, v.shape[-1], opts)
    for s in range(ring.world):
        if s + 1 < ring.world:
            incoming, reqs = ring.start([k, v])  # the next step's keys, under this one
        state.step(ring.rank, (ring.rank - s) % ring.world, k, v)
        if s + 1 < ring.world:
            ring.wait(reqs)
            k, v = incoming
    return state.result()


def _ring_backward(ring, q, k, v, o, do, lse, opts):
    import torch
    state = _BackwardState(q, o, do, lse, opts)
    dk = torch.zeros(k.shape, dtype=_acc_dtype(k), device=k.device)
    dv = torch.zeros(v.shape, dtype=_acc_dtype(v), device=v.device)
    for s in range(ring.world):
        if s + 1 < ring.world:
            incoming, reqs = ring.start([k, v])
        state.step(ring.rank, (ring.rank - s) % ring.world, k, v, dk, dv)
        # The chunk's gradients follow it to the next rank; after W hops
        # they are back with its owner.
        (dk, dv), dreqs = ring.start([dk, dv])
        if s + 1 < ring.world:
            ring.wait(reqs)
            k, v = incoming
        ring.wait(dreqs)
    return state.dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _make_function():
    import torch

    class RingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, group, opts):
            ring = _Ring(group)
            o, lse = _ring_forward(ring, q, k, v, opts)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.ring, ctx.opts = ring, opts
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = _ring_backward(ctx.ring, q, k, v, o, do, lse, ctx.opts)
            return dq, dk, dv, None, None

    return RingAttention


_function = None


def ring_attention(q, k, v, causal=False, layout="zigzag", scale=None, group=None,
                   bundle=None, return_lse=False):
    """Attention of this rank's queries over the whole sequence, held in
    chunks by the ranks of `group` (torch.distributed, NCCL; None: the
    default group). q [B,H,n,D], k [B,Hkv,n,D], v [B,Hkv,n,Dv] are this
    rank's chunks in `layout` (see shard); every rank must call it with the
    same shapes and options. Returns this rank's O (and its LSE over the
    whole sequence); differentiable in q, k, v, the backward running the
    ring again. The masks are those of fa.attention over the whole sequence
    (causal: top-left, which is also bottom-right, since Nq = Nk)."""
    import torch
    global _function
    opts = _options(q, causal, layout, scale, bundle)
    if _function is None:
        _function = _make_function()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _function.apply(q, k, v, group, opts)
    else:
        o, lse = _ring_forward(_Ring(group), q, k, v, opts)
    return (o, lse) if return_lse else o
