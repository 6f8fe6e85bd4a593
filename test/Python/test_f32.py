#!/usr/bin/env python3
"""float32 attention without a GPU (Debian's CPU PyTorch): the kernel query
fa.attention makes for float32 inputs (dtype f32, allow_tf32 from its
argument, else torch.backends.cuda.matmul.allow_tf32), the fa-aot configs
it compiles on a miss (fwd:f32:dD:MASK and bwd:f32:dD:MASK, ':tf32' where
TF32 is allowed, mma.sync even where bf16 takes wgmma, no split-KV decode),
the runtime's choice between a bundle's TF32 and f32-accurate kernels and
its GPU-free check of the launch, and the backward of a float32 call: its
kernel looked up (and compiled on a miss) like any other with the TF32
choice of its forward, even where torch's switch changed in between; a
miss that cannot be compiled is the runtime's FaError at loss.backward().

fa-aot is a stand-in that logs each config and fails it, except those of
head dim 96, for which it writes a one-kernel manifest (the compiler's f32
kernels are tested on the GPU, test/gpu/test_f32.py); the launch is
replaced by the runtime's GPU-free check and a record of the kernel.

    test_f32.py --lib build/lib/libfa_runtime.so --bundle build/test/Runtime/fixture-bundle
"""
import argparse
import ctypes
import inspect
import json
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
os.environ["FA_TORCH_EXT"] = "0"

import torch  # noqa: E402

import fa  # noqa: E402
from fa import jit  # noqa: E402
from fa._runtime import BWD, FWD  # noqa: E402
from support import expect_error  # noqa: E402

CAPABILITY = [90]  # what the patched fa._capability answers
launched = []  # (entry point, kernel tag) of each launch


def kernel(tag, direction, d, mask, tf32):
    """A manifest entry of an f32 mma.sync kernel (the runtime reads only
    the manifest here)."""
    entries = ({"fwd": {"name": "fa_fwd_" + tag, "threads": 128, "shared_bytes": 65536}}
               if direction == "fwd" else
               {e: {"name": "fa_%s_%s" % (e, tag), "threads": 256, "shared_bytes": 0}
                for e in ("bwd_pre", "bwd", "bwd_post")})
    return {"tag": tag, "direction": direction, "dtype": "f32", "head_dim": d,
            "head_dim_v": d, "block_q": 64, "block_kv": 64, "warps": 4, "stages": 2,
            "mask": mask, "window_left": -1, "window_right": -1, "score_mod": None,
            "target": "sm_90a", "entries": entries, "ptx": tag + ".ptx",
            "stride_param": 11 if direction == "fwd" else 15, "tf32": tf32}


def f32_bundle(work):
    """d64: TF32 and accurate forwards without a mask, a TF32 one only for
    causal_bottom_right, no backward; d128: an accurate and a TF32 forward
    and backward."""
    kernels = [kernel("f32_none", "fwd", 64, "none", False),
               kernel("f32_none_tf32", "fwd", 64, "none", True),
               kernel("f32_cbr_tf32", "fwd", 64, "causal_bottom_right", True),
               kernel("f32_d128", "fwd", 128, "none", False),
               kernel("f32_d128_tf32", "fwd", 128, "none", True),
               kernel("f32_d128_bwd", "bwd", 128, "none", False),
               kernel("f32_d128_bwd_tf32", "bwd", 128, "none", True)]
    return write_bundle(os.path.join(work, "f32-bundle"), kernels)


def write_bundle(directory, kernels):
    os.makedirs(directory)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump({"format": "fa-bundle", "version": 7, "compiler": "test",
                   "kernels": kernels}, f)
    return directory


# The stand-in fa-aot (run by this interpreter): logs the config of each
# compile; builds the f32 configs of head dim 96 as a manifest of one kernel
# (tag: the config, ':' -> '_'; tf32 as its field); fails every other.
FAKE_AOT = """#!%(python)s
import json, os, sys
%(helpers)s
if sys.argv[1] == "--version":
    print("fake fa-aot")
    sys.exit(0)
config, out = sys.argv[2], sys.argv[4]
with open(%(log)r, "a") as f:
    f.write(config + "\\n")
fields = config.split(":")
if fields[1:3] != ["f32", "d96"]:
    sys.exit("fake fa-aot builds nothing")
write_bundle(out, [kernel(config.replace(":", "_"), fields[0], 96, fields[3],
                          "tf32" in fields)])
"""


def fake_compiler(work):
    """The stand-in fa-aot (FAKE_AOT) and the log of its compiles."""
    path, log = os.path.join(work, "fa-aot"), os.path.join(work, "compiles.log")
    with open(path, "w") as f:
        f.write(FAKE_AOT % {"python": sys.executable, "log": log,
                            "helpers": inspect.getsource(kernel) + "\n\n" +
                            inspect.getsource(write_bundle)})
    os.chmod(path, 0o755)
    return path, log


def compiled(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().split()


def checked_launch(lib, fn, kernel, args, t, *extra):
    """fa._launch without a GPU: the runtime's check of the struct (real CPU
    addresses: alignment and overlaps are real), then a record."""
    name = fn.__name__
    check = {"fa_attention_forward": lib.fa_attention_forward_check,
             "fa_attention_backward": lib.fa_attention_backward_check}[name]
    status = check(kernel, ctypes.byref(args))
    assert status == 0, lib.fa_last_error().decode()
    info = fa.KernelInfo()
    assert lib.fa_kernel_get_info(kernel, ctypes.byref(info)) == 0
    launched.append((name, info.tag.decode()))


def qkv(d=64, dtype=torch.float32, nq=16, nk=40, grad=False):
    return [torch.randn(1, 2, n, d, dtype=dtype, requires_grad=grad) for n in (nq, nk, nk)]


def check_config_text():
    none = (-1, -1)
    assert jit.config_text(0, "f32", 64, 0, "none", none, 90) == "fwd:f32:d64:none:mma_sync:sm_90a"
    assert jit.config_text(0, "f32", 64, 0, "causal", none, 80, tf32=True) == \
        "fwd:f32:d64:causal:mma_sync:sm_80:tf32"
    # bf16 keeps wgmma at d64 on sm_90 and has no 'tf32' field.
    assert jit.config_text(0, "bf16", 64, 0, "none", none, 90, tf32=True) == \
        "fwd:bf16:d64:none:wgmma:sm_90a"
    print("ok jit.config_text: f32 configs are mma.sync, 'tf32' only on f32")


def check_jit_configs(b, log):
    """fa.attention on float32 misses: the runtime's message names the query
    (dtype f32, '(tf32 allowed)' for allow_tf32 = 1) and fa-aot gets the
    config; one compile per miss (no split-KV decode config for f32)."""
    matmul = torch.backends.cuda.matmul
    cases = [(dict(allow_tf32=True), False, 90, "fwd:f32:d32:none:mma_sync:sm_90a:tf32"),
             (dict(allow_tf32=False), True, 90, "fwd:f32:d32:none:mma_sync:sm_90a"),
             (dict(), True, 90, "fwd:f32:d32:none:mma_sync:sm_90a:tf32"),
             (dict(allow_tf32=None), False, 90, "fwd:f32:d32:none:mma_sync:sm_90a"),
             (dict(causal=True), True, 80, "fwd:f32:d32:causal:mma_sync:sm_80:tf32"),
             (dict(causal_bottom_right=True), False, 90,
              "fwd:f32:d32:causal_bottom_right:mma_sync:sm_90a"),
             (dict(window=(16, 0), allow_tf32=True), False, 90,
              "fwd:f32:d32:window:mma_sync:sm_90a:tf32")]
    for kwargs, flag, cap, config in cases:
        matmul.allow_tf32, CAPABILITY[0] = flag, cap
        before = compiled(log)
        q, k, v = qkv(32)
        err = expect_error(lambda: fa.attention(q, k, v, bundle=b, **kwargs),
                           "compiling kernel %s failed" % config)
        tf32 = config.endswith(":tf32")
        assert "no kernel for fwd f32 d=32 dv=32" in err, err
        assert ("(tf32 allowed)" in err) == tf32, (kwargs, flag, err)
        assert compiled(log) == before + [config], (compiled(log), config)
    matmul.allow_tf32, CAPABILITY[0] = False, 90
    print("ok float32 misses compile %d configs, ':tf32' as allow_tf32 or "
          "torch.backends.cuda.matmul.allow_tf32 says" % len(cases))


def check_bundle_choice(b, f32_only, log):
    """A bundle's TF32 kernel where allowed, else its accurate one; the
    runtime's check takes the float32 struct; bf16 ignores allow_tf32."""
    matmul = torch.backends.cuda.matmul
    for kwargs, flag, tag in ((dict(allow_tf32=True), False, "f32_none_tf32"),
                              (dict(allow_tf32=False), True, "f32_none"),
                              (dict(), True, "f32_none_tf32"),
                              (dict(), False, "f32_none")):
        matmul.allow_tf32 = flag
        del launched[:]
        o = fa.attention(*qkv(64), bundle=b, **kwargs)
        assert launched == [("fa_attention_forward", tag)], (kwargs, flag, launched)
        assert o.dtype == torch.float32 and o.shape == (1, 2, 16, 64), o
    matmul.allow_tf32 = False
    k = b.find(FWD, torch.float32, 64, 64, "none", (-1, -1), 90, allow_tf32=True)
    info = b._info(k)
    assert info["tf32"] and info["dtype"] == "f32" and info["tag"] == "f32_none_tf32", info
    assert not b._info(b.find(FWD, "f32", 64, 64, "none", (-1, -1), 90))["tf32"]
    del launched[:]
    fa.attention(*qkv(64, torch.bfloat16), bundle=b, allow_tf32=True)
    assert launched == [("fa_attention_forward", "fixture_bf16_d64_none_fwd")], launched
    # Only a TF32 kernel, TF32 refused: the runtime says so, then fa-aot is
    # asked for the accurate kernel (mma.sync at d64 on sm_90, unlike bf16).
    before = compiled(log)
    expect_error(lambda: fa.attention(*qkv(64), bundle=f32_only, allow_tf32=False,
                                      causal_bottom_right=True),
                 "the bundle has a TF32 kernel for it (fa_kernel_info.tf32), but the "
                 "query's allow_tf32 is 0",
                 "compiling kernel fwd:f32:d64:causal_bottom_right:mma_sync:sm_90a failed")
    assert compiled(log) == before + ["fwd:f32:d64:causal_bottom_right:mma_sync:sm_90a"]
    del launched[:]
    fa.attention(*qkv(64), bundle=f32_only, allow_tf32=True, causal_bottom_right=True)
    assert launched == [("fa_attention_forward", "f32_cbr_tf32")], launched
    print("ok a bundle's TF32 kernel where allowed, its accurate one otherwise; bf16 "
          "ignores allow_tf32")


def check_backward(b, log):
    """A float32 call that needs a backward: no refusal; its kernel is the
    runtime's for the query with the forward's TF32 choice (allow_tf32, or
    torch's switch as it was at the forward), from a bundle where one has
    it, else compiled: bwd:f32:dD:MASK:mma_sync:TARGET[:tf32]. A compile
    that fails is the runtime's FaError (and fa-aot's) at loss.backward();
    a forced wgmma has no f32 config (nothing compiled)."""
    matmul = torch.backends.cuda.matmul
    before = compiled(log)
    # (kwargs, torch's switch at the forward, at the backward, tag suffix)
    modes = [(dict(allow_tf32=True), False, False, "_tf32"),
             (dict(allow_tf32=False), True, True, ""),
             (dict(), True, False, "_tf32"),
             (dict(), False, True, "")]
    for kwargs, fwd_flag, bwd_flag, mode in modes:
        del launched[:]
        q, k, v = qkv(128, grad=True)
        matmul.allow_tf32 = fwd_flag
        o = fa.attention(q, k, v, bundle=b, **kwargs)
        matmul.allow_tf32 = bwd_flag
        o.sum().backward()
        assert launched == [("fa_attention_forward", "f32_d128" + mode),
                            ("fa_attention_backward", "f32_d128_bwd" + mode)], (kwargs, launched)
        assert all(t.grad.dtype == torch.float32 and t.grad.shape == t.shape
                   for t in (q, k, v)), kwargs
    assert compiled(log) == before, compiled(log)
    print("ok float32 with grad: the bundle's backward of the forward's TF32 choice "
          "(allow_tf32, or torch's switch at the forward)")

    # Misses (the bundle has d64 forwards, no d64 backward): the forward
    # runs, the backward's config is compiled (and fails here).
    misses = [(dict(allow_tf32=False), True, True, "f32_none",
               "bwd:f32:d64:none:mma_sync:sm_90a"),
              (dict(allow_tf32=True), False, False, "f32_none_tf32",
               "bwd:f32:d64:none:mma_sync:sm_90a:tf32"),
              (dict(), True, False, "f32_none_tf32", "bwd:f32:d64:none:mma_sync:sm_90a:tf32"),
              (dict(), False, True, "f32_none", "bwd:f32:d64:none:mma_sync:sm_90a"),
              (dict(allow_tf32=True, causal_bottom_right=True), False, False, "f32_cbr_tf32",
               "bwd:f32:d64:causal_bottom_right:mma_sync:sm_90a:tf32")]
    for kwargs, fwd_flag, bwd_flag, fwd_tag, config in misses:
        del launched[:]
        before = compiled(log)
        q, k, v = qkv(64, grad=True)
        matmul.allow_tf32 = fwd_flag
        o = fa.attention(q, k, v, bundle=b, **kwargs)
        assert launched == [("fa_attention_forward", fwd_tag)], (kwargs, launched)
        matmul.allow_tf32 = bwd_flag
        err = expect_error(lambda: o.sum().backward(), "no kernel for bwd f32 d=64 dv=64",
                           "compiling kernel %s failed" % config, "fake fa-aot builds nothing")
        assert ("(tf32 allowed)" in err) == config.endswith(":tf32"), (kwargs, err)
        assert compiled(log) == before + [config], (compiled(log), config)
        assert q.grad is None and len(launched) == 1, launched
    matmul.allow_tf32 = False
    # backward_into: the same configs, window sizes at run time, det.
    q, k, v = qkv(64)
    o, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for kwargs, config in ((dict(allow_tf32=True), "bwd:f32:d64:none:mma_sync:sm_90a:tf32"),
                           (dict(allow_tf32=False, window=(8, 0)),
                            "bwd:f32:d64:window:mma_sync:sm_90a"),
                           (dict(causal=True, deterministic=True),
                            "bwd:f32:d64:causal:mma_sync:det:sm_90a")):
        before = compiled(log)
        expect_error(lambda: fa.backward_into(q, k, v, o, o, lse, *grads, bundle=b, **kwargs),
                     "compiling kernel %s failed" % config)
        assert compiled(log) == before + [config], (compiled(log), config)
    before = compiled(log)
    expect_error(lambda: fa.backward_into(q, k, v, o, o, lse, *grads, bundle=b, mma="wgmma"),
                 "no kernel for bwd f32 d=64 dv=64", "float32 kernels are mma.sync only")
    assert compiled(log) == before, compiled(log)
    with torch.no_grad():  # no backward wanted: none looked up
        fa.attention(*qkv(64, grad=True), bundle=b, allow_tf32=True)
    assert compiled(log) == before, compiled(log)
    print("ok float32 backward misses compile bwd:f32:dD:MASK:mma_sync:TARGET[:tf32] as "
          "the forward chose; their failure is the runtime's FaError at backward()")

    # Compiled on a miss (the stand-in builds d96): forward and backward of
    # the mode, loaded and launched; a second call compiles nothing.
    for allow, suffix in ((True, ":tf32"), (False, "")):
        configs = ["fwd:f32:d96:causal:mma_sync:sm_90a" + suffix,
                   "bwd:f32:d96:causal:mma_sync:sm_90a" + suffix]
        for again in (False, True):
            before = compiled(log)
            del launched[:]
            q, k, v = qkv(96, grad=True)
            fa.attention(q, k, v, bundle=b, allow_tf32=allow, causal=True).sum().backward()
            assert launched == [("fa_attention_forward", configs[0].replace(":", "_")),
                                ("fa_attention_backward", configs[1].replace(":", "_"))], \
                launched
            assert compiled(log) == before + ([] if again else configs), compiled(log)
            assert b._info(b.find(BWD, "f32", 96, 96,
                                  "causal", (-1, -1), 90, nk=40,
                                  allow_tf32=allow))["tf32"] == allow
    print("ok float32 forward and backward compiled on a miss (TF32 and accurate) and "
          "reused")


def check_torch_switch():
    """PyTorch 2.9's matmul fp32_precision where it exists (it reflects the
    legacy allow_tf32, whose getter raises once the new API was used)."""
    class Matmul:
        fp32_precision = "tf32"

        @property
        def allow_tf32(self):
            raise RuntimeError("mix of the legacy and new APIs")
    fake = types.SimpleNamespace(backends=types.SimpleNamespace(
        cuda=types.SimpleNamespace(matmul=Matmul())))
    assert fa._torch_allows_tf32(fake) is True
    for precision in ("ieee", "none"):
        Matmul.fp32_precision = precision
        assert fa._torch_allows_tf32(fake) is False, precision
    # Older PyTorch (this one): no fp32_precision, the legacy flag.
    for flag in (True, False):
        torch.backends.cuda.matmul.allow_tf32 = flag
        assert fa._torch_allows_tf32(torch) is flag
    torch.backends.cuda.matmul.allow_tf32 = False
    print("ok torch's TF32 switch: fp32_precision where PyTorch has it, else allow_tf32")


def check_arguments(b):
    expect_error(lambda: fa._dtype_code(torch.int8), "unsupported dtype torch.int8 "
                 "(expected float16, bfloat16, float32 or float8_e4m3fn)")
    expect_error(lambda: fa.attention(*qkv(64), bundle=b, allow_tf32="yes"),
                 "allow_tf32 is 'yes'; expected None (follow "
                 "torch.backends.cuda.matmul.allow_tf32), True or False")
    print("ok the dtype and allow_tf32 errors")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True)
    p.add_argument("--bundle", required=True)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="fa-f32-test-")
    aot, log = fake_compiler(work)
    os.environ["FA_AOT"], os.environ["FA_CACHE_DIR"] = aot, os.path.join(work, "cache")
    fa._capability = lambda t: CAPABILITY[0]
    fa._ext = False  # the Python path, whose launches checked_launch replaces
    fa._launch = checked_launch
    directory = f32_bundle(work)
    b = fa.Bundle([a.bundle, directory], lib_path=a.lib)
    f32_only = fa.Bundle(directory, lib_path=a.lib)
    check_config_text()
    check_torch_switch()
    check_arguments(b)
    check_jit_configs(b, log)
    check_bundle_choice(b, f32_only, log)
    check_backward(b, log)
    print("test_f32: ok")


if __name__ == "__main__":
    main()
