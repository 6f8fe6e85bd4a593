"""fa: FlashAttention kernels from an fa bundle, on PyTorch CUDA tensors.

    import fa
    fa.load("out/bundle")                    # manifest + libfa_runtime.so
    o = fa.attention(q, k, v, causal=True)   # q [B,H,Nq,D], k/v [B,Hkv,Nk,D]
    o.sum().backward()                       # backward kernels of the bundle
    o = fa.attention(q, k, v, causal=True, score_mod="softcap30")
                                             # kernels built with mod=softcap30

    fa.load()                                # no bundle: every kernel by JIT

Pure Python over the C ABI of libfa_runtime (ctypes); no compiled extension.
The forward takes q, k, v as any [B,H,N,D] views with a unit last stride
(e.g. x.view(B, N, H, D).transpose(1, 2) of a projection) without copying and
writes O in q's layout; where a kernel cannot take the strides (a bundle
before version 7, or TMA strides that are not multiples of 16 bytes on a
wgmma kernel) attention() copies to contiguous tensors instead. The backward
kernels take the same views (dQ, dK, dV come back in q's, k's, v's layouts).
Launches go on PyTorch's current stream of the tensors' device.
A kernel no loaded bundle has is compiled on first use where fa-aot is
installed and cached on disk (fa.jit). Under torch.compile, attention() is
the custom ops fa::attention_fwd / fa::attention_bwd (fa._torch_ops).
Every kernel can be captured in a CUDA graph (torch.cuda.graph, also forward
and backward together) once it has run eagerly, as PyTorch's warm-up does:
the first call loads the kernel's module. Replays reuse the captured tensors.
"""
import ctypes
import math
import os
import re
import sys

from . import jit, mods
from ._runtime import (BWD, DTYPE_NAMES, DTYPES, EXTENT_NAMES, FWD, MASK_NAMES, MASKS,
                       MAX_MOD_ARGS, MAX_RANK, MMA_NAMES, MMAS, FaError, BackwardArgs,
                       BlockMaskDesc, ForwardArgs, KernelInfo, KernelQuery, ModArgInfo,
                       QuantizeArgs, Tensor, check, open_library)

__all__ = ["load", "attention", "attention_varlen", "attention_with_kvcache",
           "forward_into", "backward_into", "block_mask", "BlockMask", "Bundle", "FaError",
           "quantize_fp8", "hadamard"]

_default = None
_bundles = []  # every Bundle made, by Bundle.id (the custom ops name bundles by it)
_NOT_IN_BUNDLE = (2, 6)  # FA_ERROR_NOT_FOUND, FA_ERROR_UNSUPPORTED
_MAX_PLANS = 4096


class Bundle:
    """Loaded bundles (a directory or a list of them, searched in order; none
    for JIT only). Kernel lookups and per-shape launch arguments are cached.
    With jit=True a kernel none of them has is compiled on first use
    (fa.jit); score_mod_file names the .mlir library of score_mod functions
    that JIT configs with a score_mod compile against (default
    $FA_SCORE_MODS)."""

    def __init__(self, bundle_dir=None, lib_path=None, jit=True, score_mod_file=None):
        # Let PyTorch create its CUDA context before the driver is touched
        # through this library, so both use the device's primary context.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.init()
        self.lib = open_library(lib_path)
        dirs = [] if bundle_dir is None else (
            [bundle_dir] if isinstance(bundle_dir, (str, bytes)) or hasattr(bundle_dir, "__fspath__")
            else list(bundle_dir))
        self.dirs = [str(d) for d in dirs]
        self.dir = self.dirs[0] if self.dirs else None
        self._handles = [self._load(d) for d in self.dirs]
        self._handle = self._handles[0] if self._handles else None
        self.jit = jit
        self.score_mod_file = score_mod_file
        self._cache = {}
        self._plans = {}
        self._decode_jit = {}  # (decode config, mods file) -> its compiled bundle's handle
        self.id = len(_bundles)
        _bundles.append(self)
        if torch is not None:
            _register_torch_ops()

    def _load(self, directory):
        handle = ctypes.c_void_p()
        check(self.lib, self.lib.fa_bundle_load(str(directory).encode(), ctypes.byref(handle)))
        return handle

    def __del__(self, _finalizing=sys.is_finalizing):
        # Interpreter shutdown may have torn down CUDA (and this module's
        # globals) already; the process exit releases the modules anyway.
        if _finalizing():
            return
        for handle in getattr(self, "_handles", ()):
            if handle:
                self.lib.fa_bundle_free(handle)
        self._handles = []

    def kernels(self):
        """Every kernel's configuration, as dicts (the loaded bundles' in
        order, then those compiled for this Bundle by JIT)."""
        out = []
        for handle in self._handles:
            for i in range(self.lib.fa_bundle_kernel_count(handle)):
                out.append(self._info(self.lib.fa_bundle_kernel_at(handle, i)))
        return out

    def _info(self, kernel):
        info = KernelInfo()
        check(self.lib, self.lib.fa_kernel_get_info(kernel, ctypes.byref(info)))
        return {
            "tag": info.tag.decode(), "target": info.target.decode(),
            "direction": "fwd" if info.direction == FWD else "bwd",
            "dtype": DTYPE_NAMES[info.dtype], "mask": MASK_NAMES[info.mask],
            "head_dim": info.head_dim, "head_dim_v": info.head_dim_v,
            "block_q": info.block_q, "block_kv": info.block_kv, "warps": info.warps,
            "stages": info.stages, "window_left": info.window_left,
            "window_right": info.window_right, "has_cubin": bool(info.has_cubin),
            "mma": MMA_NAMES.get(info.mma, str(info.mma)),
            "tensor_maps": info.tensor_map_count, "dsplit": info.dsplit,
            "deterministic": bool(info.deterministic),
            "persistent_grid": bool(info.persistent_grid),
            "score_mod": info.score_mod.decode() if info.score_mod else None,
            "split_kv": bool(info.split_kv), "pack_gqa": bool(info.pack_gqa),
            "strided": bool(info.strided), "mod_args": self._mod_args(kernel, info),
            "mask_mod": info.mask_mod.decode() if info.mask_mod else None,
            "varlen": bool(info.varlen), "block_sparse": bool(info.block_sparse),
            "sinks": bool(info.sinks), "paged": bool(info.paged),
            "kv_append": bool(info.kv_append), "tf32": bool(info.tf32),
            "descale_block": info.descale_block}

    def _mod_args(self, kernel, info):
        """The kernel's mod_args: [{"dtype", "dims"}], a dim a fixed size or
        a problem size's name ("heads", "nq+nk-1", "any")."""
        out = []
        for i in range(info.mod_arg_count):
            m = ModArgInfo()
            check(self.lib, self.lib.fa_kernel_get_mod_arg(kernel, i, ctypes.byref(m)))
            dims = [int(m.size[d]) if m.extent[d] == 1 else EXTENT_NAMES.get(m.extent[d], "?")
                    for d in range(m.rank)]
            out.append({"dtype": DTYPE_NAMES.get(m.dtype, str(m.dtype)), "dims": dims})
        return out

    def score_mods(self):
        """The names of the score_mods the bundle's kernels have, sorted."""
        return sorted({k["score_mod"] for k in self.kernels() if k["score_mod"]})

    def find(self, direction, dtype, head_dim, head_dim_v, mask, window, capability,
             mma=None, nk=0, deterministic=False, score_mod=None, mask_mod=None,
             sinks=False, allow_tf32=False, descale_block=0):
        """The kernel for this query; nk (keys, 0 if unknown) picks among tiles.
        dtype is a torch dtype or a name ('bf16', 'f16', 'f32'). deterministic=True
        takes only deterministic backward kernels (which the default search
        never returns). score_mod (a name, or None for plain attention) takes
        only kernels with exactly that score_mod; the FaError of a missing
        one lists those the bundle has. mask_mod (a name, a Python function
        (b, h, q_idx, kv_idx) -> bool, or None) likewise. A kernel no loaded
        bundle has is compiled (JIT) where fa-aot is installed. sinks=True
        takes only kernels with attention sinks (fa.sinks). allow_tf32=True
        lets a float32 query take a TF32 kernel (one TF32 product per
        multiply; preferred where a bundle has one, config field 'tf32' when
        compiled); False only f32-accurate ones. Ignored for other dtypes.
        descale_block (fp8 only): 0 takes kernels of per-head descales [B, Hkv],
        DESCALE_BLOCK (64) those of Q and K descales per 64-row block (config
        field 'blockscale' when compiled)."""
        code = _mma_code(mma)
        mod = _score_mod_name(score_mod)
        mask_mod = _mask_mod_name(mask_mod)
        key = (direction, dtype, head_dim, head_dim_v, mask, window, capability, code, nk,
               bool(deterministic), mod, mask_mod, bool(sinks), bool(allow_tf32),
               descale_block)
        kernel = self._cache.get(key)
        if kernel is None:
            q = KernelQuery(direction, _dtype_code(dtype), head_dim, head_dim_v, MASKS[mask],
                            window[0], window[1], capability, code,
                            None if mod is None else mod.encode(),
                            None if mask_mod is None else mask_mod.encode(),
                            int(bool(sinks)), int(bool(allow_tf32)), descale_block)
            kernel = self._search(q, nk, deterministic)
            if kernel is None:
                kernel = self._compile(q, nk, deterministic)
            self._cache[key] = kernel
        return kernel

    def find_block_sparse(self, dtype, head_dim, head_dim_v, capability, nk, mask_mod,
                          direction=FWD):
        """The loaded bundles' block-sparse forward (direction=BWD: backward)
        of `mask_mod` (a name or a Python function; fa-aot config field
        'blocksparse'), compiled (JIT) where none has one and fa-aot is
        installed; FaError naming what is missing otherwise."""
        mask_mod = _mask_mod_name(mask_mod)
        if mask_mod is None:
            raise FaError(1, "fa: a block mask needs a mask_mod (a Python function or the "
                             "name of one the bundle's block-sparse kernels were built with)")
        key = ("block_sparse", direction, dtype, head_dim, head_dim_v, capability, nk,
               mask_mod)
        if key not in self._cache:
            q = KernelQuery(direction, _dtype_code(dtype), head_dim, head_dim_v, MASKS["none"],
                            -1, -1, capability, _mma_code(None), None, mask_mod.encode())
            self._cache[key] = (self._search(q, nk, False, block_sparse=True) or
                                self._compile(q, nk, False, block_sparse=True))
        return self._cache[key]

    def find_splitkv(self, dtype, head_dim, head_dim_v, mask, window, capability, nk,
                     packed=False, sinks=False, rows=None, allow_tf32=False, score_mod=None,
                     mask_mod=None):
        """The loaded bundles' split-KV kernel for this forward (ranked as
        find ranks), else one compiled now for decode (jit.decode_config:
        packed, or fewer than 64 queries), or None.
        packed=True: the packed-GQA split-KV kernel instead, for rows =
        (query heads per key head, queries) when given (the tile that holds
        them best, fa_kernel_find_packed_gqa_rows); sinks=True: one with
        attention sinks (its merge joins them); allow_tf32, score_mod and
        mask_mod as for find."""
        return self._find_decode(dtype, head_dim, head_dim_v, mask, window, capability, nk,
                                 split=True, packed=packed, sinks=sinks, rows=rows,
                                 allow_tf32=allow_tf32, score_mod=_score_mod_name(score_mod),
                                 mask_mod=_mask_mod_name(mask_mod))

    def _compile_decode(self, query, nk, find, packed, rows):
        """The split-KV decode kernel of jit.decode_config for `query`,
        compiled now (or taken from the disk cache); None where this bundle
        set does not compile on demand, has no compiler, or the compiler
        cannot build it (the caller falls back to the plain forward)."""
        if not self.jit or jit.find_compiler() is None:
            return None
        if not packed and (rows is None or rows[1] >= 64):
            return None  # a query tile's worth of rows: the plain forward's grid
        if DTYPE_NAMES[query.dtype] == "f32":
            return None  # the compiler builds no f32 split-KV kernels yet
        mod = query.score_mod.decode() if query.score_mod else None
        mask_mod = query.mask_mod.decode() if query.mask_mod else None
        library = self._mod_library(mod, mask_mod)
        if (mod or mask_mod) and not library:
            return None  # the plain forward's search says what is missing
        config = jit.decode_config(DTYPE_NAMES[query.dtype], query.head_dim, query.head_dim_v,
                                   query.mask, (query.window_left, query.window_right),
                                   query.compute_capability, packed, rows, mod, mask_mod)
        if query.sinks:
            config += ":sinks"
        try:
            handle = self._decode_bundle(config, library)
        except FaError:
            return None
        return self._search(query, nk, handles=[handle], find=find)

    def _find_quantizer(self, dtype, head_dim):
        """(kernel, self): a loaded bundle's quantiser of `dtype` inputs at
        `head_dim` (an fp8 forward built with quant=<dtype>), else one
        compiled now where this bundle compiles on first use; None when
        neither."""
        key = ("quantize", dtype, head_dim)
        if key not in self._cache:
            code = _dtype_code(dtype)

            def find(handle):
                out = ctypes.c_void_p()
                status = self.lib.fa_kernel_find_quantize(handle, code, head_dim,
                                                          ctypes.byref(out))
                if status not in (0,) + _NOT_IN_BUNDLE:
                    check(self.lib, status)
                return out if status == 0 else None

            found = next((k for k in map(find, self._handles) if k is not None), None)
            if (found is None and self.jit and head_dim in (128, 256) and
                    jit.find_compiler() is not None):
                config = "fwd:f8e4m3:d%d:none:wgmma:quant=%s" % (head_dim, DTYPE_NAMES[code])
                found = find(self._decode_bundle(config))
            self._cache[key] = None if found is None else (found, self)
        return self._cache[key]

    def _mod_library(self, score_mod, mask_mod):
        """The .mlir library compiling the mods of these names takes: traced
        mods bring their functions; named ones need the user's library
        (score_mod_file, else $FA_SCORE_MODS). None where a named one has
        none."""
        return mods.library_for(score_mod, mask_mod, library=self.score_mod_file or
                                os.environ.get("FA_SCORE_MODS"))

    def _decode_bundle(self, config, score_mods=None):
        """The handle of the bundle of decode `config` (its mods from the
        .mlir file `score_mods`), compiled now (or taken from the disk cache)
        once per Bundle; FaError when it cannot be built."""
        handle = self._decode_jit.get((config, score_mods))
        if handle is None:
            directory = jit.compile_bundle(config, score_mods)
            handle = self._load(directory)
            self._handles.append(handle)
            self.dirs.append(directory)
            self._decode_jit[(config, score_mods)] = handle
        return handle

    def _loaded_handles(self):
        """The handles to search before compiling a decode kernel: every
        bundle but the decode ones compiled for other rows (another tile)."""
        jitted = {h.value for h in self._decode_jit.values()}
        return [h for h in self._handles if h.value not in jitted]

    def _find_decode(self, dtype, head_dim, head_dim_v, mask, window, capability, nk,
                     split, packed, sinks=False, rows=None, allow_tf32=False, score_mod=None,
                     mask_mod=None):
        key = ("decode", split, packed, dtype, head_dim, head_dim_v, mask, window,
               capability, nk, sinks, rows, bool(allow_tf32), score_mod, mask_mod)
        if key not in self._cache:
            q = KernelQuery(FWD, _dtype_code(dtype), head_dim, head_dim_v, MASKS[mask],
                            window[0], window[1], capability, _mma_code(None),
                            None if score_mod is None else score_mod.encode(),
                            None if mask_mod is None else mask_mod.encode())
            q.sinks = int(bool(sinks))
            q.allow_tf32 = int(bool(allow_tf32))
            if packed and rows:
                def find(handle, query, n, out):
                    return self.lib.fa_kernel_find_packed_gqa_rows(handle, query, rows[0],
                                                                   rows[1], n, int(split), out)
            elif packed:
                def find(handle, query, n, out):
                    return self.lib.fa_kernel_find_packed_gqa(handle, query, n, int(split), out)
            else:
                find = self.lib.fa_kernel_find_splitkv
            self._cache[key] = (self._search(q, nk, find=find, handles=self._loaded_handles())
                                or self._compile_decode(q, nk, find, packed, rows))
        return self._cache[key]

    def _search(self, query, nk, deterministic=False, handles=None, block_sparse=False,
                find=None):
        """The first loaded bundle's kernel for `query` (its block-sparse
        forward with block_sparse=True; `find`'s, a fa_kernel_find_* of the
        same arguments, when given); None when none has one, keeping the
        first bundle's (status, message) in self._miss for the error."""
        find = find or (self.lib.fa_kernel_find_block_sparse if block_sparse
                        else self.lib.fa_kernel_find_deterministic if deterministic
                        else self.lib.fa_kernel_find_for_keys)
        self._miss = None
        for handle in self._handles if handles is None else handles:
            out = ctypes.c_void_p()
            status = find(handle, ctypes.byref(query), nk, ctypes.byref(out))
            if status == 0:
                return out
            if status not in _NOT_IN_BUNDLE:
                check(self.lib, status)
            if self._miss is None:
                self._miss = (status, self.lib.fa_last_error().decode())
        return None

    def _compile(self, query, nk, deterministic, block_sparse=False):
        """Compiles the kernel of `query` (fa.jit; its block-sparse wgmma
        forward with block_sparse=True), loads its bundle and returns the
        kernel; FaError naming the config and how to build it when it
        cannot."""
        status, message = self._miss or (2, "no bundle loaded")
        mod = query.score_mod.decode() if query.score_mod else None
        mask_mod = query.mask_mod.decode() if query.mask_mod else None
        library = self._mod_library(mod, mask_mod)
        try:
            config = jit.config_text(query.direction, DTYPE_NAMES[query.dtype], query.head_dim,
                                     query.head_dim_v, query.mask,
                                     (query.window_left, query.window_right),
                                     query.compute_capability,
                                     "wgmma" if block_sparse else MMA_NAMES[query.mma],
                                     deterministic, mod, mask_mod, bool(query.allow_tf32),
                                     query.descale_block,
                                     wide_rows=not (block_sparse or query.sinks)) + \
                (":blocksparse" if block_sparse else "")
        except FaError as e:
            raise FaError(status, "fa: %s: %s; %s" % (_status_name(status), message, e)) from None
        if query.sinks:
            config += ":sinks"
        if (mod or mask_mod) and not library:
            raise FaError(status, "fa: %s: %s; compiling %s needs the score_mod library "
                          "(Bundle(score_mod_file=FILE) or $FA_SCORE_MODS)"
                          % (_status_name(status), message, config))
        if not self.jit:
            raise FaError(status, "fa: %s: %s (JIT is off for this bundle; build it with: %s)"
                          % (_status_name(status), message,
                             " ".join(jit.aot_command("fa-aot", config, "<dir>", library))))
        try:
            directory = jit.compile_bundle(config, library)
        except FaError as e:
            raise FaError(status, "fa: %s: %s\n%s" % (_status_name(status), message, e)) from None
        handle = self._load(directory)
        kernel = self._search(query, nk, deterministic, [handle], block_sparse)
        if kernel is None:
            self.lib.fa_bundle_free(handle)
            raise FaError(self._miss[0], "fa: the kernel compiled for %s in %s does not answer "
                          "the query: %s" % (config, directory, self._miss[1]))
        self._handles.append(handle)
        self.dirs.append(directory)
        return kernel


def _status_name(status):
    from ._runtime import STATUS_NAMES
    return STATUS_NAMES.get(status, status)


def load(bundle_dir=None, lib_path=None, jit=True, score_mod_file=None):
    """Loads a bundle (a directory, a list of them, or None for JIT only)
    and makes it the default for attention()."""
    global _default
    _default = Bundle(bundle_dir, lib_path, jit, score_mod_file)
    return _default


def _bundle(bundle):
    if bundle is not None:
        return bundle
    if _default is None:
        raise FaError(1, "fa: no bundle loaded; call fa.load(bundle_dir) first "
                         "(fa.load() for kernels compiled on first use)")
    return _default


_DTYPE_CODES = {}


def _dtype_code(dtype):
    code = _DTYPE_CODES.get(dtype)
    if code is not None:
        return code
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    import torch
    codes = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
    if hasattr(torch, "float8_e4m3fn"):
        codes[torch.float8_e4m3fn] = DTYPES["f8e4m3"]
    if dtype not in codes:
        raise FaError(1, "fa: unsupported dtype %s (expected float16, bfloat16, float32 or "
                         "float8_e4m3fn)" % dtype)
    _DTYPE_CODES[dtype] = codes[dtype]
    return codes[dtype]


def _allow_tf32(q, allow_tf32):
    """Whether a call on q may take TF32 kernels: for float32 q, allow_tf32,
    or where None PyTorch's switch for float32 matmuls (which FlexAttention
    follows too); False for other dtypes, which have no TF32 kernels."""
    if allow_tf32 not in (None, True, False):
        raise FaError(1, "fa: allow_tf32 is %r; expected None (follow "
                         "torch.backends.cuda.matmul.allow_tf32), True or False" % (allow_tf32,))
    import torch
    if q.dtype != torch.float32:
        return False
    if allow_tf32 is None:
        return _torch_allows_tf32(torch)
    return bool(allow_tf32)


def _torch_allows_tf32(torch):
    """torch.backends.cuda.matmul's TF32 switch: fp32_precision where this
    PyTorch has it (2.9 on; it also reflects allow_tf32 and the global
    setting, while reading allow_tf32 after the new API was used raises),
    else allow_tf32."""
    matmul = torch.backends.cuda.matmul
    try:
        return matmul.fp32_precision == "tf32"
    except (AttributeError, AssertionError):  # older: unknown (1.x asserts)
        return bool(matmul.allow_tf32)


def _mma_code(mma):
    name = "any" if mma is None else mma
    if name not in MMAS:
        raise FaError(1, "fa: mma is %r; expected None, 'any', 'mma_sync' or 'wgmma'" % (mma,))
    return MMAS[name]


_MOD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _score_mod_name(score_mod):
    """None, or the name of a score_mod: one compiled into the bundle's
    kernels, or a Python function (traced by fa.mods, compiled on first use)."""
    if score_mod is None:
        return None
    if callable(score_mod) or isinstance(score_mod, mods.ScoreMod):
        return mods.trace(score_mod).name
    if not isinstance(score_mod, str) or not _MOD_NAME.match(score_mod):
        raise FaError(1, "fa: score_mod is %r; expected None, a function (score, b, h, q_idx, "
                         "kv_idx) -> score, or the name of a score_mod the bundle's kernels "
                         "were built with (identifier characters, e.g. 'softcap30')"
                         % (score_mod,))
    return score_mod


def _mask_mod_name(mask_mod):
    """None, or the name of a mask_mod: one compiled into the bundle's
    kernels, or a Python function (traced by fa.mods, compiled on first use)."""
    if mask_mod is None:
        return None
    if callable(mask_mod) or isinstance(mask_mod, mods.MaskMod):
        return mods.trace_mask(mask_mod).name
    if not isinstance(mask_mod, str) or not _MOD_NAME.match(mask_mod):
        raise FaError(1, "fa: mask_mod is %r; expected None, a function (b, h, q_idx, kv_idx) "
                         "-> bool, or the name of a mask_mod the bundle's kernels were built "
                         "with (identifier characters, e.g. 'document')" % (mask_mod,))
    return mask_mod


def _mods(score_mod, mask_mod, mod_args):
    """(score_mod name, mask_mod name, the tensors the kernel reads) of a
    call: Python functions traced with the tensors they capture, named mods
    with `mod_args` (fa.mods.resolve)."""
    score_mod, mask_mod, tensors = mods.resolve(score_mod, mask_mod, mod_args)
    return _score_mod_name(score_mod), _mask_mod_name(mask_mod), tensors


_MOD_ARG_DTYPES = {"float32": DTYPES["f32"], "float16": DTYPES["f16"],
                   "bfloat16": DTYPES["bf16"], "int32": DTYPES["i32"], "int64": DTYPES["i64"]}


def _mod_args_for(tensors, q):
    """The mod_args as the kernels read them: torch tensors on q's device,
    contiguous (copied where they are not), detached (the kernels only read
    them: no gradient reaches them)."""
    if len(tensors) > MAX_MOD_ARGS:
        raise FaError(1, "fa: %d mod_args; a score_mod reads at most %d tensors"
                         % (len(tensors), MAX_MOD_ARGS))
    out = []
    for i, t in enumerate(tensors):
        if not hasattr(t, "data_ptr") or not hasattr(t, "device"):
            raise FaError(1, "fa: mod_args[%d] is %r; expected a torch tensor" % (i, t))
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _MOD_ARG_DTYPES or not 1 <= t.dim() <= MAX_RANK:
            raise FaError(1, "fa: mod_args[%d] is a %s tensor of rank %d; mod_args are float32, "
                             "float16, bfloat16, int32 or int64 tensors of rank 1 to %d"
                             % (i, dtype, t.dim(), MAX_RANK))
        if t.device != q.device:
            raise FaError(1, "fa: mod_args[%d] is on %s, but q is on %s; the kernels read "
                             "mod_args on q's device" % (i, t.device, q.device))
        t = t.detach()
        out.append(t if t.is_contiguous() else t.contiguous())
    return tuple(out)


def _mod_arg_array(tensors):
    """The fa_tensor array of the _ex launches (None for no mod_args)."""
    if not tensors:
        return None
    array = (Tensor * len(tensors))()
    for d, t in zip(array, tensors):
        d.data = t.data_ptr()
        d.dtype = _MOD_ARG_DTYPES[str(t.dtype).replace("torch.", "")]
        d.rank = t.dim()
        for i in range(t.dim()):
            d.shape[i], d.strides[i] = t.shape[i], t.stride(i)
    return array


def _check_mod_arg_count(b, kernel, score_mod, tensors, mask_mod=None):
    """FaError unless the call passes as many mod_args as `kernel` reads,
    naming what it reads."""
    info = b._info(kernel)
    reads = info["mod_args"]
    if len(reads) != len(tensors):
        what = ", ".join("%s %s" % (m["dtype"], m["dims"]) for m in reads) or "none"
        mods_named = " with ".join("%s %r" % (kind, name) for kind, name in
                                   (("score_mod", score_mod), ("mask_mod", mask_mod)) if name)
        raise FaError(1, "fa: %s reads %d tensors (%s), but %d were passed; pass "
                         "them as mod_args=[...] in that order"
                         % (mods_named, len(reads), what, len(tensors)))


def _tensor(t):
    """Describes a torch tensor for the runtime, strides as they are."""
    if t.dim() > 4:
        raise FaError(1, "fa: tensor of rank %d; expected at most 4" % t.dim())
    d = Tensor()
    d.data = t.data_ptr()
    d.dtype = _dtype_code(t.dtype)
    d.rank = t.dim()
    for i in range(t.dim()):
        d.shape[i] = t.shape[i]
        d.strides[i] = t.stride(i)
    return d


def _mask(causal, causal_bottom_right, window):
    chosen = sum([bool(causal), bool(causal_bottom_right), window is not None])
    if chosen > 1:
        raise FaError(1, "fa: choose at most one of causal, causal_bottom_right, window")
    if window is not None:
        left, right = window
        return "window", (int(left), int(right))
    if causal:
        return "causal", (-1, -1)
    if causal_bottom_right:
        return "causal_bottom_right", (-1, -1)
    return "none", (-1, -1)


_capabilities = {}


def _capability(t):
    import torch
    index = t.get_device()
    if index < 0:
        index = torch.cuda.current_device()
    cap = _capabilities.get(index)
    if cap is None:
        major, minor = torch.cuda.get_device_capability(index)
        cap = _capabilities[index] = major * 10 + minor
    return cap


def _stream_of(torch):
    """index -> the raw handle of the device's current stream: PyTorch's
    direct query where it has one (no Stream object per call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


_current_stream = None
_current_device = None  # () -> the current device's index
_torch = None


def softmax_scale(head_dim, scale):
    """The scale a call gives, else 1/sqrt(head_dim) (the attention default)."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def _launch_setup():
    """The torch queries of every launch, looked up once."""
    global _current_stream, _current_device, _torch
    import torch
    _torch = torch
    _current_stream = _stream_of(torch)
    _current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _launch(lib, fn, kernel, args, t, *extra):
    """fn(kernel, &args, *extra, stream) on the current stream of t's device,
    made the current device for the call (switched only when it is not)."""
    if _torch is None:
        _launch_setup()
    current = _current_device()
    index = t.get_device()
    if index < 0:
        index = current
    if index == current:
        status = fn(kernel, ctypes.byref(args), *extra, _current_stream(index))
    else:
        with _torch.cuda.device(index):
            status = fn(kernel, ctypes.byref(args), *extra, _current_stream(index))
    if status:
        check(lib, status)


def _plan(b, key, make):
    """The launch plan of `key` (kernel, function, argument-struct template
    with every shape, stride and dtype filled in), made by make() once."""
    plan = b._plans.get(key)
    if plan is None:
        if len(b._plans) >= _MAX_PLANS:
            b._plans.clear()
        plan = b._plans[key] = make()
    return plan


class BlockMask:
    """A block mask on the GPU (docs/ABI.md "Block sparsity"): which key
    blocks each query block of a mask_mod sees fully, partly or not at all,
    built once by fa.block_mask and reusable by every forward with the same
    sizes, mask_mod and mod_args contents. `data` is the int32 buffer,
    `kernel` the block-sparse forward it was built for."""

    def __init__(self, bundle, kernel, mask_mod, mod_args, data, desc, head_dim=128,
                 head_dim_v=128, dtype="bf16"):
        self.bundle, self.kernel, self.mask_mod = bundle, kernel, mask_mod
        self.mod_args, self.data, self.desc = mod_args, data, desc
        self._mod_array = None  # rebuild's fa_tensor array, made on first use
        self.head_dim, self.head_dim_v, self.dtype = head_dim, head_dim_v, dtype
        # (kernel, data, desc) of the block-sparse backward: its own block
        # sizes, so its own mask (the transposed lists it walks), built on
        # the first backward and reused by every later one.
        self._backward = None

    def backward_mask(self, device):
        """(kernel, data, desc) of the block-sparse backward's mask, built
        once from the same mask_mod and mod_args; None where no bundle has
        (or JIT can build) the backward, or for a per-head mask with GQA
        (the backward walks one mask row per key head)."""
        if self._backward is None:
            self._backward = self._build_backward(device) or ()
        return self._backward or None

    def _build_backward(self, device):
        import torch
        b, d = self.bundle, self.desc
        if d.mask_heads != 1 and d.heads != d.kv_heads:
            return None
        probe = torch.empty(0, device=device)
        try:
            kernel = b.find_block_sparse(self.dtype, self.head_dim, self.head_dim_v,
                                         _capability(probe), d.nk, self.mask_mod,
                                         direction=BWD)
        except FaError:
            return None
        data, desc = _build_block_mask(b, kernel, d.batch, d.heads, d.kv_heads, d.mask_heads,
                                       d.nq, d.nk, probe, self.mod_args)
        return kernel, data, desc

    @property
    def shape(self):
        d = self.desc
        return (d.batch, d.heads, d.kv_heads, d.mask_heads, d.nq, d.nk)

    def rebuild(self):
        """Builds the block mask again into the same buffer from the current
        contents of `mod_args` (the tensors fa.block_mask was given, unless it
        had to copy one to make it contiguous on the device), on the current
        stream of its device: the two build kernels, no lookup or allocation."""
        if self._mod_array is None:
            self._mod_array = _mod_arg_array(self.mod_args)
        _launch(self.bundle.lib, self.bundle.lib.fa_block_mask_build, self.kernel, self.desc,
                self.data, self._mod_array, len(self.mod_args))
        if self._backward:  # the backward's mask, once built, follows the forward's
            kernel, data, desc = self._backward
            _launch(self.bundle.lib, self.bundle.lib.fa_block_mask_build, kernel, desc, data,
                    self._mod_array, len(self.mod_args))

    def counts(self):
        """(partial, full) key-block counts per (batch, mask head, query
        block) as int32 tensors, read back from the buffer."""
        info = self.bundle._info(self.kernel)
        d = self.desc
        rows, nqb = d.batch * d.mask_heads, -(-d.nq // info["block_q"])
        partial = self.data[:rows * nqb].view(d.batch, d.mask_heads, nqb)
        full = self.data[rows * nqb:2 * rows * nqb].view(d.batch, d.mask_heads, nqb)
        return partial, full


def block_mask(mask_mod, B, H, Nq, Nk, mod_args=None, kv_heads=None, per_head=False,
               head_dim=128, head_dim_v=None, dtype="bf16", device=None, bundle=None):
    """Builds the block mask of the block-sparse forward for `mask_mod` (a
    Python function reading the tensors it captures, or a name with its
    `mod_args`; compiled on first use where no bundle has it) over B x H heads of Nq
    queries and Nk keys, on the current stream of `device` (that of the first
    mod_arg, else the current CUDA device). per_head=False builds one mask for
    every head (the mask_mod is evaluated with h = 0 and must not read h);
    True one per query head. Returns a BlockMask for forward_into(...,
    block_mask=) and backward_into(..., block_mask=)."""
    import torch
    if callable(mask_mod) or isinstance(mask_mod, mods.MaskMod):
        _, mask_mod, mod_args = _mods(None, mask_mod, mod_args)
    b = _bundle(bundle)
    for name, v in (("B", B), ("H", H), ("Nq", Nq), ("Nk", Nk)):
        if not isinstance(v, int) or v < 1:
            raise FaError(1, "fa: block_mask: %s is %r; expected a positive int" % (name, v))
    kv_heads = H if kv_heads is None else kv_heads
    tensors = list(mod_args or [])
    if device is None:
        device = tensors[0].device if tensors else torch.device(
            "cuda", torch.cuda.current_device())
    probe = torch.empty(0, device=device)  # the device's capability and stream
    dv = head_dim if head_dim_v is None else head_dim_v
    kernel = b.find_block_sparse(dtype, head_dim, dv, _capability(probe), Nk, mask_mod)
    mods_read = _mod_args_for(tensors, probe)
    _check_mod_arg_count(b, kernel, None, mods_read, mask_mod)
    mask_heads = H if per_head else 1
    data, desc = _build_block_mask(b, kernel, B, H, kv_heads, mask_heads, Nq, Nk, probe,
                                   mods_read)
    return BlockMask(b, kernel, mask_mod, mods_read, data, desc, head_dim, dv, dtype)


def _build_block_mask(b, kernel, B, H, kv_heads, mask_heads, Nq, Nk, probe, mods):
    """Allocates `kernel`'s block mask for these sizes on `probe`'s device and
    builds it there from the mask_mod reading `mods`: (data, desc)."""
    import torch
    size = ctypes.c_uint64()
    check(b.lib, b.lib.fa_block_mask_bytes(kernel, B, mask_heads, Nq, Nk, ctypes.byref(size)))
    data = torch.empty(size.value // 4, dtype=torch.int32, device=probe.device)
    desc = BlockMaskDesc(data.data_ptr(), size.value, B, H, kv_heads, mask_heads, Nq, Nk)
    _launch(b.lib, b.lib.fa_block_mask_build, kernel, desc, probe, _mod_arg_array(mods),
            len(mods))
    return data, desc


def _block_sparse_forward(b, q, k, v, o, lse, scale, block_mask, mask_mod, mods_read):
    """forward_into with a block mask: its own kernel, the block-sparse launch."""
    if not isinstance(block_mask, BlockMask):
        raise FaError(1, "fa: block_mask is %r; expected what fa.block_mask returns"
                         % (block_mask,))
    if mask_mod is not None and mask_mod != block_mask.mask_mod:
        raise FaError(1, "fa: mask_mod is '%s', but the block mask was built for mask_mod '%s'"
                         % (mask_mod, block_mask.mask_mod))
    d = q.shape[-1]
    args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)],
                       softmax_scale(d, scale))
    _launch(b.lib, b.lib.fa_attention_forward_block_sparse, block_mask.kernel, args, q,
            ctypes.byref(block_mask.desc), _mod_arg_array(mods_read), len(mods_read))


def forward_into(q, k, v, o, lse, causal=False, causal_bottom_right=False, window=None,
                 scale=None, bundle=None, mma=None, score_mod=None, mod_args=None,
                 mask_mod=None, block_mask=None, allow_tf32=None):
    """Runs the forward kernel into caller-provided o [B,H,Nq,Dv] and lse
    [B,H,Nq] (float32). Every argument is validated by the runtime. `mma`
    ('mma_sync' or 'wgmma') forces the kernel's instructions; None prefers
    wgmma where the device runs it (sm_90). `score_mod` names the score_mod
    compiled into the kernel (None: plain attention), `mask_mod` the
    mask_mod (None: none), each a name or a Python function (fa.mods),
    `mod_args` the tensors named ones read (the score_mod's, then the
    mask_mod's). `block_mask` (from fa.block_mask) runs its block-sparse
    kernel: only the key blocks it lists, the mask_mod on the partial ones;
    the mask_mod and mod_args default to the block mask's. `allow_tf32` as
    for attention()."""
    b = _bundle(bundle)
    tf32 = _allow_tf32(q, allow_tf32)
    if block_mask is not None:
        if causal or causal_bottom_right or window is not None or score_mod is not None:
            raise FaError(1, "fa: a block mask carries the whole mask: no causal, window or "
                             "score_mod beside it")
        mods_read = _mod_args_for(list(block_mask.mod_args if mod_args is None else mod_args), q)
        return _block_sparse_forward(b, q, k, v, o, lse, scale, block_mask,
                                     _mask_mod_name(mask_mod), mods_read)
    score_mod, mask_mod, mods_read = _mods(score_mod, mask_mod, mod_args)
    mods_read = _mod_args_for(mods_read, q)
    tensors = (q, k, v, o, lse)
    # Everything the kernel choice and the argument struct depend on except
    # the data pointers, which are all that change from call to call.
    key = (FWD, q.device, causal, causal_bottom_right,
           None if window is None else tuple(window), scale, mma, score_mod, mask_mod, tf32,
           *[(t.shape, t.stride(), t.dtype) for t in tensors])

    def make():
        mask, win = _mask(causal, causal_bottom_right, window)
        d, dv = q.shape[-1], v.shape[-1]
        kernel = b.find(FWD, q.dtype, d, dv, mask, win, _capability(q), mma, k.shape[-2],
                        score_mod=score_mod, mask_mod=mask_mod, allow_tf32=tf32)
        if score_mod is not None or mask_mod is not None:
            _check_mod_arg_count(b, kernel, score_mod, mods_read, mask_mod)
        args = ForwardArgs(*[_tensor(t) for t in tensors],
                           softmax_scale(d, scale))
        return kernel, bytes(args)

    kernel, template = _plan(b, key + (len(mods_read),), make)
    args = ForwardArgs.from_buffer_copy(template)
    args.q.data, args.k.data, args.v.data = q.data_ptr(), k.data_ptr(), v.data_ptr()
    args.o.data, args.lse.data = o.data_ptr(), lse.data_ptr()
    if not mods_read:
        _launch(b.lib, b.lib.fa_attention_forward, kernel, args, q)
    else:
        _launch(b.lib, b.lib.fa_attention_forward_ex, kernel, args, q,
                _mod_arg_array(mods_read), len(mods_read))


# Query rows (keys) that one block descale covers: descale_q [B, H, ceil(Nq/64)]
# and descale_k [B, Hkv, ceil(Nk/64)] (the kernels' descale_block).
DESCALE_BLOCK = 64


def _descale_block(descale_q, descale_k):
    """The descale form of fp8 descales (None: not given): 0 for per-head
    ones [B, Hkv], DESCALE_BLOCK where descale_q or descale_k is rank 3 (per
    64-row block); FaError for a mix, which no kernel reads."""
    ranks = {}
    for name, t in (("descale_q", descale_q), ("descale_k", descale_k)):
        if t is None:
            continue
        if not hasattr(t, "dim") or t.dim() not in (2, 3):
            raise FaError(1, "fa: %s must be a float32 tensor [B, Hkv] (per head) or, per "
                             "64-row block, %s; got %r"
                          % (name, "[B, H, ceil(Nq/64)]" if name == "descale_q"
                             else "[B, Hkv, ceil(Nk/64)]",
                             tuple(t.shape) if hasattr(t, "shape") else t))
        ranks[name] = t.dim()
    if len(set(ranks.values())) > 1:
        raise FaError(1, "fa: descale_q is rank %d and descale_k rank %d; a kernel reads one "
                         "form: both per head ([B, Hkv]) or both per 64-row block (descale_q "
                         "[B, H, ceil(Nq/64)], descale_k [B, Hkv, ceil(Nk/64)])"
                      % (ranks["descale_q"], ranks["descale_k"]))
    return DESCALE_BLOCK if 3 in ranks.values() else 0


def forward_fp8_into(q, k, v, o, lse, descales, causal=False, causal_bottom_right=False,
                     window=None, scale=None, bundle=None):
    """The fp8 forward into caller-provided o [B,H,Nq,Dv] (bfloat16) and lse
    [B,H,Nq] (float32): q, k, v float8_e4m3fn, `descales` (descale_q,
    descale_k, descale_v) float32, per head [B, Hkv] each, or per 64-row
    block descale_q [B, H, ceil(Nq/64)], descale_k [B, Hkv, ceil(Nk/64)] and
    descale_v [B, Hkv] (a kernel of that form: descale_block 64, config field
    'blockscale'); fa.quantize_fp8 makes either. Every argument is validated
    by the runtime (fa_attention_forward_fp8)."""
    b = _bundle(bundle)
    tensors = (q, k, v, o, lse)
    key = ("fp8", q.device, causal, causal_bottom_right,
           None if window is None else tuple(window), scale,
           *[(t.shape, t.stride(), t.dtype) for t in tensors + tuple(descales)])

    def make():
        block = _descale_block(descales[0], descales[1])
        mask, win = _mask(causal, causal_bottom_right, window)
        d, dv = q.shape[-1], v.shape[-1]
        kernel = b.find(FWD, q.dtype, d, dv, mask, win, _capability(q), "wgmma", k.shape[-2],
                        descale_block=block)
        args = ForwardArgs(*[_tensor(t) for t in tensors],
                           softmax_scale(d, scale))
        return kernel, bytes(args)

    kernel, template = _plan(b, key, make)
    args = ForwardArgs.from_buffer_copy(template)
    args.q.data, args.k.data, args.v.data = q.data_ptr(), k.data_ptr(), v.data_ptr()
    args.o.data, args.lse.data = o.data_ptr(), lse.data_ptr()
    scales = (Tensor * 3)(*[_tensor(t) for t in descales])
    _launch(b.lib, b.lib.fa_attention_forward_fp8, kernel, args, q, scales)


def _attention_fp8(q, k, v, b, mask_args, scale, descales):
    """O (bfloat16) and LSE of the fp8 forward; descales left out are ones of
    the form the others give (per head where none is given)."""
    import torch
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise FaError(1, "fa: the fp8 (float8_e4m3fn) attention has no autograd; call it "
                         "under torch.no_grad() (or with inputs that do not require grad) and "
                         "run its backward with fa.backward_fp8_into")
    if not (q.dtype == k.dtype == v.dtype):
        raise FaError(1, "fa: fp8 attention needs q, k, v all float8_e4m3fn, got %s, %s, %s"
                      % (q.dtype, k.dtype, v.dtype))
    for name, t in zip(("descale_q", "descale_k", "descale_v"), descales):
        if t is not None and not isinstance(t, torch.Tensor):
            raise FaError(1, "fa: %s must be a float32 tensor, got %r" % (name, t))
    block = _descale_block(descales[0], descales[1])
    B, H, Nq, Hkv, Nk = q.shape[0], q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    per_head = (B, Hkv)
    shapes = ((B, H, -(-Nq // block)), (B, Hkv, -(-Nk // block)), per_head) if block else \
        (per_head,) * 3
    scales = [torch.ones(shape, dtype=torch.float32, device=q.device) if t is None
              else t.contiguous() for t, shape in zip(descales, shapes)]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    causal, causal_bottom_right, window = mask_args
    forward_fp8_into(q, k, v, o, lse, scales, causal, causal_bottom_right, window, scale,
                     bundle=b)
    return o, lse


_MAX_E4M3 = 448.0  # the largest finite float8_e4m3fn


def hadamard(x):
    """x rotated along its last dimension D by an orthonormal Hadamard
    matrix, as the attn.hadamard op rotates it: D cut into groups of g
    columns, g the largest power of two dividing D, each group times
    Sylvester's +-1 matrix / sqrt(g), in float32, returned in x's dtype.
    Since the rotation R is orthonormal, attention of (q @ R, k @ R) is
    attention of (q, k)."""
    import torch
    if not torch.is_floating_point(x) or x.dim() == 0 or x.shape[-1] == 0:
        raise FaError(1, "fa: hadamard takes a floating-point tensor with a non-empty last "
                         "dimension, got %s of shape %s" % (x.dtype, tuple(x.shape)))
    d = x.shape[-1]
    g = d & -d
    h = torch.ones(1, 1, device=x.device)
    while h.shape[0] < g:  # Sylvester: H[i, j] = (-1)^popcount(i & j)
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    groups = x.float().reshape(*x.shape[:-1], d // g, g)
    return (groups @ (h / math.sqrt(g))).reshape(x.shape).to(x.dtype)


def quantize_fp8(q, k, v, block=False, rotate=False, bundle=None):
    """q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv] (floating point, H a
    multiple of Hkv) quantised for the fp8 forward: (q8, k8, v8, descale_q,
    descale_k, descale_v), float8_e4m3fn and float32, contiguous, in the
    layout fa.attention and forward_fp8_into take, so that x is close to
    x8 * descale (with rotate, q @ R and k @ R are).

    rotate=True is FA3's incoherent processing (the IR's attn-incoherent-qk):
    q and k are rotated by fa.hadamard before they are quantised. Attention
    is unchanged in exact arithmetic, and an outlier channel of q or k is
    spread over its group of columns instead of setting the rounding of its
    whole head (fa-check --fp8-rotate: 2.6-2.8x lower O error by the median
    with outlier channels). V is not rotated.

    On the GPU the quantiser of the loaded bundle (`bundle`, else the
    default) runs when it has one for the inputs' dtype and head dims (fp8
    kernels built with the config field quant=<bf16|f16|f32>; fa.load()
    compiles one on first use where fa-aot is installed): two passes over
    each input, no float32 copies. Otherwise PyTorch computes the same
    values (bit for bit without rotation; rotated, the float32 sums may
    round differently).

    Each descale is amax / 448 of |x| over what it covers (1 where that is
    all zeros) and x8 = x / descale clamped to +-448, rounded to e4m3.
    block=False (FA3's per-head form): descale_q [B, Hkv] over the query
    heads of each key head (all their rows and columns), descale_k and
    descale_v [B, Hkv] over each key head. block=True: descale_q [B, H,
    ceil(Nq/64)] per query head and block of 64 queries, descale_k [B, Hkv,
    ceil(Nk/64)] per key head and block of 64 keys, descale_v [B, Hkv] as
    before (kernels with descale_block 64): a few large rows then set only
    their own block's factor."""
    import torch
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is None:
        raise FaError(1, "fa: this PyTorch has no torch.float8_e4m3fn")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise FaError(1, "fa: quantize_fp8 takes q, k, v of rank 4 ([B, H, N, D]), got ranks "
                         "%d, %d, %d" % (q.dim(), k.dim(), v.dim()))
    B, H, Hkv = q.shape[0], q.shape[1], k.shape[1]
    if k.shape[0] != B or tuple(v.shape[:3]) != tuple(k.shape[:3]) or H % Hkv:
        raise FaError(1, "fa: quantize_fp8 needs q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv] "
                         "with H a multiple of Hkv, got %s, %s, %s"
                      % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))

    on_gpu = _gpu_quantizers(q, k, v, bundle)
    if on_gpu is not None:
        with torch.no_grad():
            q8, dq = _quantize_on_gpu(on_gpu[0], q, Hkv, block, rotate)
            k8, dk = _quantize_on_gpu(on_gpu[0], k, Hkv, block, rotate)
            v8, dv = _quantize_on_gpu(on_gpu[1], v, Hkv, False, False)
        return q8, k8, v8, dq, dk, dv
    return _quantize_fp8_torch(q, k, v, block, rotate)


def _quantize_fp8_torch(q, k, v, block, rotate):
    """quantize_fp8's values by PyTorch ops (float32 copies of the inputs)."""
    import torch
    fp8 = torch.float8_e4m3fn
    B, Hkv = q.shape[0], k.shape[1]

    def descale(amax):
        # Divided by a tensor: PyTorch divides by a Python scalar as a
        # multiply by its reciprocal, one ulp off amax / 448 at times (the
        # op's, the CPU lowering's and the GPU quantiser's IEEE quotient).
        return torch.where(amax > 0, amax / torch.full_like(amax, _MAX_E4M3),
                           torch.ones_like(amax)).contiguous()

    def per_heads(x, groups):
        """[B, groups]: one factor per group of consecutive heads."""
        return descale(x.reshape(B, groups, -1).abs().amax(-1))

    def per_rows(x):
        """[B, heads, ceil(N/64)]: one factor per head and 64-row block (the
        last block's missing rows padded with zeros, which leave amax)."""
        n = x.shape[2]
        blocks = -(-n // DESCALE_BLOCK)
        padded = torch.nn.functional.pad(x.abs(), (0, 0, 0, blocks * DESCALE_BLOCK - n))
        return descale(padded.reshape(x.shape[0], x.shape[1], blocks, -1).amax(-1))

    def quantized(x, factor):
        """x / factor, factor [B, heads] per head or [B, heads, blocks]."""
        if factor.dim() == 2:
            factor = factor.repeat_interleave(x.shape[1] // factor.shape[1], dim=1)[..., None]
        else:
            factor = factor.repeat_interleave(DESCALE_BLOCK, dim=2)[:, :, :x.shape[2]]
        return (x / factor[..., None]).clamp(-_MAX_E4M3, _MAX_E4M3).to(fp8).contiguous()

    with torch.no_grad():
        q, k, v = (t.detach().float() for t in (q, k, v))
        if rotate:
            q, k = hadamard(q), hadamard(k)
        if block:
            dq, dk = per_rows(q), per_rows(k)
        else:
            dq, dk = per_heads(q, Hkv), per_heads(k, Hkv)
        dv = per_heads(v, Hkv)
        return (quantized(q, dq), quantized(k, dk), quantized(v, dv), dq, dk, dv)


def _gpu_quantizers(q, k, v, bundle):
    """The bundle's quantiser kernels for q and k (head dim D) and for v
    (Dv), or None where the inputs or the bundle call for PyTorch's."""
    import torch
    if not (q.is_cuda and k.is_cuda and v.is_cuda) or not (q.dtype == k.dtype == v.dtype):
        return None
    if not (q.numel() and k.numel()):  # the kernels take sizes >= 1
        return None
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32) or _capability(q) < 90:
        return None
    if bundle is None and _default is None:
        return None
    b = _bundle(bundle)
    found = [b._find_quantizer(q.dtype, q.shape[3]), b._find_quantizer(v.dtype, v.shape[3])]
    return None if None in found else found


def _quantize_on_gpu(kernel_and_bundle, x, groups, block, rotate):
    """fa_quantize of x [B, heads, N, D]: (x8, descale), the descale [B,
    groups] (groups dividing heads) or per 64-row block."""
    import torch
    kernel, b = kernel_and_bundle
    x = x.detach().contiguous()
    batch, heads, n = x.shape[0], x.shape[1], x.shape[2]
    blocks = -(-n // DESCALE_BLOCK)
    x8 = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    args = QuantizeArgs()
    args.x, args.x8 = _tensor(x), _tensor(x8)
    if block:
        descale = torch.empty((batch, heads, blocks), dtype=torch.float32, device=x.device)
        keep = None
    else:
        descale = torch.empty((batch, groups), dtype=torch.float32, device=x.device)
        keep = torch.empty((batch, heads, blocks), dtype=torch.float32, device=x.device)
        args.workspace = _tensor(keep)
    args.descale = _tensor(descale)
    args.rotate = int(bool(rotate))
    _launch(b.lib, b.lib.fa_quantize, kernel, args, x)
    return x8, descale


def backward_into(q, k, v, o, do, lse, dq, dk, dv, delta=None, dq_accum=None, causal=False,
                  causal_bottom_right=False, window=None, scale=None, bundle=None, mma=None,
                  deterministic=False, score_mod=None, mod_args=None, mask_mod=None,
                  block_mask=None, allow_tf32=None):
    """Runs bwd_pre, bwd and bwd_post into caller-provided dq, dk, dv. The f32
    workspaces delta [B,H,Nq] and dq_accum [B,H,Nq,D] are allocated here when
    not given. `mma` as for forward_into. deterministic=True runs the bundle's
    deterministic backward (bit-identical dq run to run; slower), which must
    exist for the query. `score_mod` as for forward_into: the forward's, whose
    derivative the backward kernel applies, `mask_mod` the forward's,
    `mod_args` the tensors they read. `block_mask` (fa.block_mask's) runs the
    block-sparse backward, whose own mask (per key block: its full and
    partial query blocks) it builds once and keeps; where no block-sparse
    backward exists for it (or the mask is per head with GQA) the mask_mod
    backward, which visits every key block. `allow_tf32` as for attention()
    (float32: a TF32 backward where allowed and a bundle has one or JIT
    builds it, config field 'tf32'; pass the forward's choice)."""
    import torch
    b = _bundle(bundle)
    tf32 = _allow_tf32(q, allow_tf32)
    sparse = None
    if block_mask is not None and score_mod is None and not deterministic and \
            mma in (None, "wgmma") and not (causal or causal_bottom_right or window):
        if isinstance(block_mask, BlockMask) and (
                mask_mod is None or _mask_mod_name(mask_mod) == block_mask.mask_mod):
            sparse = block_mask.backward_mask(q.device)
    if sparse is not None:
        _block_sparse_backward(b, q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum, scale,
                               block_mask, sparse)
        return
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise FaError(1, "fa: block_mask is %r; expected what fa.block_mask returns"
                             % (block_mask,))
        if mask_mod is not None and _mask_mod_name(mask_mod) != block_mask.mask_mod:
            raise FaError(1, "fa: mask_mod is '%s', but the block mask was built for "
                             "mask_mod '%s'" % (_mask_mod_name(mask_mod), block_mask.mask_mod))
        mask_mod = block_mask.mask_mod
        if mod_args is None and score_mod is None:
            mod_args = block_mask.mod_args
    score_mod, mask_mod, mods_read = _mods(score_mod, mask_mod, mod_args)
    mods_read = _mod_args_for(mods_read, q)
    if delta is None:
        delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if dq_accum is None:
        dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    tensors = (q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum)
    key = (BWD, q.device, causal, causal_bottom_right,
           None if window is None else tuple(window), scale, mma, bool(deterministic),
           score_mod, mask_mod, tf32, *[(t.shape, t.stride(), t.dtype) for t in tensors])

    def make():
        mask, win = _mask(causal, causal_bottom_right, window)
        d, dv_dim = q.shape[-1], v.shape[-1]
        kernel = b.find(BWD, q.dtype, d, dv_dim, mask, win, _capability(q), mma, k.shape[-2],
                        deterministic, score_mod, mask_mod, allow_tf32=tf32)
        if score_mod is not None or mask_mod is not None:
            _check_mod_arg_count(b, kernel, score_mod, mods_read, mask_mod)
        args = BackwardArgs(*[_tensor(t) for t in tensors],
                            softmax_scale(d, scale))
        return kernel, bytes(args)

    kernel, template = _plan(b, key + (len(mods_read),), make)
    args = BackwardArgs.from_buffer_copy(template)
    for name, t in zip(BackwardArgs.TENSORS, tensors):
        getattr(args, name).data = t.data_ptr()
    if not mods_read:
        _launch(b.lib, b.lib.fa_attention_backward, kernel, args, q)
    else:
        _launch(b.lib, b.lib.fa_attention_backward_ex, kernel, args, q,
                _mod_arg_array(mods_read), len(mods_read))


def backward_fp8_into(q, k, v, o, do, lse, dq, dk, dv, descales, delta=None, dq_accum=None,
                      causal=False, causal_bottom_right=False, window=None, scale=None,
                      bundle=None):
    """The fp8 backward into caller-provided dq, dk, dv (bfloat16): q, k, v and
    do float8_e4m3fn, o (the fp8 forward's, bfloat16) and lse (float32), and
    `descales` (descale_q, descale_k, descale_v, descale_do) float32 [B, Hkv]
    each (do's factor per key head, as q's; fa.quantize_fp8 makes q's, k's and
    v's). The gradients are those of the fp8 forward at the dequantised
    inputs, with do * descale_do as the output gradient; every product runs in
    e4m3. Needs a bundle kernel 'bwd:f8e4m3:d128:<mask>:wgmma'; every
    argument is validated by the runtime (fa_attention_backward_fp8)."""
    import torch
    b = _bundle(bundle)
    if delta is None:
        delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if dq_accum is None:
        dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    tensors = (q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum)
    key = ("fp8", BWD, q.device, causal, causal_bottom_right,
           None if window is None else tuple(window), scale,
           *[(t.shape, t.stride(), t.dtype) for t in tensors + tuple(descales)])

    def make():
        mask, win = _mask(causal, causal_bottom_right, window)
        d, dv_dim = q.shape[-1], v.shape[-1]
        kernel = b.find(BWD, q.dtype, d, dv_dim, mask, win, _capability(q), "wgmma",
                        k.shape[-2])
        args = BackwardArgs(*[_tensor(t) for t in tensors], softmax_scale(d, scale))
        return kernel, bytes(args)

    kernel, template = _plan(b, key, make)
    args = BackwardArgs.from_buffer_copy(template)
    for name, t in zip(BackwardArgs.TENSORS, tensors):
        getattr(args, name).data = t.data_ptr()
    scales = (Tensor * 4)(*[_tensor(t) for t in descales])
    _launch(b.lib, b.lib.fa_attention_backward_fp8, kernel, args, q, scales)


def _block_sparse_backward(b, q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum, scale,
                           block_mask, sparse):
    """backward_into with the block-sparse backward and its own block mask."""
    import torch
    kernel, _, desc = sparse
    if delta is None:
        delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if dq_accum is None:
        dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    tensors = (q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum)
    args = BackwardArgs(*[_tensor(t) for t in tensors], softmax_scale(q.shape[-1], scale))
    mods_read = block_mask.mod_args
    _launch(b.lib, b.lib.fa_attention_backward_block_sparse, kernel, args, q,
            ctypes.byref(desc), _mod_arg_array(mods_read), len(mods_read))


_sm_counts = {}


def _sm_count(t):
    import torch
    index = t.get_device()
    if index < 0:
        index = torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


def _packs_gqa(q, k, block_q=64):
    """Whether packing the query heads of a key head into one tile applies:
    GQA (G = H / Hkv > 1, G <= block_q) and a query tile the plain kernel
    would leave partly empty (Nq < block_q: decode and short appends)."""
    group = q.shape[1] // k.shape[1]
    return 1 < group <= block_q and q.shape[2] < block_q


def _splitkv_plan(q, k, v, o, lse, b, mask_args, scale, packed=False, sinks=False,
                  tf32=False, score_mod=None, mask_mod=None, mod_args=()):
    """(kernel, argument template, splits, workspace bytes) of a split-KV
    launch for these tensors, or () when the bundle has no split-KV kernel
    for them or fa_splitkv_choose picks 1 split (the plain forward fills the
    GPU). packed=True: the packed-GQA split kernel, whose grid has a CTA per
    key head (fa_splitkv_choose_gqa), taken with any split count. sinks=True:
    a kernel with attention sinks (fa_attention_forward_splitkv_sinks).
    tf32=True: TF32 kernels allowed (float32). score_mod, mask_mod: the
    names of the kernel's mods, which read the tensors mod_args."""
    tensors = (q, k, v, o, lse)
    key = ("splitkv", packed, sinks, tf32, q.device, mask_args, scale, score_mod, mask_mod,
           len(mod_args), *[(t.shape, t.stride(), t.dtype) for t in tensors])

    def make():
        mask, win = _mask(*mask_args)
        d, dv = q.shape[-1], v.shape[-1]
        rows = (q.shape[1] // k.shape[1], q.shape[2])
        kernel = b.find_splitkv(q.dtype, d, dv, mask, win, _capability(q), k.shape[-2],
                                packed=packed, sinks=sinks, rows=rows, allow_tf32=tf32,
                                score_mod=score_mod, mask_mod=mask_mod)
        if kernel is None:
            return ()  # cached: no split-KV kernel for this launch
        if score_mod is not None or mask_mod is not None:
            _check_mod_arg_count(b, kernel, score_mod, mod_args, mask_mod)
        splits = ctypes.c_int32()
        check(b.lib, b.lib.fa_splitkv_choose_gqa(kernel, q.shape[0], q.shape[1], k.shape[1],
                                                 q.shape[2], k.shape[2], _sm_count(q),
                                                 ctypes.byref(splits)))
        # One split costs the packed kernel only the merge of a small f32
        # partial O, while its K/V reads drop by G: it runs even unsplit.
        if splits.value < 2 and not packed:
            return ()
        nbytes = ctypes.c_uint64()
        check(b.lib, b.lib.fa_splitkv_workspace_bytes(kernel, q.shape[0], q.shape[1],
                                                      q.shape[2], splits.value,
                                                      ctypes.byref(nbytes)))
        args = ForwardArgs(*[_tensor(t) for t in tensors],
                           softmax_scale(d, scale))
        return kernel, bytes(args), splits.value, nbytes.value

    return _plan(b, key, make)


def _layout(t):
    return t.shape, t.stride(), t.dtype


def _empty_like_layout(ref, last):
    """An empty [B,H,N,last] tensor whose B, H, N dims are laid out in the
    order of ref's strides (O in q's layout: a transposed [B,N,H,D] view of q
    gives O the same [B,N,H,Dv] memory order)."""
    import torch
    order = sorted(range(3), key=lambda i: -ref.stride(i))
    dense = torch.empty([ref.shape[i] for i in order] + [last], dtype=ref.dtype,
                        device=ref.device)
    if order == [0, 1, 2]:  # q in [B,H,N,D] order: O contiguous
        return dense
    return dense.permute(*[order.index(i) for i in range(3)], 3)


def _unit_last(t):
    """t itself when its last stride is 1 (the kernels take such views),
    else a contiguous copy."""
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _forward_plan(q, k, v, b, mask_args, scale, mma, score_mod, mod_args=(), mask_mod=None,
                  tf32=False):
    """(launch function, kernel, struct template, extra launch arguments,
    split-KV workspace bytes, whether the launch takes the call's mod_args
    last) of _forward_as_given for tensors laid out as these: the split-KV
    kernels where the bundle has them and splitting pays (mma unforced or
    mma_sync; the score_mod and mask_mod too), else the plain forward.
    tf32: TF32 kernels allowed (float32, _allow_tf32)."""
    import torch
    shape = q.shape[:-1]
    # Stand-ins with o's and lse's layout for the struct (their data
    # pointers are set per call): O in q's layout.
    o = _empty_like_layout(q, v.shape[-1])
    lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    if mma in (None, "mma_sync"):
        # Decode with GQA: the packed split kernel reads each K/V block once
        # per key head (and runs unsplit where the grid is full).
        options = dict(tf32=tf32, score_mod=score_mod, mask_mod=mask_mod, mod_args=mod_args)
        split = _packs_gqa(q, k) and _splitkv_plan(q, k, v, o, lse, b, mask_args, scale,
                                                   packed=True, **options)
        if not split:
            split = _splitkv_plan(q, k, v, o, lse, b, mask_args, scale, **options)
        if split:
            kernel, template, splits, nbytes = split
            if mod_args:  # the _ex launch, this call's mod_args appended
                return (b.lib.fa_attention_forward_splitkv_ex, kernel, template,
                        (nbytes, splits), nbytes, True)
            return (b.lib.fa_attention_forward_splitkv, kernel, template, (nbytes, splits),
                    nbytes, False)
    mask, win = _mask(*mask_args)
    d, dv = q.shape[-1], v.shape[-1]
    kernel = b.find(FWD, q.dtype, d, dv, mask, win, _capability(q), mma, k.shape[-2],
                    score_mod=score_mod, mask_mod=mask_mod, allow_tf32=tf32)
    args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)],
                       softmax_scale(d, scale))
    if score_mod is not None or mask_mod is not None:
        _check_mod_arg_count(b, kernel, score_mod, mod_args, mask_mod)
    if mod_args:
        # The _ex launch with this call's mod_args (the plain one otherwise,
        # which runtimes before mod_args have too).
        return b.lib.fa_attention_forward_ex, kernel, bytes(args), (), 0, True
    return b.lib.fa_attention_forward, kernel, bytes(args), (), 0, False


def _forward(q, k, v, b, mask_args, scale, mma, score_mod, mod_args=(), mask_mod=None,
             tf32=False):
    """O and LSE, allocated here, of the forward with these arguments. q, k,
    v go to the kernel as they are (O in q's layout) unless the runtime
    rejects their strides as an INVALID_ARGUMENT (a kernel without strides,
    TMA alignment): then from contiguous copies."""
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    try:
        return _forward_as_given(q, k, v, b, mask_args, scale, mma, score_mod, mod_args,
                                 mask_mod, tf32)
    except FaError as e:
        views = [t for t in (q, k, v) if not t.is_contiguous()]
        if not views or e.status != 1:  # FA_ERROR_INVALID_ARGUMENT
            raise
    return _forward_as_given(q.contiguous(), k.contiguous(), v.contiguous(), b, mask_args,
                             scale, mma, score_mod, mod_args, mask_mod, tf32)


def _forward_as_given(q, k, v, b, mask_args, scale, mma, score_mod, mod_args=(),
                      mask_mod=None, tf32=False):
    """_forward on these tensors as they are (the kernel and struct of
    _forward_plan, made once per layout and options)."""
    torch = _torch
    if torch is None:
        _launch_setup()
        torch = _torch
    device = q.device
    key = ("attention", device, _layout(q), _layout(k), _layout(v), mask_args, scale, mma,
           score_mod, len(mod_args), mask_mod, tf32)
    fn, kernel, template, extra, nbytes, reads_mods = _plan(
        b, key, lambda: _forward_plan(q, k, v, b, mask_args, scale, mma, score_mod, mod_args,
                                      mask_mod, tf32))
    if reads_mods:  # an _ex launch: this call's mod_args last
        extra += (_mod_arg_array(mod_args), len(mod_args))
    o = _empty_like_layout(q, v.shape[-1])
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=device)
    args = ForwardArgs.from_buffer_copy(template)
    args.q.data, args.k.data, args.v.data = q.data_ptr(), k.data_ptr(), v.data_ptr()
    args.o.data, args.lse.data = o.data_ptr(), lse.data_ptr()
    if nbytes:
        # torch's allocator aligns to 512 bytes, beyond the 16 the kernels need.
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
        extra = (workspace.data_ptr(),) + extra
    _launch(b.lib, fn, kernel, args, q, *extra)
    return o, lse


def _backward_plan(q, k, v, o, do, lse, dq, dk, dv, b, mask_args, scale, deterministic,
                   score_mod, mod_args=(), mask_mod=None, tf32=False):
    """(kernel, struct template, workspace bytes, dq_accum's offset in it)
    of _backward for tensors laid out as these. delta [B,H,Nq] and dq_accum
    [B,H,Nq,D] (f32) share one workspace allocation: delta first, dq_accum
    at the next 256-byte boundary."""
    import torch
    mask, win = _mask(*mask_args)
    d, dv_dim = q.shape[-1], v.shape[-1]
    kernel = b.find(BWD, q.dtype, d, dv_dim, mask, win, _capability(q), None, k.shape[-2],
                    deterministic, score_mod, mask_mod, allow_tf32=tf32)
    if score_mod is not None or mask_mod is not None:
        _check_mod_arg_count(b, kernel, score_mod, mod_args, mask_mod)
    rows = math.prod(q.shape[:-1])
    offset = (rows * 4 + 255) // 256 * 256
    delta = _Described(q.shape[:-1], torch.float32)
    dq_accum = _Described(q.shape, torch.float32)
    args = BackwardArgs(*[_tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv, delta,
                                                 dq_accum)],
                        softmax_scale(d, scale))
    return kernel, bytes(args), offset + rows * d * 4, offset


class _Described:
    """A contiguous tensor's shape and dtype, for _tensor (no memory)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype
        self._strides = tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))

    def dim(self):
        return len(self.shape)

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def data_ptr(self):
        return 0


def _backward(q, k, v, o, do, lse, b, mask_args, scale, deterministic, score_mod,
              mod_args=(), mask_mod=None, tf32=False):
    """dQ, dK, dV, allocated here. `mma` picks only the forward kernel: the
    backward is the runtime's choice (wgmma on sm_90 where the bundle has
    it), since a bundle may hold a config's backward in one build only.
    q, k, v, o and do go to the kernels as they are (dQ, dK, dV in the
    layouts of q, k, v) unless the runtime rejects their strides as an
    INVALID_ARGUMENT (a kernel without strides, TMA alignment): then from
    contiguous copies."""
    tensors = [_unit_last(t) for t in (q, k, v, o, do)]
    try:
        return _backward_as_given(*tensors, lse, b, mask_args, scale, deterministic,
                                  score_mod, mod_args, mask_mod, tf32)
    except FaError as e:
        views = [t for t in tensors if not t.is_contiguous()]
        if not views or e.status != 1:  # FA_ERROR_INVALID_ARGUMENT
            raise
    return _backward_as_given(*[t.contiguous() for t in tensors], lse, b, mask_args, scale,
                              deterministic, score_mod, mod_args, mask_mod, tf32)


def _backward_as_given(q, k, v, o, do, lse, b, mask_args, scale, deterministic, score_mod,
                       mod_args=(), mask_mod=None, tf32=False):
    """_backward on these tensors as they are (the kernel and struct of
    _backward_plan, made once per layout and options)."""
    torch = _torch
    if torch is None:
        _launch_setup()
        torch = _torch
    dq = _empty_like_layout(q, q.shape[-1])
    dk = _empty_like_layout(k, k.shape[-1])
    dv = _empty_like_layout(v, v.shape[-1])
    key = ("backward", q.device, _layout(q), _layout(k), _layout(v), _layout(o), _layout(do),
           _layout(lse), mask_args, scale, bool(deterministic), score_mod, len(mod_args),
           mask_mod, tf32)
    kernel, template, nbytes, offset = _plan(
        b, key, lambda: _backward_plan(q, k, v, o, do, lse, dq, dk, dv, b, mask_args, scale,
                                       bool(deterministic), score_mod, mod_args, mask_mod,
                                       tf32))
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    base = workspace.data_ptr()
    args = BackwardArgs.from_buffer_copy(template)
    for name, t in zip(BackwardArgs.TENSORS[:9], (q, k, v, o, do, lse, dq, dk, dv)):
        getattr(args, name).data = t.data_ptr()
    args.delta.data, args.dq_accum.data = base, base + offset
    if not mod_args:
        _launch(b.lib, b.lib.fa_attention_backward, kernel, args, q)
    else:
        _launch(b.lib, b.lib.fa_attention_backward_ex, kernel, args, q,
                _mod_arg_array(mod_args), len(mod_args))
    return dq, dk, dv


_ext = None  # the C++ autograd extension's module (fa._torch_ext); False: none


def _ext_plan(b, q, k, v, mask_args, scale, mma, deterministic, tf32=False):
    """The C++ extension's plan for these tensors (fa._torch_ext), or None
    (then the Python path): q, k, v whose strides the kernels take as they
    are, the forward the Python path would launch (plain or split-KV).
    Made once per layout and options."""
    global _ext
    if _ext is None:
        from . import _torch_ext
        _ext = _torch_ext.module() or False
    if not _ext:
        return None
    key = ("ext", q.device, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(),
           q.dtype, k.dtype, v.dtype, mask_args, scale, mma, bool(deterministic), tf32)
    plan, has_backward = _plan(b, key, lambda: _make_ext_plan(b, q, k, v, mask_args, scale,
                                                              mma, deterministic, key, tf32))
    if plan < 0 or (not has_backward and _needs_grad(q, k, v)):
        return None  # the Python path: copies, or the error of a missing backward
    return plan


def _needs_grad(q, k, v):
    import torch
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


_ext_refusals = {}  # plan key -> why the extension does not take such calls


def _checked(lib, check_fn, kernel, args_type, template, pointers, key, what, extra=()):
    """Whether the runtime's GPU-free check accepts `template` with these
    data pointers (real allocations: it checks alignment and overlaps); the
    reason it does not goes to _ext_refusals[key]. Raises FaError for
    anything but a layout the kernel cannot take."""
    args = args_type.from_buffer_copy(template)
    for name, t in pointers.items():
        getattr(args, name).data = t if isinstance(t, int) else t.data_ptr()
    status = check_fn(kernel, ctypes.byref(args), *extra)
    if status == 1:  # FA_ERROR_INVALID_ARGUMENT: strides (the Python path copies) or shapes
        _ext_refusals[key] = "%s: %s" % (what, lib.fa_last_error().decode())
        return False
    check(lib, status)
    return True


def _make_ext_plan(b, q, k, v, mask_args, scale, mma, deterministic, key, tf32=False):
    """Registers the launch plan of key with the extension: the forward's
    struct from _forward_plan, the backward's from _backward_plan with dO in
    O's layout (the extension copies a dO laid out otherwise), each checked
    by the runtime on real allocations. (plan id, whether it has a
    backward); id -1 where the Python path must run (layouts a kernel
    rejects, or bad input, whose FaError the Python path raises)."""
    import torch
    from ._torch_ext import function_address
    if not (q.is_cuda and q.dtype == k.dtype == v.dtype):
        return -1, False
    if any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        return -1, False  # the Python path copies such a tensor
    fn, kernel, template, extra, _, _ = _forward_plan(q, k, v, b, mask_args, scale, mma, None,
                                                      tf32=tf32)
    o = _empty_like_layout(q, v.shape[-1])
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    tensors = dict(q=q, k=k, v=v, o=o, lse=lse)
    if fn is b.lib.fa_attention_forward_splitkv:  # split-KV: a workspace per call
        split_bytes, splits = extra
        workspace = torch.empty(split_bytes, dtype=torch.uint8, device=q.device)
        checked = _checked(b.lib, b.lib.fa_attention_forward_splitkv_check, kernel,
                           ForwardArgs, template, tensors, key, "split-KV forward",
                           (workspace.data_ptr(), split_bytes, splits))
    elif fn is b.lib.fa_attention_forward and extra == ():
        split_bytes, splits = 0, 0
        checked = _checked(b.lib, b.lib.fa_attention_forward_check, kernel, ForwardArgs,
                           template, tensors, key, "forward")
    else:
        _ext_refusals[key] = "the forward is a mod_args launch"
        return -1, False
    if not checked:
        return -1, False
    grads = [_empty_like_layout(t, t.shape[-1]) for t in (q, k, v)]
    bwd, nbytes, offset = (b"", [], 0, 0), 0, 0
    try:
        bwd_kernel, bwd_template, nbytes, offset = _backward_plan(
            q, k, v, o, o, lse, *grads, b, mask_args, scale, bool(deterministic), None,
            tf32=tf32)
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
        base = workspace.data_ptr()
        if _checked(b.lib, b.lib.fa_attention_backward_check, bwd_kernel, BackwardArgs,
                    bwd_template, dict(q=q, k=k, v=v, o=o, d_o=o, lse=lse, dq=grads[0],
                                       dk=grads[1], dv=grads[2], delta=base,
                                       dq_accum=base + offset), key, "backward"):
            bwd = (bwd_template, [getattr(BackwardArgs, n).offset for n in BackwardArgs.TENSORS],
                   function_address(b.lib.fa_attention_backward), bwd_kernel.value)
    except FaError as e:  # no backward kernel: the extension runs only no-grad calls
        _ext_refusals[key] = "backward: %s" % e
    fwd_offsets = [getattr(ForwardArgs, n).offset for n in ("q", "k", "v", "o", "lse")]
    plan = _ext.register_plan(
        "%d:%r" % (b.id, key), template, fwd_offsets, function_address(fn), kernel.value,
        splits, split_bytes, *bwd, list(o.shape),
        list(o.stride()), list(lse.shape), [list(g.stride()) for g in grads], nbytes, offset,
        function_address(b.lib.fa_last_error))
    return plan, bool(bwd[0])


def _make_function():
    import torch

    class AttentionFunction(torch.autograd.Function):
        """O, LSE = attention(Q, K, V) in eager mode; gradients through the
        bundle's bwd kernels. LSE is not differentiable."""

        @staticmethod
        def forward(ctx, q, k, v, b, mask_args, scale, mma, deterministic, score_mod,
                    mod_args, mask_mod, tf32):
            # mod_args ride as a tuple, outside autograd: no gradient to them.
            o, lse = _forward(q, k, v, b, mask_args, scale, mma, score_mod, mod_args, mask_mod,
                              tf32)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.args = (b, mask_args, scale, deterministic, score_mod, mod_args, mask_mod,
                        tf32)
            ctx.mark_non_differentiable(lse)
            # No zero-filled gradient for the LSE (a kernel and an allocation
            # per backward): its gradient arrives as None.
            ctx.set_materialize_grads(False)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            if do is None:  # O does not reach the loss
                return (None,) * 12
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = _backward(q, k, v, o, do, lse, *ctx.args)
            return (dq, dk, dv) + (None,) * 9

    return AttentionFunction


_function = None


_ops = None  # the module fa._torch_ops once PyTorch is seen (it imports torch)


def _register_torch_ops():
    global _ops
    import importlib
    ops = importlib.import_module(__name__ + "._torch_ops")
    ops.register()
    _ops = ops


def attention(q, k, v, causal=False, causal_bottom_right=False, window=None, scale=None,
              return_lse=False, bundle=None, mma=None, deterministic=False, score_mod=None,
              mod_args=None, descale_q=None, descale_k=None, descale_v=None,
              mask_mod=None, sinks=None, allow_tf32=None):
    """Scaled dot-product attention with the bundle's kernels.

    float32: q, k, v of torch.float32 run f32 kernels (mma.sync), forward
    and backward (dQ, dK, dV float32). `allow_tf32` (None: follow
    torch.backends.cuda.matmul.allow_tf32, or its fp32_precision where
    PyTorch has it, as PyTorch's float32 matmuls and FlexAttention do) True
    lets fa take TF32 kernels (one TF32 MMA per
    product, a third of the f32-accurate kernels' MMAs, operands rounded to
    10-bit mantissas; JIT config field 'tf32'), preferred where a bundle has
    them; False takes only f32-accurate kernels (three TF32 MMAs per
    product, as accurate as f32 math). Ignored for other dtypes. It is
    resolved once, at the forward: the backward of the call makes the same
    choice (a TF32 backward after a TF32-allowed forward), whatever the
    switch says by the time loss.backward() runs.

    fp8 (FA3's forward): q, k, v of torch.float8_e4m3fn with descale_q,
    descale_k, descale_v float32 [B, Hkv] (None: ones) compute attention of
    the dequantised inputs x * descale[b, h // (H // Hkv)]; O is bfloat16,
    LSE float32, forward only (an error if an input requires grad), no
    score_mod, the sm_90a wgmma kernels of a bundle built with fp8 configs.
    Block descales, descale_q [B, H, ceil(Nq/64)] (q[b,h,n,:] *
    descale_q[b,h,n//64]) and descale_k [B, Hkv, ceil(Nk/64)] (per key head
    and 64-key block) with descale_v [B, Hkv], take the kernels built for
    them (config field 'blockscale'); descale_q and descale_k must be of
    one form (a mix is an FaError). fa.quantize_fp8(q, k, v, block=...)
    quantises float inputs into either form.

    q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv] CUDA tensors of one dtype
    (float16, bfloat16 or float32), H a multiple of Hkv, any strides with a unit last
    one: a [B,N,H,D] projection passed as x.view(B, N, H, D).transpose(1, 2)
    is read in place and O is written in q's layout (no copies; where the
    kernel cannot take the strides, e.g. a wgmma kernel's TMA needs 16-byte
    multiples, or a bundle before version 7, the forward runs on contiguous
    copies instead). The backward reads the same views and writes dQ, dK, dV
    in q's, k's, v's layouts (contiguous copies only where a kernel cannot
    take the strides, as the forward). `causal` aligns the
    diagonal top-left, `causal_bottom_right` bottom-right; `window=(left,
    right)` keeps keys i+off-left <= j <= i+off+right with off = Nk-Nq.
    `scale` defaults to 1/sqrt(D). Returns O, or (O, LSE) with LSE the f32
    natural-log sum of exponentials per row (-inf for fully masked rows).
    Differentiable in q, k, v when they require grad. `mma` ('mma_sync' or
    'wgmma') forces the forward kernel's instructions; None lets the runtime
    prefer wgmma on sm_90. The backward kernels are the runtime's choice
    (wgmma on sm_90 too, where the bundle has them). `deterministic=True`
    makes the backward use the bundle's deterministic kernel (dQ summed in a
    fixed order: gradients bit-identical run to run, at some speed cost); the
    forward is the same either way. `score_mod` modifies every score after
    the scale, s -> score_mod(s, b, h, q_idx, kv_idx), forward and backward:
    a Python function (fa.mods: traced into fa's IR and compiled on first
    use, e.g. lambda s, b, h, q, kv: 30 * fa.mods.tanh(s / 30)), or the name
    of a score_mod the bundle's kernels were built with (fa-aot --score-mods
    FILE, config field mod=name); None (default) is plain attention. A name
    the bundle lacks raises FaError listing those it has. Under
    torch.compile this is the custom op fa::attention_fwd (backward
    fa::attention_bwd), traced without a graph break; pass a name there
    (fa.mods.trace(fn).name, traced outside the compiled region).

    A score_mod may read tensors: a Python one indexes torch tensors it
    captures (lambda s, b, h, q, kv: s + slopes[h] * (kv - q); fa.mods), a
    named one takes them as `mod_args`, in its library function's order
    (score_mod="alibi_slopes", mod_args=[slopes]). They must be on q's
    device, of the dtype the kernel reads (float32, float16, bfloat16,
    int32 or int64) and of the extents it expects (the runtime checks;
    non-contiguous ones are copied). They are read, never differentiated:
    no gradient flows to them, and a tensor that requires grad is read
    detached. Not yet under torch.compile.

    `mask_mod` hides scores, forward and backward: a Python function
    (b, h, q_idx, kv_idx) -> bool, FlexAttention's mask_mod (fa.mods:
    traced and compiled on first use, e.g. a document mask lambda b, h, q,
    kv: doc[b, q] == doc[b, kv] over doc ids [B, N] it captures), or the
    name of a mask_mod the bundle's kernels were built with (config field
    maskmod=name; its tensors in mod_args, after the score_mod's). It
    combines with causal/window and with a score_mod (applied first). A
    row whose keys are all hidden gets O = 0 and LSE = -inf. Not yet under
    torch.compile.
    `sinks` (a float32 CUDA tensor [H] on q's device) are attention sinks:
    a learnable logit per query head in every row's softmax denominator,
    without a value (fa.sinks); the LSE counts them. When sinks requires
    grad, the backward gives sinks.grad. With a score_mod and a mask_mod
    (and their mod_args); not under torch.compile yet.

    Calls without a score_mod run through fa's C++ autograd
    function where it is built (fa._torch_ext: FA_TORCH_EXT=1 or `python3 -m
    fa._torch_ext`), at a fraction of a Python autograd.Function's host time;
    the kernels and results are the same either way.
    """
    import torch
    global _function
    b = _bundle(bundle)
    mask_args = (causal, causal_bottom_right, None if window is None else tuple(window))
    tf32 = _allow_tf32(q, allow_tf32)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    descales = (descale_q, descale_k, descale_v)
    if fp8 is not None and q.dtype == fp8:
        if score_mod is not None or mask_mod is not None or mod_args:
            raise FaError(1, "fa: fp8 attention takes no score_mod, mask_mod or mod_args")
        if sinks is not None:
            raise FaError(1, "fa: fp8 attention takes no sinks yet")
        o, lse = _attention_fp8(q, k, v, b, mask_args, scale, descales)
        return (o, lse) if return_lse else o
    if any(t is not None for t in descales):
        raise FaError(1, "fa: descale_q/k/v apply to float8_e4m3fn inputs only, got %s"
                      % q.dtype)
    if hasattr(torch, "compiler") and torch.compiler.is_compiling():
        # Traced: only the custom op, whose implementation checks the rest.
        if _ops is None:
            raise FaError(1, "fa: import torch before fa.load() (or call fa.attention once "
                             "outside torch.compile) so that fa's custom ops are registered")
        if mask_mod is not None:
            raise FaError(1, "fa: mask_mods are not supported under torch.compile yet; call "
                             "fa.attention with a mask_mod outside the compiled region")
        if mod_args or (score_mod is not None and not isinstance(score_mod, str)):
            raise FaError(1, "fa: score_mods that read tensors (mod_args) and Python score_mods "
                             "are not supported under torch.compile yet; pass the name of a "
                             "score_mod without mod_args")
        if sinks is not None:
            raise FaError(1, "fa: sinks are not supported under torch.compile yet")
        o, lse = _ops.attention(q, k, v, b, mask_args, scale, mma, bool(deterministic),
                                      score_mod, tf32)
        return (o, lse) if return_lse else o
    _mma_code(mma)
    if sinks is not None:
        from . import sinks as _sinks
        o, lse = _sinks.attention(q, k, v, sinks, b, mask_args, scale, mma,
                                  bool(deterministic), score_mod, mod_args, tf32, mask_mod)
        return (o, lse) if return_lse else o
    score_mod, mask_mod, tensors = _mods(score_mod, mask_mod, mod_args)
    tensors = _mod_args_for(tensors, q)
    if _ops is None:
        _register_torch_ops()
    if score_mod is None and mask_mod is None and not tensors:
        plan = _ext_plan(b, q, k, v, mask_args, scale, mma, deterministic, tf32)
        if plan is not None:
            o, lse = _ext.attention(q, k, v, plan)
            return (o, lse) if return_lse else o
    if _needs_grad(q, k, v):
        if _function is None:
            _function = _make_function()
        o, lse = _function.apply(q, k, v, b, mask_args, scale, mma, bool(deterministic),
                                 score_mod, tensors, mask_mod, tf32)
    else:
        o, lse = _forward(q, k, v, b, mask_args, scale, mma, score_mod, tensors, mask_mod,
                          tf32)
    return (o, lse) if return_lse else o


from .varlen import attention_varlen  # noqa: E402 (it uses the helpers above)
from .kvcache import attention_with_kvcache  # noqa: E402

if "torch" in sys.modules:
    _register_torch_ops()
