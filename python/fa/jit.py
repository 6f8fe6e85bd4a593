"""Kernels the loaded bundles lack, compiled on first use by fa's compiler.

A query that no loaded bundle answers becomes a kernel config
("fwd:bf16:d96:causal:sm_90a", docs/ABI.md) that `fa-aot` compiles into a
one-kernel bundle under the disk cache:

    $FA_CACHE_DIR, else $XDG_CACHE_HOME/fa, else ~/.cache/fa
      jit/<hash of `fa-aot --version`>/<config>[-mods-<hash>]/manifest.json ...
      jit/compilers/<hash of fa-aot's path, inode, size, mtime>: its --version
      mods/<traced names>.mlir: the libraries of Python score_/mask_mods (fa.mods)

`fa-aot --version` names the compiler's build (fa-aot and the LLVM it was
built with), so a rebuilt compiler compiles into a new directory and never
serves kernels of an older one. fa-aot writes into a temporary directory
beside the entry, which is renamed into place whole: a process sees either no
entry or a complete one, and of two processes that compile the same config at
once the first rename wins and the other's copy is dropped.

The compiler is, in this order: $FA_AOT, fa-aot installed in the package
(fa/bin/fa-aot), a build directory of this checkout, `fa-aot` on PATH. With
none, the error names the config and the exact fa-aot command that builds it.
"""
import hashlib
import os
import shutil
import subprocess
import tempfile

from ._runtime import CHECKOUT_DIR, MASK_NAMES, PACKAGE_DIR, FaError

NOT_FOUND = 2

_versions = {}  # "path|inode|size|mtime" -> `fa-aot --version` output


def find_compiler():
    """The fa-aot to compile with, or None."""
    env = os.environ.get("FA_AOT")
    if env:
        if not os.access(env, os.X_OK):
            raise FaError(NOT_FOUND, "fa: FA_AOT is %r, which is not an executable fa-aot" % env)
        return env
    candidates = [os.path.join(PACKAGE_DIR, "bin", "fa-aot")]
    if CHECKOUT_DIR:
        candidates += [os.path.join(CHECKOUT_DIR, d, "bin", "fa-aot")
                       for d in sorted(os.listdir(CHECKOUT_DIR)) if d.startswith("build")]
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("fa-aot")


def compiler_version(path):
    """`fa-aot --version` of the compiler at `path`, asked once per build of
    that file: remembered in this process and, under the cache, across
    processes (keyed by the file's identity, size and modification time)."""
    st = os.stat(path)
    key = "%s|%d|%d|%d" % (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    version = _versions.get(key)
    if version is not None:
        return version
    memo = os.path.join(cache_root(), "jit", "compilers", _digest(key))
    try:
        with open(memo) as f:
            version = f.read().strip()
    except OSError:
        version = None
    if not version:
        run = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        version = run.stdout.strip()
        if run.returncode != 0 or not version:
            raise FaError(NOT_FOUND, "fa: %s --version failed (exit %d): %s"
                          % (path, run.returncode, run.stderr.strip()))
        _write_atomically(memo, version + "\n")
    _versions[key] = version
    return version


def _write_atomically(path, text):
    """Best effort: a cache that cannot be written is asked again next time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".writing-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


def cache_root():
    if os.environ.get("FA_CACHE_DIR"):
        return os.environ["FA_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fa")


# (D, Dv) of the sm_90a wgmma kernels (resolveWgmmaPlan), where they beat
# mma.sync (PERF.md: the forwards at 96, 256 and 192/128 run 2-3x faster,
# the d96 backward 1.7-2x; the split-role backwards at 256 and 192/128).
WGMMA_HEAD_DIMS = {"fwd": {(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)},
                   "bwd": {(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)}}


def target_name(capability):
    """sm_90a for Hopper (its wgmma kernels need the 'a' target), else sm_XY."""
    return "sm_90a" if capability == 90 else "sm_%d" % capability


def config_text(direction, dtype_name, head_dim, head_dim_v, mask, window, capability,
                mma_name="any", deterministic=False, score_mod=None, mask_mod=None,
                tf32=False, descale_block=0, wide_rows=False):
    """The fa-aot config of a kernel query, or FaError naming what no config
    can express. mma 'any' takes wgmma where the compiler has it (sm_90a;
    WGMMA_HEAD_DIMS; bf16 and f16: f32 kernels, forward and backward, are
    mma.sync only, and an f32 query that forces wgmma has no config) as the
    runtime prefers it there. tf32 (f32 only) adds the field 'tf32': one
    TF32 MMA per product instead of the f32-accurate three. descale_block 64
    (f8e4m3 only) adds the field 'blockscale': Q and K descales per 64-row
    block instead of per head. wide_rows (a dense batch without sinks or a
    block mask; varlen too) gives the d64 wgmma backward under no mask or a
    causal one its 128-row query tiles, as --defaults has them ('bq128')."""
    fields = ["bwd" if direction else "fwd", dtype_name, "d%d" % head_dim]
    if head_dim_v and head_dim_v != head_dim:
        fields.append("v%d" % head_dim_v)
    mask_name = mask if isinstance(mask, str) else MASK_NAMES[mask]
    fields.append(mask_name)
    # A window compiles without its sizes: one kernel takes every window
    # (-1: unbounded side) at run time.
    dims = (head_dim, head_dim_v or head_dim)
    wgmma_fits = (capability == 90 and dtype_name != "f32"
                  and dims in WGMMA_HEAD_DIMS["bwd" if direction else "fwd"])
    mma = mma_name if mma_name != "any" else ("wgmma" if wgmma_fits else "mma_sync")
    if dtype_name == "f32" and mma != "mma_sync":
        raise FaError(6, "fa: float32 kernels are mma.sync only; there is no %s %s f32 "
                         "kernel (pass mma=None or 'mma_sync')"
                      % (mma, "backward" if direction else "forward"))
    fields.append(mma)
    if (wide_rows and direction and mma == "wgmma" and dims == (64, 64)
            and dtype_name in ("bf16", "f16") and mask_name in ("none", "causal")
            and not (deterministic or score_mod or mask_mod)):
        fields.append("bq128")
    if deterministic:
        fields.append("det")
    fields.append(target_name(capability))
    if score_mod:
        fields.append("mod=" + score_mod)
    if mask_mod:
        fields.append("maskmod=" + mask_mod)
    if tf32 and dtype_name == "f32":
        fields.append("tf32")
    if descale_block and dtype_name == "f8e4m3":
        fields.append("blockscale")
    return ":".join(fields)


def decode_config(dtype_name, head_dim, head_dim_v, mask, window, capability, packed,
                  rows=None, score_mod=None, mask_mod=None):
    """The fa-aot config of a split-KV decode forward (packed GQA when
    `packed`, for rows = (query heads per key head, queries)), with the
    score_mod and mask_mod of these names. On sm_90a without a mask,
    bf16/f16 and D = Dv in {64, 128}, the packed kernels of --defaults: a
    producer warp loading K/V by TMA, a 16-row tile of one consumer warp
    where a key head's rows fit it, else 32 rows of two (groups of at most
    32 heads). Elsewhere the compiler's split kernel."""
    fields = [config_text(0, dtype_name, head_dim, head_dim_v, mask, window, capability,
                          "mma_sync", score_mod=score_mod, mask_mod=mask_mod)]
    if packed:
        fields.append("packgqa")
    fields.append("splitkv")
    group, nq = rows or (0, 0)
    mask_name = mask if isinstance(mask, str) else MASK_NAMES[mask]
    tma = (packed and capability == 90 and mask_name == "none" and dtype_name in ("bf16", "f16")
           and head_dim in (64, 128) and head_dim_v in (0, head_dim) and 0 < group <= 32)
    if tma:
        fields.append("bq16:w1" if group * nq <= 16 else "bq32:w2")
        fields.append("pw:tma")
    return ":".join(fields)


def aot_command(compiler, config, out_dir, score_mods=None):
    cmd = [compiler or "fa-aot", "--config", config, "-o", out_dir]
    if score_mods:
        cmd += ["--score-mods", score_mods]
    return cmd


def _digest(text):
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def entry_dir(version, config, score_mods=None):
    """The cache entry of `config` compiled by the compiler of `version`."""
    name = config.replace(":", "-")
    if score_mods:
        with open(score_mods, "rb") as f:
            name += "-mods-" + _digest(f.read())
    return os.path.join(cache_root(), "jit", _digest(version), name)


def missing_message(config, score_mods=None):
    cmd = " ".join(aot_command("fa-aot", config, "<dir>", score_mods))
    return ("no loaded bundle has it and fa's compiler is not installed here (no $FA_AOT, no "
            "fa-aot in the package, a build directory or PATH); build it with\n  %s\n"
            "and load <dir> too (fa.load([bundle, '<dir>'])), or set FA_AOT to an fa-aot"
            % cmd)


def compile_bundle(config, score_mods=None):
    """The directory of a bundle holding `config`: from the disk cache, else
    compiled now. FaError when there is no compiler or it fails."""
    compiler = find_compiler()
    if compiler is None:
        raise FaError(NOT_FOUND, "fa: kernel %s: %s" % (config, missing_message(config,
                                                                                  score_mods)))
    entry = entry_dir(compiler_version(compiler), config, score_mods)
    if os.path.exists(os.path.join(entry, "manifest.json")):
        return entry
    parent = os.path.dirname(entry)
    os.makedirs(parent, exist_ok=True)
    _write_atomically(os.path.join(parent, "version.txt"), compiler_version(compiler) + "\n")
    work = tempfile.mkdtemp(prefix=".compiling-", dir=parent)
    try:
        out = os.path.join(work, "bundle")
        cmd = aot_command(compiler, config, out, score_mods)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise FaError(NOT_FOUND, "fa: compiling kernel %s failed (%s, exit %d):\n%s"
                          % (config, " ".join(cmd), run.returncode,
                             (run.stderr or run.stdout).strip()))
        try:
            os.rename(out, entry)
        except OSError:
            # Another process renamed its copy first; theirs is complete.
            if not os.path.exists(os.path.join(entry, "manifest.json")):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return entry
