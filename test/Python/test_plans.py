#!/usr/bin/env python3
"""fa's per-shape launch plans (python/fa/__init__.py), without a GPU or
PyTorch: forward_into / backward_into build the runtime's argument struct
once per (shapes, strides, dtypes, options) and then only set data pointers.
Tensors here are stand-ins with shapes, strides and addresses; the launch is
replaced by the runtime's GPU-free check (fa_attention_*_check) plus a record
of the struct. Checks: a repeated call reuses the plan (one kernel lookup)
with the new addresses in the struct; the struct equals one built afresh;
other strides, dtypes or options get a plan of their own, so a
non-contiguous tensor after a contiguous one of the same shape is still
rejected by the runtime rather than launched with stale strides.

    test_plans.py --lib build/lib/libfa_runtime.so --bundle build/test/Runtime/fixture-bundle
"""
import argparse
import ctypes
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def fake_torch():
    """Just what fa touches on its launch path."""
    torch = types.ModuleType("torch")
    torch.library = types.SimpleNamespace()  # no custom_op: fa registers no ops
    torch.cuda = types.SimpleNamespace(current_device=lambda: 0, is_available=lambda: False,
                                       get_device_capability=lambda index: (9, 0))
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0)
    torch.cuda.get_device_properties = lambda index: types.SimpleNamespace(
        multi_processor_count=132)
    torch.float32, torch.uint8 = "f32", "u8"
    torch.empty = lambda shape, dtype, device: Fake(
        (shape,) if isinstance(shape, int) else tuple(shape), dtype)
    torch.empty_like = lambda t: Fake(t.shape, t.dtype)
    return torch


class Fake:
    """A CUDA tensor stand-in: contiguous unless strides are given."""
    next_address = 1 << 32

    def __init__(self, shape, dtype, strides=None):
        self.shape, self.dtype, self.device = tuple(shape), dtype, "cuda:0"
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)
        self.address = Fake.next_address
        Fake.next_address += 1 << 24

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def dim(self):
        return len(self.shape)

    def data_ptr(self):
        return self.address

    def get_device(self):
        return 0

    def contiguous(self):
        return self

    def is_contiguous(self):
        return self._strides == Fake(self.shape, self.dtype)._strides

    def permute(self, *dims):
        view = Fake([self.shape[i] for i in dims], self.dtype,
                    [self._strides[i] for i in dims])
        view.address = self.address
        return view


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bundle", required=True)
    args = ap.parse_args()
    sys.modules["torch"] = fake_torch()
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import fa
    from fa import _runtime as rt

    bundle = fa.load(args.bundle, args.lib, jit=False)
    lib = bundle.lib
    launched, finds = [], []
    real_find = bundle.find

    def counting_find(*a, **k):
        finds.append(a)
        return real_find(*a, **k)

    def checked_launch(lib_, fn, kernel, struct, t, *extra):
        # The launch's check: its name with _check before any _ex.
        name = fn.__name__
        check = getattr(lib, name[:-3] + "_check_ex" if name.endswith("_ex")
                        else name + "_check")
        status = check(kernel, ctypes.byref(struct), *extra)
        launched.append((bytes(struct), status, lib.fa_last_error().decode(), fn, extra))
        rt.check(lib, status)

    bundle.find = counting_find
    fa._launch = checked_launch

    def forward_tensors(nq=100, d=64):
        q, k, v = (Fake((2, 4, nq, d), "bf16") for _ in range(3))
        return q, k, v, Fake((2, 4, nq, d), "bf16"), Fake((2, 4, nq), "f32")

    first = forward_tensors()
    fa.forward_into(*first, causal=True)
    second = forward_tensors()
    fa.forward_into(*second, causal=True)
    assert len(finds) == 1, "expected one kernel lookup for two calls, got %d" % len(finds)
    made = rt.ForwardArgs(*[fa._tensor(t) for t in second], 1 / 8)
    assert launched[-1][0] == bytes(made), "the reused plan's struct differs from a fresh one"
    assert launched[0][0] != launched[1][0], "the second call kept the first call's addresses"
    print("ok forward: 2 calls, 1 kernel lookup, the struct of the second call equals a fresh "
          "one")

    fa.forward_into(*second, causal=False)
    fa.forward_into(*forward_tensors(nq=130), causal=True)
    assert len(finds) == 3, "other options or shapes reused a plan (%d lookups)" % len(finds)
    q, k, v, o, lse = forward_tensors()
    strided = Fake(q.shape, "bf16", strides=(4 * 100 * 64, 64, 4 * 64, 1))
    try:
        fa.forward_into(strided, k, v, o, lse, causal=True)
        raise AssertionError("a non-contiguous q after a contiguous one was launched")
    except fa.FaError as e:
        rejected = str(e)
    assert "contiguous" in rejected, rejected
    assert len(finds) == 4, "the strided q reused the contiguous plan"
    print("ok forward: other options, shapes and strides get plans of their own; the strided "
          "q is rejected: %s" % rejected.splitlines()[0][:110])

    def backward_tensors():
        q, k, v, o, lse = forward_tensors()
        return (q, k, v, o, Fake(o.shape, "bf16"), lse, Fake(q.shape, "bf16"),
                Fake(k.shape, "bf16"), Fake(v.shape, "bf16"))

    before = len(finds)
    for _ in range(3):
        fa.backward_into(*backward_tensors(), causal=True)
    assert len(finds) == before + 1, "backward: %d lookups for 3 calls" % (len(finds) - before)
    assert all(l[1] == 0 for l in launched[-3:]), launched[-3:]
    assert len({l[0] for l in launched[-3:]}) == 3, "backward structs kept old addresses"
    print("ok backward: 3 calls, 1 kernel lookup, each struct passes the runtime's check with "
          "its own addresses")
    attention_plans(fa, bundle, finds, launched, forward_tensors, backward_tensors)
    split_kv(args, fa, launched)
    packed_gqa(args, fa, launched)
    split_kv_mods(args, fa, launched)
    print("RESULT: launch plans passed")


def attention_plans(fa, bundle, finds, launched, forward_tensors, backward_tensors):
    """fa.attention's own forward and backward (fa._forward, fa._backward):
    one plan per layout and options, outputs allocated per call, and the
    backward's delta and dq_accum in one workspace allocation, each struct
    passing the runtime's GPU-free check (which rejects overlapping tensors;
    that each lies inside its allocation is the launch's check, on a GPU)."""
    from fa import _runtime as rt
    mask_args = (True, False, None)
    before, outputs = len(finds), []
    for _ in range(3):
        q, k, v, _, _ = forward_tensors()
        o, lse = fa._forward(q, k, v, bundle, mask_args, None, None, None)
        outputs.append((o, lse))
        struct, status, error, fn, extra = launched[-1]
        assert status == 0, error
        assert fn is bundle.lib.fa_attention_forward and extra == ()
        made = rt.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)], 1 / 8)
        assert struct == bytes(made), "fa._forward's struct differs from a fresh one"
    assert len(finds) == before + 1, "fa._forward: %d lookups for 3 calls" % (
        len(finds) - before)
    assert len({id(o) for o, _ in outputs}) == 3, "fa._forward reused an output"
    assert outputs[0][0].shape == (2, 4, 100, 64) and outputs[0][1].shape == (2, 4, 100)
    q, k, v, _, _ = forward_tensors()
    strided = Fake(q.shape, "bf16", strides=(4 * 100 * 64, 64, 4 * 64, 1))
    try:
        fa._forward(strided, k, v, bundle, mask_args, None, None, None)
        raise AssertionError("fa._forward launched a non-contiguous q with a contiguous plan")
    except fa.FaError as e:
        assert "contiguous" in str(e), e
    print("ok fa._forward: 3 calls, 1 kernel lookup, fresh outputs, each struct equals a fresh "
          "one; a strided q gets its own plan and is rejected")

    before = len(finds)
    for _ in range(3):
        q, k, v, o, do, lse, _, _, _ = backward_tensors()
        dq, dk, dv = fa._backward(q, k, v, o, do, lse, bundle, mask_args, None, False, None)
        struct, status, error, fn, _ = launched[-1]
        assert status == 0, error
        args = rt.BackwardArgs.from_buffer_copy(struct)
        assert (args.dq.data, args.dk.data, args.dv.data) == (
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
        rows = 2 * 4 * 100
        assert args.delta.data % 512 == 0 and tuple(args.delta.shape[:3]) == (2, 4, 100)
        gap = args.dq_accum.data - args.delta.data
        assert gap >= rows * 4 and gap % 256 == 0, gap
        assert tuple(args.dq_accum.shape) == (2, 4, 100, 64) and args.dq_accum.dtype == 2
    assert len(finds) == before + 1, "fa._backward: %d lookups for 3 calls" % (
        len(finds) - before)
    print("ok fa._backward: 3 calls, 1 kernel lookup; delta and dq_accum in one workspace "
          "(dq_accum %d bytes after delta), the runtime's check passes" % gap)


SPLIT = ', "merge": {"name": "fa_merge_split", "threads": 128, "shared_bytes": 0}}, ' \
    '"split_kv": true'


def fake_decode_bundle(fa, args, d, version, kernels):
    """A bundle of bf16 d128 forwards (tag, text closing the entries and
    adding fields[, the score_mod's JSON]) whose PTX is never loaded (the
    launches are checks)."""
    kernel = lambda tag, extra, mod="null": (
        '{"tag": "%s", "direction": "fwd", "dtype": "bf16", "head_dim": 128, '
        '"head_dim_v": 128, "block_q": 64, "block_kv": 64, "warps": 4, "stages": 2, '
        '"mask": "none", "window_left": -1, "window_right": -1, "score_mod": %s, '
        '"target": "sm_90a", "ptx": "%s.ptx", "entries": {"fwd": {"name": "fa_fwd_%s", '
        '"threads": 128, "shared_bytes": 87040}%s}' % (tag, mod, tag, tag, extra))
    manifest = ('{"format": "fa-bundle", "version": %d, "compiler": "test", "kernels": [%s]}'
                % (version, ", ".join(kernel(*k) for k in kernels)))
    open(os.path.join(d, "manifest.json"), "w").write(manifest)
    for tag, *_ in kernels:
        open(os.path.join(d, tag + ".ptx"), "w").write("// not loaded: checks only\n")
    return fa.Bundle(d, args.lib, False, None)


def packed_gqa(args, fa, launched):
    """fa.attention's forward takes the packed-GQA split kernel for GQA
    decode (any split count, chosen per key head), the unpacked split kernel
    for MHA, and the plain forward where Nq fills a tile."""
    import tempfile
    d = tempfile.mkdtemp(prefix="fa_plans_packgqa_")
    packed_split = SPLIT.replace("fa_merge_split", "fa_merge_psplit") + ', "pack_gqa": true'
    packed_16 = (SPLIT.replace("fa_merge_split", "fa_merge_psplit16") +
                 ', "pack_gqa": true, "block_q": 16, "warps": 1')
    bundle = fake_decode_bundle(fa, args, d, 7, [("plain", "}"), ("split", SPLIT),
                                                 ("psplit", packed_split),
                                                 ("psplit16", packed_16)])
    tags = {}
    for i in range(bundle.lib.fa_bundle_kernel_count(bundle._handle)):
        info = bundle._info(bundle.lib.fa_bundle_kernel_at(bundle._handle, i))
        tags[bundle.lib.fa_bundle_kernel_at(bundle._handle, i)] = info["tag"]

    kernels, checked = [], fa._launch

    def recording_launch(lib_, fn, kernel, struct, t, *extra):
        kernels.append(tags[kernel.value if hasattr(kernel, "value") else kernel])
        return checked(lib_, fn, kernel, struct, t, *extra)

    fa._launch = recording_launch

    def run(b, h, hkv, nq, nk):
        q = Fake((b, h, nq, 128), "bf16")
        k, v = Fake((b, hkv, nk, 128), "bf16"), Fake((b, hkv, nk, 128), "bf16")
        fa._forward(q, k, v, bundle, (False, False, None), None, None, None)
        _, status, error, fn, extra = launched[-1]
        assert status == 0, error
        return kernels[-1], extra

    # 8 key heads x 1 tile: 264 / 8 = 33 splits, at most 32 of 4 key blocks
    # (the unpacked kernel: 8). A key head's 4 rows fit the 16-row tile.
    tag, extra = run(1, 32, 8, 1, 8192)
    assert tag == "psplit16" and extra[2] == 32, (tag, extra)
    assert extra[1] == 32 * 4 * 32 * (128 + 1), extra
    # 17 x 256: 136 packed CTAs fill the 132 SMs; packed, one split (the
    # stand-ins are 16 MiB apart, so the keys stay short).
    tag, extra = run(17, 32, 8, 1, 256)
    assert tag == "psplit16" and extra[2] == 1, (tag, extra)
    # 16 queries of 4 heads: one 64-row tile rather than four of 16.
    tag, extra = run(1, 32, 8, 16, 8192)
    assert tag == "psplit", (tag, extra)
    # MHA and a full query tile keep the unpacked kernels.
    tag, extra = run(1, 8, 8, 1, 8192)
    assert tag == "split" and extra[2] == 32, (tag, extra)
    tag, extra = run(1, 32, 8, 64, 8192)
    assert tag == "split" and extra[2] == 8, (tag, extra)
    fa._launch = checked
    print("ok packed GQA: 1 x 8k at 32/8 runs the 16-row packed split kernel with 32 splits, "
          "17 x 256 with 1, 16 queries the 64-row one; MHA and Nq = 64 keep the unpacked "
          "split kernel")


def split_kv(args, fa, launched):
    """fa.attention's forward (fa._forward) takes a bundle's split-KV kernel
    where fa_splitkv_choose picks more than one split, with a workspace of
    fa_splitkv_workspace_bytes, and the plain kernel where the plain grid
    fills the 132 SMs."""
    import tempfile
    d = tempfile.mkdtemp(prefix="fa_plans_splitkv_")
    bundle = fake_decode_bundle(fa, args, d, 6, [("plain", "}"), ("split", SPLIT)])

    def run(b, nk):
        q = Fake((b, 32, 1, 128), "bf16")
        k, v = Fake((b, 8, nk, 128), "bf16"), Fake((b, 8, nk, 128), "bf16")
        fa._forward(q, k, v, bundle, (False, False, None), None, None, None)
        _, status, error, fn, extra = launched[-1]
        assert status == 0, error
        return fn, extra

    fn, extra = run(1, 8192)
    assert fn is bundle.lib.fa_attention_forward_splitkv, "1 x 8k did not split"
    workspace, nbytes, splits = extra
    assert splits == 8 and nbytes == 8 * 4 * 32 * (128 + 1), extra
    assert workspace % 16 == 0
    fn, extra = run(8, 1024)  # (the stand-ins are 16 MiB apart)
    assert fn is bundle.lib.fa_attention_forward and extra == (), "8 x 1k split"
    print("ok split-KV: 1 x 8k runs 8 splits with a %d-byte workspace, the runtime's check "
          "passes; 8 x 1k (256 CTAs) runs the plain forward" % nbytes)


def split_kv_mods(args, fa, launched):
    """A decode with a score_mod reading a tensor takes the bundle's split-KV
    kernel with that score_mod (fa_attention_forward_splitkv_ex, the call's
    mod_args after the split count), the plain forward with it where the
    grid is full, and a wrong mod_args count is refused naming what the
    split kernel reads."""
    import tempfile
    d = tempfile.mkdtemp(prefix="fa_plans_splitkv_mods_")
    # Unstrided kernels: the mod_args follow the 11 parameters of fa_fwd
    # (a split kernel's split count too).
    reads = ', "mod_args": [{"dtype": "f32", "rank": 1, "dims": ["heads"]}], "mod_arg_param": '
    bundle = fake_decode_bundle(fa, args, d, 8, [
        ("plain", "}"), ("split", SPLIT),
        ("plain_alibi", "}" + reads + "11", '"alibi_slopes"'),
        ("split_alibi", SPLIT + reads + "12", '"alibi_slopes"')])
    tags = {bundle.lib.fa_bundle_kernel_at(bundle._handle, i):
            bundle._info(bundle.lib.fa_bundle_kernel_at(bundle._handle, i))["tag"]
            for i in range(bundle.lib.fa_bundle_kernel_count(bundle._handle))}
    slopes = Fake((32,), "float32")

    def run(b, nk, mod_args=(slopes,)):
        q = Fake((b, 32, 1, 128), "bf16")
        k, v = Fake((b, 8, nk, 128), "bf16"), Fake((b, 8, nk, 128), "bf16")
        fa._forward(q, k, v, bundle, (False, False, None), None, None, "alibi_slopes",
                    mod_args)
        _, status, error, fn, extra = launched[-1]
        assert status == 0, error
        return fn, extra

    fn, extra = run(1, 8192)
    assert fn is bundle.lib.fa_attention_forward_splitkv_ex, "1 x 8k with ALiBi did not split"
    _, nbytes, splits, mods, count = extra
    assert splits == 8 and count == 1 and mods[0].data == slopes.data_ptr(), extra
    fn, extra = run(8, 1024)
    assert fn is bundle.lib.fa_attention_forward_ex and extra[-1] == 1, "8 x 1k with ALiBi"
    try:
        run(1, 4096, mod_args=())
        raise AssertionError("a split decode without its mod_args was launched")
    except fa.FaError as e:
        refused = str(e)
    assert "reads 1 tensors (f32 ['heads'])" in refused, refused
    assert set(tags.values()) >= {"split_alibi", "plain_alibi"}
    print("ok split-KV with a score_mod: 1 x 8k runs split_alibi's %d splits through the _ex "
          "launch with the slopes; 8 x 1k its plain forward; no mod_args: %s"
          % (splits, refused[:90]))


if __name__ == "__main__":
    main()
