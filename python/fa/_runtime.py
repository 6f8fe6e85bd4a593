"""ctypes mirror of include/fa/Runtime/fa_runtime.h. Keep the two in step."""
import ctypes
import glob
import os

FA_SUCCESS = 0
STATUS_NAMES = {0: "success", 1: "invalid argument", 2: "not found", 3: "I/O error",
                4: "bad manifest", 5: "CUDA error", 6: "unsupported", 7: "internal error"}
DTYPES = {"f16": 0, "bf16": 1, "f32": 2, "i32": 3, "i64": 4,  # i32, i64: mod_args only
          "f8e4m3": 5}  # q, k, v of fp8 forwards
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
MASKS = {"none": 0, "causal": 1, "causal_bottom_right": 2, "window": 3}
MASK_NAMES = {v: k for k, v in MASKS.items()}
FWD, BWD = 0, 1
MMAS = {"any": 0, "mma_sync": 1, "wgmma": 2}
MMA_NAMES = {v: k for k, v in MMAS.items()}
MAX_RANK = 4
MAX_TENSOR_MAPS = 4
MAX_MOD_ARGS = 8


class FaError(RuntimeError):
    """A failure reported by libfa_runtime; `status` is the fa_status code."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("dtype", ctypes.c_int),
                ("rank", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_RANK),
                ("strides", ctypes.c_int64 * MAX_RANK)]


class ForwardArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "o", "lse")] + [
        ("scale", ctypes.c_float)]


class BackwardArgs(ctypes.Structure):
    TENSORS = ("q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv", "delta", "dq_accum")
    _fields_ = [(n, Tensor) for n in TENSORS] + [("scale", ctypes.c_float)]


class VarlenArgs(ctypes.Structure):
    """fa_attention_varlen_args: packed q [Tq,H,D], k, v [Tk,Hkv,D|Dv],
    o [Tq,H,Dv], lse [H,Tq] and the sequences' offsets."""
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "o", "lse")] + [
        ("cu_seqlens_q", ctypes.c_uint64), ("cu_seqlens_k", ctypes.c_uint64),
        ("batch", ctypes.c_int32), ("max_seqlen_q", ctypes.c_int32), ("scale", ctypes.c_float)]


class VarlenBackwardArgs(ctypes.Structure):
    """fa_attention_backward_varlen_args: the packed tensors of a varlen
    forward, its dO, the gradients and the f32 workspaces delta [H,Tq] and
    dq_accum [H,Tq,D], then the offsets."""
    TENSORS = BackwardArgs.TENSORS
    _fields_ = [(n, Tensor) for n in TENSORS] + [
        ("cu_seqlens_q", ctypes.c_uint64), ("cu_seqlens_k", ctypes.c_uint64),
        ("batch", ctypes.c_int32), ("max_seqlen_k", ctypes.c_int32), ("scale", ctypes.c_float)]


class KernelQuery(ctypes.Structure):
    _fields_ = [("direction", ctypes.c_int), ("dtype", ctypes.c_int),
                ("head_dim", ctypes.c_int32), ("head_dim_v", ctypes.c_int32),
                ("mask", ctypes.c_int), ("window_left", ctypes.c_int32),
                ("window_right", ctypes.c_int32), ("compute_capability", ctypes.c_int32),
                ("mma", ctypes.c_int), ("score_mod", ctypes.c_char_p),
                ("mask_mod", ctypes.c_char_p), ("sinks", ctypes.c_int32),
                ("allow_tf32", ctypes.c_int32), ("descale_block", ctypes.c_int32)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_char_p), ("target", ctypes.c_char_p),
                ("direction", ctypes.c_int), ("dtype", ctypes.c_int), ("mask", ctypes.c_int),
                ("head_dim", ctypes.c_int32), ("head_dim_v", ctypes.c_int32),
                ("block_q", ctypes.c_int32), ("block_kv", ctypes.c_int32),
                ("warps", ctypes.c_int32), ("stages", ctypes.c_int32),
                ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
                ("has_cubin", ctypes.c_int32), ("mma", ctypes.c_int),
                ("tensor_map_count", ctypes.c_int32), ("dsplit", ctypes.c_int32),
                ("deterministic", ctypes.c_int32), ("persistent_grid", ctypes.c_int32),
                ("score_mod", ctypes.c_char_p), ("split_kv", ctypes.c_int32),
                ("pack_gqa", ctypes.c_int32),
                ("strided", ctypes.c_int32), ("mod_arg_count", ctypes.c_int32),
                ("mask_mod", ctypes.c_char_p), ("varlen", ctypes.c_int32),
                ("block_sparse", ctypes.c_int32), ("sinks", ctypes.c_int32),
                ("paged", ctypes.c_int32), ("kv_append", ctypes.c_int32),
                ("tf32", ctypes.c_int32), ("descale_block", ctypes.c_int32)]


class KvAppendArgs(ctypes.Structure):
    """fa_kv_append_args: new keys and values into a KV cache, rotary optional."""
    _fields_ = [("k_new", Tensor), ("v_new", Tensor), ("k_cache", Tensor), ("v_cache", Tensor),
                ("cache_seqlens", ctypes.c_uint64), ("page_table", ctypes.c_uint64),
                ("max_pages", ctypes.c_int32),
                ("cache_seqlens_host", ctypes.POINTER(ctypes.c_int32)),
                ("page_table_host", ctypes.POINTER(ctypes.c_int32)),
                ("rotary_cos", Tensor), ("rotary_sin", Tensor),
                ("rotary_interleaved", ctypes.c_int32), ("q", Tensor), ("q_out", Tensor),
                ("q_same_position", ctypes.c_int32)]


class QuantizeArgs(ctypes.Structure):
    """fa_quantize_args: x into e4m3 and its descale, rotation optional."""
    _fields_ = [("x", Tensor), ("x8", Tensor), ("descale", Tensor), ("workspace", Tensor),
                ("rotate", ctypes.c_int32)]


class PagedKv(ctypes.Structure):
    """fa_paged_kv: a paged cache's page table, key counts and sizes."""
    _fields_ = [("page_table", ctypes.c_uint64), ("seqused_k", ctypes.c_uint64),
                ("max_pages", ctypes.c_int32), ("page_size", ctypes.c_int32),
                ("num_pages", ctypes.c_int32)]


class BlockMaskDesc(ctypes.Structure):
    """fa_block_mask: a block mask in device memory and the sizes it is for."""
    _fields_ = [("data", ctypes.c_uint64), ("bytes", ctypes.c_uint64)] + [
        (n, ctypes.c_int64) for n in ("batch", "heads", "kv_heads", "mask_heads", "nq", "nk")]


EXTENT_NAMES = {0: "any", 1: "fixed", 2: "batch", 3: "heads", 4: "kv_heads", 5: "nq",
                6: "nk", 7: "nq+nk-1"}


class ModArgInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("extent", ctypes.c_int * MAX_RANK), ("size", ctypes.c_int64 * MAX_RANK)]


class TensorMapArgs(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("param", ctypes.c_int32),
                ("data_type", ctypes.c_int), ("rank", ctypes.c_uint32),
                ("global_address", ctypes.c_uint64), ("global_dim", ctypes.c_uint64 * 5),
                ("global_strides", ctypes.c_uint64 * 4), ("box_dim", ctypes.c_uint32 * 5),
                ("element_strides", ctypes.c_uint32 * 5), ("interleave", ctypes.c_int),
                ("swizzle", ctypes.c_int), ("l2_promotion", ctypes.c_int),
                ("oob_fill", ctypes.c_int)]


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The source checkout this package is imported from, if it is (not when
# installed): its build directories hold libfa_runtime and fa-aot.
CHECKOUT_DIR = os.path.dirname(os.path.dirname(PACKAGE_DIR))
if not os.path.exists(os.path.join(CHECKOUT_DIR, "lib", "Runtime", "CMakeLists.txt")):
    CHECKOUT_DIR = None


def _candidates():
    env = os.environ.get("FA_RUNTIME_LIB")
    if env:
        yield env
    # Shipped inside the package by `pip install` (setup.py).
    shipped = os.path.join(PACKAGE_DIR, "libfa_runtime.so")
    if os.path.exists(shipped):
        yield shipped
    for pattern in ("build*/lib/libfa_runtime.so", "build*/lib/Runtime/libfa_runtime.so"):
        if CHECKOUT_DIR:
            yield from sorted(glob.glob(os.path.join(CHECKOUT_DIR, pattern)))
    yield "libfa_runtime.so"


def open_library(path=None):
    """Loads libfa_runtime.so: `path`, else $FA_RUNTIME_LIB, else the one
    installed in the package, else a build directory of this checkout, else
    the loader's search path. Loaded once per path."""
    key = path or None
    lib = _libraries.get(key)
    if lib is None:
        lib = _libraries[key] = _open_library(path)
    return lib


_libraries = {}


FA_ERROR_UNSUPPORTED = 6  # fa_status (fa_runtime.h)


def _open_library(path):
    errors = []
    for p in ([path] if path else _candidates()):
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError as e:
            errors.append("%s: %s" % (p, e))
    else:
        raise FaError(2, "cannot load libfa_runtime.so (set FA_RUNTIME_LIB or pass "
                         "lib_path):\n  " + "\n  ".join(errors))
    vp, st = ctypes.c_void_p, ctypes.c_int
    sigs = {
        "fa_last_error": ([], ctypes.c_char_p),
        "fa_bundle_load": ([ctypes.c_char_p, ctypes.POINTER(vp)], st),
        "fa_bundle_free": ([vp], None),
        "fa_bundle_kernel_count": ([vp], ctypes.c_int32),
        "fa_bundle_kernel_at": ([vp, ctypes.c_int32], vp),
        "fa_kernel_get_info": ([vp, ctypes.POINTER(KernelInfo)], st),
        "fa_kernel_find": ([vp, ctypes.POINTER(KernelQuery), ctypes.POINTER(vp)], st),
        "fa_kernel_find_for_keys": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                     ctypes.POINTER(vp)], st),
        "fa_kernel_find_deterministic": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                          ctypes.POINTER(vp)], st),
        "fa_attention_forward_check": ([vp, ctypes.POINTER(ForwardArgs)], st),
        "fa_attention_backward_check": ([vp, ctypes.POINTER(BackwardArgs)], st),
        "fa_attention_forward_tensor_maps": ([vp, ctypes.POINTER(ForwardArgs),
                                              ctypes.POINTER(TensorMapArgs),
                                              ctypes.POINTER(ctypes.c_int32)], st),
        "fa_attention_backward_tensor_maps": ([vp, ctypes.POINTER(BackwardArgs),
                                               ctypes.POINTER(TensorMapArgs),
                                               ctypes.POINTER(ctypes.c_int32)], st),
        "fa_attention_forward": ([vp, ctypes.POINTER(ForwardArgs), vp], st),
        "fa_attention_forward_fp8_check": ([vp, ctypes.POINTER(ForwardArgs),
                                            ctypes.POINTER(Tensor)], st),
        "fa_attention_forward_fp8": ([vp, ctypes.POINTER(ForwardArgs), ctypes.POINTER(Tensor),
                                      vp], st),
        "fa_attention_backward_fp8_check": ([vp, ctypes.POINTER(BackwardArgs),
                                             ctypes.POINTER(Tensor)], st),
        "fa_attention_backward_fp8": ([vp, ctypes.POINTER(BackwardArgs), ctypes.POINTER(Tensor),
                                       vp], st),
        "fa_attention_backward": ([vp, ctypes.POINTER(BackwardArgs), vp], st),
        "fa_kernel_get_mod_arg": ([vp, ctypes.c_int32, ctypes.POINTER(ModArgInfo)], st),
        "fa_attention_forward_check_ex": ([vp, ctypes.POINTER(ForwardArgs),
                                           ctypes.POINTER(Tensor), ctypes.c_int32], st),
        "fa_attention_backward_check_ex": ([vp, ctypes.POINTER(BackwardArgs),
                                            ctypes.POINTER(Tensor), ctypes.c_int32], st),
        "fa_attention_forward_ex": ([vp, ctypes.POINTER(ForwardArgs), ctypes.POINTER(Tensor),
                                     ctypes.c_int32, vp], st),
        "fa_attention_backward_ex": ([vp, ctypes.POINTER(BackwardArgs),
                                      ctypes.POINTER(Tensor), ctypes.c_int32, vp], st),
        "fa_kernel_find_splitkv": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                    ctypes.POINTER(vp)], st),
        "fa_kernel_find_packed_gqa": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                       ctypes.c_int32, ctypes.POINTER(vp)], st),
        "fa_kernel_find_packed_gqa_rows": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                            ctypes.POINTER(vp)], st),
        "fa_splitkv_choose_gqa": ([vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                   ctypes.POINTER(ctypes.c_int32)], st),
        "fa_splitkv_workspace_bytes": ([vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64)], st),
        "fa_splitkv_choose": ([vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_int32,
                               ctypes.POINTER(ctypes.c_int32)], st),
        "fa_attention_forward_splitkv_check": ([vp, ctypes.POINTER(ForwardArgs),
                                                ctypes.c_uint64, ctypes.c_uint64,
                                                ctypes.c_int32], st),
        "fa_attention_forward_splitkv_check_ex": ([vp, ctypes.POINTER(ForwardArgs),
                                                   ctypes.c_uint64, ctypes.c_uint64,
                                                   ctypes.c_int32, ctypes.POINTER(Tensor),
                                                   ctypes.c_int32], st),
        "fa_kernel_find_block_sparse": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                         ctypes.POINTER(vp)], st),
        "fa_block_mask_bytes": ([vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                 ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)], st),
        "fa_block_mask_build": ([vp, ctypes.POINTER(BlockMaskDesc), ctypes.POINTER(Tensor),
                                 ctypes.c_int32, vp], st),
        "fa_attention_forward_block_sparse": ([vp, ctypes.POINTER(ForwardArgs),
                                               ctypes.POINTER(BlockMaskDesc),
                                               ctypes.POINTER(Tensor), ctypes.c_int32, vp], st),
        "fa_attention_backward_block_sparse_check": ([vp, ctypes.POINTER(BackwardArgs),
                                                      ctypes.POINTER(BlockMaskDesc),
                                                      ctypes.POINTER(Tensor), ctypes.c_int32],
                                                     st),
        "fa_attention_backward_block_sparse": ([vp, ctypes.POINTER(BackwardArgs),
                                                ctypes.POINTER(BlockMaskDesc),
                                                ctypes.POINTER(Tensor), ctypes.c_int32, vp], st),
        "fa_attention_forward_splitkv": ([vp, ctypes.POINTER(ForwardArgs), ctypes.c_uint64,
                                          ctypes.c_uint64, ctypes.c_int32, vp], st),
        "fa_attention_forward_splitkv_ex": ([vp, ctypes.POINTER(ForwardArgs), ctypes.c_uint64,
                                             ctypes.c_uint64, ctypes.c_int32,
                                             ctypes.POINTER(Tensor), ctypes.c_int32, vp], st),
        "fa_kernel_find_varlen": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                   ctypes.POINTER(vp)], st),
        "fa_kernel_find_paged": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                  ctypes.c_int32, ctypes.POINTER(vp)], st),
        "fa_attention_forward_paged_check": ([vp, ctypes.POINTER(ForwardArgs),
                                              ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                              ctypes.c_uint64, ctypes.c_int32], st),
        "fa_kernel_find_paged_rows": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                       ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                       ctypes.POINTER(vp)], st),
        "fa_kernel_find_paged_append": ([vp, ctypes.POINTER(KernelQuery), ctypes.c_int64,
                                         ctypes.c_int32, ctypes.POINTER(vp)], st),
        "fa_kernel_find_quantize": ([vp, ctypes.c_int, ctypes.c_int64, ctypes.POINTER(vp)], st),
        "fa_quantize_check": ([vp, ctypes.POINTER(QuantizeArgs)], st),
        "fa_quantize": ([vp, ctypes.POINTER(QuantizeArgs), vp], st),
        "fa_kv_append_check": ([vp, ctypes.POINTER(KvAppendArgs)], st),
        "fa_kv_append": ([vp, ctypes.POINTER(KvAppendArgs), vp], st),
        "fa_attention_forward_paged": ([vp, ctypes.POINTER(ForwardArgs),
                                        ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                        ctypes.c_uint64, ctypes.c_int32, vp], st),
        "fa_attention_forward_paged_sinks_check": ([vp, ctypes.POINTER(ForwardArgs),
                                                    ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                                    ctypes.c_uint64, ctypes.c_int32,
                                                    ctypes.POINTER(Tensor)], st),
        "fa_attention_forward_paged_sinks": ([vp, ctypes.POINTER(ForwardArgs),
                                              ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                              ctypes.c_uint64, ctypes.c_int32,
                                              ctypes.POINTER(Tensor), vp], st),
        "fa_attention_forward_paged_check_ex": ([vp, ctypes.POINTER(ForwardArgs),
                                                 ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                                 ctypes.c_uint64, ctypes.c_int32,
                                                 ctypes.POINTER(Tensor), ctypes.c_int32,
                                                 ctypes.POINTER(Tensor)], st),
        "fa_attention_forward_paged_ex": ([vp, ctypes.POINTER(ForwardArgs),
                                           ctypes.POINTER(PagedKv), ctypes.c_uint64,
                                           ctypes.c_uint64, ctypes.c_int32,
                                           ctypes.POINTER(Tensor), ctypes.c_int32,
                                           ctypes.POINTER(Tensor), vp], st),
        "fa_attention_forward_varlen_check": ([vp, ctypes.POINTER(VarlenArgs)], st),
        "fa_attention_forward_varlen": ([vp, ctypes.POINTER(VarlenArgs), vp], st),
        "fa_attention_backward_varlen_check": ([vp, ctypes.POINTER(VarlenBackwardArgs)], st),
        "fa_attention_backward_varlen": ([vp, ctypes.POINTER(VarlenBackwardArgs), vp], st),
        "fa_attention_forward_varlen_sinks_check": ([vp, ctypes.POINTER(VarlenArgs),
                                                     ctypes.POINTER(Tensor)], st),
        "fa_attention_forward_varlen_sinks": ([vp, ctypes.POINTER(VarlenArgs),
                                               ctypes.POINTER(Tensor), vp], st),
        "fa_attention_backward_varlen_sinks_check": ([vp, ctypes.POINTER(VarlenBackwardArgs),
                                                      ctypes.POINTER(Tensor),
                                                      ctypes.POINTER(Tensor)], st),
        "fa_attention_backward_varlen_sinks": ([vp, ctypes.POINTER(VarlenBackwardArgs),
                                                ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                                vp], st),
        "fa_attention_forward_sinks_check": ([vp, ctypes.POINTER(ForwardArgs),
                                              ctypes.POINTER(Tensor), ctypes.c_int32,
                                              ctypes.POINTER(Tensor)], st),
        "fa_attention_backward_sinks_check": ([vp, ctypes.POINTER(BackwardArgs),
                                               ctypes.POINTER(Tensor), ctypes.c_int32,
                                               ctypes.POINTER(Tensor),
                                               ctypes.POINTER(Tensor)], st),
        "fa_attention_forward_sinks": ([vp, ctypes.POINTER(ForwardArgs),
                                        ctypes.POINTER(Tensor), ctypes.c_int32,
                                        ctypes.POINTER(Tensor), vp], st),
        "fa_attention_forward_splitkv_sinks": ([vp, ctypes.POINTER(ForwardArgs),
                                                ctypes.c_uint64, ctypes.c_uint64,
                                                ctypes.c_int32, ctypes.POINTER(Tensor),
                                                ctypes.c_int32, ctypes.POINTER(Tensor),
                                                vp], st),
        "fa_attention_backward_sinks": ([vp, ctypes.POINTER(BackwardArgs),
                                         ctypes.POINTER(Tensor), ctypes.c_int32,
                                         ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                         vp], st),
        "fa_varlen_check_seqlens": ([ctypes.POINTER(ctypes.c_int32),
                                     ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                     ctypes.c_int32], st),
    }
    for name, (args, res) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            # An older runtime (an A/B against a release) lacks newer entry
            # points: each answers "unsupported", as for a kernel it lacks.
            setattr(lib, name, lambda *_: FA_ERROR_UNSUPPORTED)
            continue
        fn.argtypes = args
        fn.restype = res
    return lib


def check(lib, status):
    if status != FA_SUCCESS:
        raise FaError(status, "fa: %s: %s" % (STATUS_NAMES.get(status, status),
                                             lib.fa_last_error().decode()))
