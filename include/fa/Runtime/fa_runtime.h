/*===- fa_runtime.h - fa deployment runtime, C ABI -----------------*- C -*-===*
 *
 * Loads fa kernel bundles (see docs/ABI.md) or single PTX/cubin modules,
 * validates attention arguments and launches the kernels through the CUDA
 * driver API. Depends on libcuda only: no MLIR, LLVM or cudart.
 *
 * Errors: every function returns an fa_status; on failure the calling
 * thread's fa_last_error() holds a message naming the offending argument and
 * its values. Nothing is launched when validation fails. No C++ exception
 * leaves a function of this API: one the runtime meets inside (out of host
 * memory above all) is FA_ERROR_INTERNAL, or for the functions that return
 * no status, their "nothing" value (0, NULL) with fa_last_error() set.
 *
 * Contexts: launches use the calling thread's current CUDA context; when no
 * context is current, the context that owns q's memory is used for the call.
 * Modules are loaded lazily, once per (context, file), on first launch.
 *
 *===----------------------------------------------------------------------===*/

#ifndef FA_RUNTIME_FA_RUNTIME_H
#define FA_RUNTIME_FA_RUNTIME_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; only this API is exported. */
#if defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

/* The newest bundle version this runtime reads (it reads 1 to 4 too).
 * Versions add what an older runtime would launch wrongly rather than reject:
 * 2 the backward's "dsplit" and wgmma backward kernels, 3 deterministic
 * backward kernels (one more parameter, a semaphore workspace), 4 forwards on
 * a persistent grid (another grid, one more parameter), 5 tensor maps passed
 * by value (docs/ABI.md), 6 split-KV decode kernels ("split_kv", entry
 * "merge"), 7 packed-GQA forwards ("pack_gqa": a CTA per key head) and
 * kernels that take the tensors' strides ("stride_param"; on backwards
 * since strided backwards, which older version-7 runtimes reject), 8
 * kernels whose score_mod reads tensors ("mod_args", passed by the _ex
 * launches), 9 kernels with a mask_mod ("mask_mod": chosen only by queries
 * naming it), 10 varlen forwards ("varlen": packed sequences named by
 * cu_seqlens, launched only by fa_attention_forward_varlen), 11 block-sparse
 * forwards, 12 fp8 forwards, 13 kernels with attention sinks ("sinks": one more
 * fwd parameter, a bwd_sink entry; launched only by
 * fa_attention_{forward,backward}_sinks), 14 paged forwards, 15 block-sparse
 * backwards, 16 split-KV kernels with sinks (the merge takes them:
 * fa_attention_forward_splitkv_sinks), 17 run-time window kernels
 * (fa_kernel_find binds the query's window to them), 18 varlen kernels with
 * sinks (fa_attention_{forward,backward}_varlen_sinks; the varlen bwd_sink
 * takes cu_seqlens_q), 19 split-KV forwards that load K and V by TMA (k and v
 * tensor maps after the split count), 20 paged forwards that load K and V by
 * TMA (maps over the pools), 21 block-scaled fp8 forwards ("descale_block":
 * 64), whose [B,H,ceil(Nq/64)] / [B,Hkv,ceil(Nk/64)] descales an older runtime
 * would refuse or, given per-head ones, misread, 22 fp8 backwards, 23
 * block-sparse kernels whose CTAs take their blocks in the block mask's
 * grid order (entry "block_order"), which an older runtime would neither
 * build nor size. Kernels with tensor maps in
 * bundles before 5 are rejected: they read their maps from device memory.
 * score_mod kernels need none: every older runtime rejects a kernel whose
 * "score_mod" is not null. */
#define FA_RUNTIME_BUNDLE_VERSION 23
#define FA_MAX_RANK 4
/* Tensor maps a kernel takes at most (q, k, v for the sm_90a wgmma forward;
 * q, k, v, do for the warp-specialised wgmma backward; k, v for a TMA
 * split-KV forward). */
#define FA_MAX_TENSOR_MAPS 4
/* Tensors a score_mod may read (mod_args) at most. */
#define FA_MAX_MOD_ARGS 8

typedef enum fa_status {
  FA_SUCCESS = 0,
  FA_ERROR_INVALID_ARGUMENT = 1, /* a bad argument; nothing was launched */
  FA_ERROR_NOT_FOUND = 2,        /* no such file, kernel or entry point */
  FA_ERROR_IO = 3,               /* a file could not be read */
  FA_ERROR_BAD_MANIFEST = 4,     /* manifest.json is malformed */
  FA_ERROR_CUDA = 5,             /* a CUDA driver call failed */
  FA_ERROR_UNSUPPORTED = 6,      /* no kernel runs on this device */
  FA_ERROR_INTERNAL = 7, /* the runtime failed inside (out of host memory);
                            the message says where and why */
} fa_status;

typedef enum fa_dtype {
  FA_DTYPE_F16 = 0,
  FA_DTYPE_BF16 = 1,
  FA_DTYPE_F32 = 2,
  FA_DTYPE_I32 = 3, /* mod_args only */
  FA_DTYPE_I64 = 4, /* mod_args only */
  FA_DTYPE_F8E4M3 = 5, /* q, k, v of fp8 forwards (OCP e4m3 "FN") */
} fa_dtype;

typedef enum fa_mask {
  FA_MASK_NONE = 0,
  FA_MASK_CAUSAL = 1,              /* key j <= query i (top-left) */
  FA_MASK_CAUSAL_BOTTOM_RIGHT = 2, /* j <= i + Nk - Nq */
  FA_MASK_WINDOW = 3, /* i+off-left <= j <= i+off+right, off = Nk-Nq; a
                         negative bound is unbounded on that side */
} fa_mask;

typedef enum fa_direction {
  FA_DIRECTION_FWD = 0,
  FA_DIRECTION_BWD = 1,
} fa_direction;

/* The tensor-core instructions a kernel is built on. */
typedef enum fa_mma {
  FA_MMA_ANY = 0,   /* in a query: let the runtime choose */
  FA_MMA_SYNC = 1,  /* mma.sync (sm_80 and later) */
  FA_MMA_WGMMA = 2, /* wgmma with TMA loads (sm_90a only) */
} fa_mma;

/* A tensor on the device. Shapes and strides count elements. Strides must
 * be those of a contiguous row-major tensor of that shape, except for q, k,
 * v and o of a strided kernel (fa_kernel_info.strided), and d_o, dq, dk and
 * dv of a strided backward (dq, dk, dv distinct like o): there any positive
 * strides with a unit last one (a [B,N,H,D] projection viewed as [B,H,N,D]
 * by transpose(1, 2), say), each a multiple of the rows' alignment in
 * elements (16 bytes: 8 f16/bf16 or 4 f32 elements, where the head dim's
 * rows are whole 16-byte chunks; docs/ABI.md "Alignment"), o's elements
 * distinct; a wgmma kernel (TMA) also needs 16-byte multiples. */
typedef struct fa_tensor {
  CUdeviceptr data;
  fa_dtype dtype;
  int32_t rank;
  int64_t shape[FA_MAX_RANK];
  int64_t strides[FA_MAX_RANK];
} fa_tensor;

/* Forward: O = softmax(mask(Q K^T scale)) V and LSE (natural log) per row.
 * q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv], o [B,H,Nq,Dv] in the
 * kernel's dtype (f16, bf16 or f32); lse [B,H,Nq] f32. */
typedef struct fa_attention_args {
  fa_tensor q, k, v, o, lse;
  float scale;
} fa_attention_args;

/* Backward: dQ, dK, dV from Q, K, V, O, dO and the forward's LSE.
 * The workspaces are provided by the caller (the runtime never allocates):
 * delta [B,H,Nq] f32 and dq_accum [B,H,Nq,D] f32; their contents on entry are
 * ignored (bwd_pre overwrites them). dk/dv sum over the query heads of each
 * key head. */
typedef struct fa_attention_backward_args {
  fa_tensor q, k, v, o, d_o, lse;
  fa_tensor dq, dk, dv;
  fa_tensor delta, dq_accum;
  float scale;
} fa_attention_backward_args;

typedef struct fa_kernel_query {
  fa_direction direction;
  fa_dtype dtype;
  int32_t head_dim;
  int32_t head_dim_v; /* 0: same as head_dim */
  fa_mask mask;
  int32_t window_left;  /* FA_MASK_WINDOW only */
  int32_t window_right; /* FA_MASK_WINDOW only */
  /* The device the kernel must run on, as 10*major+minor (90 for sm_90);
   * 0: the device of the current context. */
  int32_t compute_capability;
  /* FA_MMA_ANY (0) prefers a wgmma kernel where one runs on the device; the
   * other values accept only kernels built on those instructions. */
  fa_mma mma;
  /* The score_mod compiled into the kernel, by the name the bundle gives it
   * (manifest "score_mod", e.g. "softcap30"; identifier characters only):
   * only kernels of exactly that name match. NULL: plain attention, only
   * kernels without a score_mod. A zero-initialised query asks for none. */
  const char *score_mod;
  /* The mask_mod compiled into the kernel (manifest "mask_mod", e.g.
   * "document"): only kernels of exactly that name match; NULL: only kernels
   * without one. Last, like score_mod. */
  const char *mask_mod;
  /* 1: only kernels with attention sinks (fa_kernel_info.sinks), launched by
   * fa_attention_{forward,backward}_sinks; 0: only kernels without. */
  int32_t sinks;
  /* For an FA_DTYPE_F32 query: 1 lets the runtime pick a TF32 kernel
   * (fa_kernel_info.tf32: one TF32 product per multiply, PyTorch's
   * allow_tf32), preferred over an f32-accurate one when both match; 0 (a
   * zero-initialised query) accepts only f32-accurate kernels. Ignored for
   * other dtypes. */
  int32_t allow_tf32;
  /* fp8 forwards: 0 (a zero-initialised query) asks for per-(batch, key
   * head) descales [B,Hkv]; 64 for Q and K descales per 64-row block
   * (descale_q [B,H,ceil(Nq/64)], descale_k [B,Hkv,ceil(Nk/64)]; bundle
   * version 21): only kernels of the same fa_kernel_info.descale_block
   * match. Ignored for other dtypes. Last. */
  int32_t descale_block;
} fa_kernel_query;

typedef struct fa_kernel_info {
  const char *tag;
  const char *target; /* "sm_90a", "sm_80", ... */
  fa_direction direction;
  fa_dtype dtype;
  fa_mask mask;
  int32_t head_dim, head_dim_v;
  int32_t block_q, block_kv, warps, stages;
  int32_t window_left, window_right;
  int32_t has_cubin;
  fa_mma mma;               /* FA_MMA_SYNC or FA_MMA_WGMMA */
  int32_t tensor_map_count; /* CUtensorMap parameters the kernel takes */
  /* Backward: CTAs per key block, each owning a column slice of dK, dV and
   * dQ (the bwd grid's x is ceil(Nk/block_kv) * dsplit); 1 otherwise. */
  int32_t dsplit;
  /* 1 for a deterministic backward (dQ bit-reproducible run to run; chosen
   * only by fa_kernel_find_deterministic), 0 otherwise. */
  int32_t deterministic;
  /* 1 when the forward runs on a persistent grid: min(SMs, query tiles)
   * CTAs take tiles from a counter (docs/ABI.md), 0 otherwise. */
  int32_t persistent_grid;
  /* The score_mod compiled into the kernel (applied to every score after
   * the scale; the backward differentiates it), NULL for none. Owned by the
   * bundle. */
  const char *score_mod;
  /* 1: a split-KV decode kernel (split forward + merge), launched only by
   * fa_attention_forward_splitkv. Last, like score_mod: a caller built
   * against an older header reads the fields before it. */
  int32_t split_kv;
  /* 1: a packed-GQA forward (the query heads of one key head share a CTA's
   * rows; grid y is the key heads), returned only by
   * fa_kernel_find_packed_gqa. Last, like split_kv. */
  int32_t pack_gqa;
  /* 1: the forward takes the strides of q, k, v and o, the backward those
   * of q, k, v, o, d_o, dq, dk and dv (any views with a unit last stride,
   * fa_tensor); 0: contiguous tensors only. */
  int32_t strided;
  /* The tensors the kernel's score_mod reads (mod_args), passed to the _ex
   * launches; fa_kernel_get_mod_arg describes each. 0 for most kernels.
   * Last. */
  int32_t mod_arg_count;
  /* The mask_mod compiled into the kernel (elements it returns false for
   * are masked out, with the mask), NULL for none. Owned by the bundle.
   * Last. */
  const char *mask_mod;
  /* 1: a varlen forward (packed sequences, cu_seqlens; bundle version 10),
   * returned only by fa_kernel_find_varlen and launched only by
   * fa_attention_forward_varlen. */
  int32_t varlen;
  /* 1: a block-sparse forward (bundle version 11): launched only by
   * fa_attention_forward_block_sparse with a block mask. */
  int32_t block_sparse;
  /* 1: attention sinks (bundle version 13): a learnable logit per query head
   * in every row's softmax denominator; launched only by
   * fa_attention_forward_sinks / fa_attention_backward_sinks. */
  int32_t sinks;
  /* 1: a paged-KV split forward (bundle version 14), returned only by
   * fa_kernel_find_paged and launched only by fa_attention_forward_paged. */
  int32_t paged;
  /* 1: a split forward whose module also holds fa_kv_append (config field
   * "append"; launched by fa_kv_append). */
  int32_t kv_append;
  /* 1: an f32 kernel that multiplies in TF32 (10-bit mantissas, one MMA per
   * product; manifest "tf32"), chosen only by queries with allow_tf32 = 1;
   * 0: every other kernel (an f32 one is as accurate as f32 math: three
   * TF32 MMAs per product). */
  int32_t tf32;
  /* fp8 forwards: 64 when descale_q and descale_k hold a factor per 64-row
   * block of queries (keys), [B,H,ceil(Nq/64)] and [B,Hkv,ceil(Nk/64)]
   * (manifest "descale_block", bundle version 21), chosen only by queries
   * with that descale_block; 0 for per-(batch, key head) descales and every
   * other kernel. Last. */
  int32_t descale_block;
} fa_kernel_info;

/* What a mod_arg's extent must be (manifest "mod_args"[i].dims[d]). */
typedef enum fa_extent {
  FA_EXTENT_ANY = 0,      /* any size >= 1: the kernel clamps its reads */
  FA_EXTENT_FIXED = 1,    /* exactly fa_mod_arg_info.size[d] */
  FA_EXTENT_BATCH = 2,    /* B of q */
  FA_EXTENT_HEADS = 3,    /* H of q */
  FA_EXTENT_KV_HEADS = 4, /* Hkv of k */
  FA_EXTENT_NQ = 5,       /* Nq of q */
  FA_EXTENT_NK = 6,       /* Nk of k */
  FA_EXTENT_NQ_NK = 7,    /* Nq + Nk - 1 (a relative-position table) */
} fa_extent;

/* One tensor a kernel's score_mod reads: a contiguous row-major tensor of
 * `dtype` and `rank` whose extents are as `extent` says. */
typedef struct fa_mod_arg_info {
  fa_dtype dtype;
  int32_t rank;
  fa_extent extent[FA_MAX_RANK];
  int64_t size[FA_MAX_RANK]; /* FA_EXTENT_FIXED only, else 0 */
} fa_mod_arg_info;

/* The arguments of one cuTensorMapEncodeTiled call, as the runtime makes
 * them for a launch (docs/ABI.md, "sm_90a wgmma entries"): dimensions
 * innermost first, strides in bytes for dimensions 1..rank-1. */
typedef struct fa_tensor_map_args {
  const char *tensor; /* "q", "k", "v" or "do" (backward) */
  int32_t param;      /* the kernel parameter that receives the map */
  CUtensorMapDataType data_type;
  uint32_t rank;
  CUdeviceptr global_address;
  uint64_t global_dim[5];
  uint64_t global_strides[4];
  uint32_t box_dim[5];
  uint32_t element_strides[5];
  CUtensorMapInterleave interleave;
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion l2_promotion;
  CUtensorMapFloatOOBfill oob_fill;
} fa_tensor_map_args;

typedef struct fa_bundle fa_bundle;
typedef struct fa_kernel fa_kernel; /* owned by its bundle */
typedef struct fa_module fa_module;

/* The calling thread's message for the last failure ("" if none). */
FA_API const char *fa_last_error(void);
FA_API const char *fa_status_string(fa_status status);
FA_API const char *fa_dtype_name(fa_dtype dtype);

/* Parses dir/manifest.json; needs no GPU. Module files are read on first
 * launch. */
FA_API fa_status fa_bundle_load(const char *dir, fa_bundle **out);
FA_API void fa_bundle_free(fa_bundle *bundle);
FA_API int32_t fa_bundle_kernel_count(const fa_bundle *bundle);
FA_API const fa_kernel *fa_bundle_kernel_at(const fa_bundle *bundle,
                                            int32_t index);
FA_API fa_status fa_kernel_get_info(const fa_kernel *kernel,
                                    fa_kernel_info *out);
/* The mod_arg `index` (0 <= index < fa_kernel_info.mod_arg_count). */
FA_API fa_status fa_kernel_get_mod_arg(const fa_kernel *kernel, int32_t index,
                                       fa_mod_arg_info *out);

/* Picks the kernel of the bundle that matches the query and runs on its
 * device. Its score_mod must be the query's exactly (NULL: none); when no
 * kernel has it, the message lists the score_mods the bundle has for the
 * query's direction, dtype, head dims and mask. An f32 query with
 * allow_tf32 = 1 takes a TF32 kernel that runs on the device over any
 * f32-accurate one; with 0, never a TF32 kernel (the message says when the
 * bundle has only those). With mma FA_MMA_ANY a wgmma kernel (sm_90a, so
 * only on a 9.0 device) wins over mma.sync ones; then a cubin built for
 * exactly that compute capability, then PTX the driver can JIT (sm_XY on
 * any device >= XY; sm_XYa only on XY). */
FA_API fa_status fa_kernel_find(const fa_bundle *bundle,
                                const fa_kernel_query *query,
                                const fa_kernel **out);

/* fa_kernel_find for a sequence of nk keys: where several kernels of the
 * preferred kind match and differ only in their tiles (e.g. block_kv 128 and
 * 192), picks the one whose key loop costs least for nk keys, counting the
 * padding of the last key tile. nk = 0 (what fa_kernel_find passes) means
 * unknown and picks the widest key tile. */
FA_API fa_status fa_kernel_find_for_keys(const fa_bundle *bundle,
                                         const fa_kernel_query *query,
                                         int64_t nk, const fa_kernel **out);
/* fa_kernel_find and fa_kernel_find_for_keys never return a deterministic
 * backward kernel. This one returns only those (same matching, ranking and
 * tile choice; nk = 0 if unknown): dQ is then summed in a fixed order and is
 * bit-identical from run to run, at some cost in speed. Each launch of such a
 * kernel allocates a small semaphore workspace on the launch stream
 * (a memory pool of the runtime's, or cuMemAllocAsync under stream capture;
 * B*H*ceil(Nq/64)*4 bytes). */
FA_API fa_status fa_kernel_find_deterministic(const fa_bundle *bundle,
                                              const fa_kernel_query *query,
                                              int64_t nk,
                                              const fa_kernel **out);

/* Argument checks that need no GPU: shapes against the kernel's config,
 * dtypes, contiguity, alignment, scale, 32-bit size limits, overlap of
 * outputs with other tensors. The launch functions run these first. */
FA_API fa_status fa_attention_forward_check(const fa_kernel *kernel,
                                            const fa_attention_args *args);
FA_API fa_status fa_attention_backward_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args);

/* The tensor maps a forward launch of `kernel` builds for `args` (after
 * fa_attention_forward_check): *count entries of out, 0 for kernels that
 * take none. Needs no GPU. */
FA_API fa_status fa_attention_forward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count);

/* The same for a backward launch (after fa_attention_backward_check): the
 * maps of its main kernel, 0 for kernels that take none. */
FA_API fa_status fa_attention_backward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count);

/* The grids fa_attention_backward launches bwd_pre, bwd and bwd_post with
 * for `args` (after fa_attention_backward_check), as docs/ABI.md gives them.
 * Needs no GPU. */
FA_API fa_status fa_attention_backward_grids(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    unsigned grids[3][3]);

/* Validate (above, plus: every pointer is device memory of the context's
 * device holding the whole tensor, and the stream belongs to the context),
 * then launch asynchronously on `stream`.
 *
 * Every launch can be captured into a CUDA graph (cuStreamBeginCapture):
 * kernels that take tensor maps (wgmma) get them by value as kernel
 * parameters, and the only device memory a launch uses beside the caller's
 * is a small zeroed workspace of a persistent forward (its tile counter) or
 * a deterministic backward (its semaphores). Under capture it is allocated,
 * zeroed and freed on `stream` (cuMemAllocAsync, cuMemsetD32Async,
 * cuMemFreeAsync), which the capture records as graph nodes; eager launches
 * reuse a tile counter per stream and take semaphores from the runtime's
 * memory pool (docs/ABI.md). A replay reads the tensors at the
 * addresses captured: new data goes into the same buffers. Load the modules
 * before capturing (one eager launch of each kernel, as PyTorch's warm-up
 * does): the first launch in a context loads its module. A graph holds the
 * bundle's kernels: free the bundle (fa_bundle_free unloads its modules)
 * only after the graphs that captured them are destroyed. */
FA_API fa_status fa_attention_forward(const fa_kernel *kernel,
                                      const fa_attention_args *args,
                                      CUstream stream);
/* Launches bwd_pre, bwd and bwd_post in order on `stream`. A deterministic
 * kernel's bwd also gets a zeroed semaphore workspace allocated and freed in
 * stream order around it (stream-ordered allocator of the context's device). */
FA_API fa_status fa_attention_backward(const fa_kernel *kernel,
                                       const fa_attention_backward_args *args,
                                       CUstream stream);

/* Split-KV decode (kernels whose manifest entry has "split_kv": true, which
 * only fa_kernel_find_splitkv returns: the other searches never do; it
 * ranks them as fa_kernel_find_for_keys does). The key range of every (batch, head, query tile) is
 * split over `splits` CTAs, each leaving a partial O and LSE in the caller's
 * workspace; a merge joins them into args->o and args->lse.
 *
 * Bytes of the workspace for `splits` splits: f32 o_part [S,B,H,Nq,Dv] then
 * lse_part [S,B,H,Nq] (H: query heads; Dv: the kernel's). Needs no GPU. */
FA_API fa_status fa_kernel_find_splitkv(const fa_bundle *bundle,
                                        const fa_kernel_query *query,
                                        int64_t nk, const fa_kernel **out);
FA_API fa_status fa_splitkv_workspace_bytes(const fa_kernel *kernel,
                                            int64_t batch, int64_t heads,
                                            int64_t nq, int32_t splits,
                                            uint64_t *bytes);
/* A split count for a problem on a GPU of `sm_count` SMs: when the plain
 * grid (query tiles x heads x batch) already has a CTA per SM, the fewest
 * splits (at most 4) whose last wave is >= 85% full, else 1; otherwise as
 * many splits as keep the grid within two CTAs per SM (one wave), at most
 * 128, each split at least 4 key blocks and batch x splits <= 65535. Needs
 * no GPU. */
FA_API fa_status fa_splitkv_choose(const fa_kernel *kernel, int64_t batch,
                                   int64_t heads, int64_t nq, int64_t nk,
                                   int32_t sm_count, int32_t *splits);
/* fa_splitkv_choose with the key heads, which a packed-GQA kernel's grid
 * depends on (fa_splitkv_choose refuses those): its grid has
 * batch x kv_heads x ceil(Nq / max(block_q / (heads / kv_heads), 1)) CTAs
 * per split. */
FA_API fa_status fa_splitkv_choose_gqa(const fa_kernel *kernel, int64_t batch,
                                       int64_t heads, int64_t kv_heads,
                                       int64_t nq, int64_t nk,
                                       int32_t sm_count, int32_t *splits);
/* Packed-GQA forwards ("pack_gqa": true; bundle version 7), which only this
 * search returns, ranked as fa_kernel_find_for_keys does: split-KV ones
 * (launched by fa_attention_forward_splitkv) when split_kv is 1, plain ones
 * (fa_attention_forward) when 0. A packed kernel computes the same outputs
 * as the unpacked one; its CTA (batch, key head, tile) holds the
 * G = H / Hkv query heads of the key head, max(block_q / G, 1) queries of
 * each, so K/V blocks are read once per key head. It needs G <= block_q. */
FA_API fa_status fa_kernel_find_packed_gqa(const fa_bundle *bundle,
                                           const fa_kernel_query *query,
                                           int64_t nk, int32_t split_kv,
                                           const fa_kernel **out);
/* fa_kernel_find_packed_gqa for a problem of `group` = H / Hkv query heads
 * per key head and `nq` queries: among the packed kernels whose block_q holds
 * a group, the one whose query tiles cost least (the smallest tile that
 * holds a key head's group x nq rows; past every tile, the largest), then as
 * fa_kernel_find_packed_gqa ranks. fa_kernel_find_packed_gqa, not knowing
 * the rows, takes the largest of equally ranked tiles. group, nq in
 * [1, 2^31 - 1]. */
FA_API fa_status fa_kernel_find_packed_gqa_rows(const fa_bundle *bundle,
                                                const fa_kernel_query *query,
                                                int64_t group, int64_t nq,
                                                int64_t nk, int32_t split_kv,
                                                const fa_kernel **out);
/* The checks of fa_attention_forward_check, then: splits >= 1 and
 * batch x splits <= 65535, the workspace non-null, 16-byte aligned, at least
 * fa_splitkv_workspace_bytes long and overlapping no tensor. Needs no GPU. */
FA_API fa_status fa_attention_forward_splitkv_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits);
/* Validate (above, plus the device checks of fa_attention_forward, the
 * workspace included), then launch the split forward and the merge in order
 * on `stream`. Capturable in a CUDA graph like fa_attention_forward. */
FA_API fa_status fa_attention_forward_splitkv(const fa_kernel *kernel,
                                              const fa_attention_args *args,
                                              CUdeviceptr workspace,
                                              uint64_t workspace_bytes,
                                              int32_t splits, CUstream stream);

/* A paged KV cache (bundle version 14; docs/ABI.md "Paged KV cache"),
 * flash-attn's layout: args->k [num_pages, page_size, Hkv, D] and args->v
 * [num_pages, page_size, Hkv, Dv] are pools of pages (any strides with a
 * unit last one, 16-byte aligned, each page's rows one row stride apart:
 * strides[0] = page_size x strides[1]); page_table i32 [batch, max_pages]
 * (contiguous) lists each sequence's pages in order; seqused_k i32 [batch]
 * its key count. Key n of sequence b is row n % page_size of page
 * page_table[b, n / page_size]. The kernel clamps a page index into
 * [0, num_pages) and a key count into [0, max_pages x page_size]; the
 * runtime never reads either array (no synchronisation). q, o, lse are as
 * for fa_attention_forward; masks measure each sequence's Nk as its count. */
typedef struct fa_paged_kv {
  CUdeviceptr page_table; /* i32 [batch, max_pages], 4-byte aligned */
  CUdeviceptr seqused_k;  /* i32 [batch], 4-byte aligned */
  int32_t max_pages;      /* >= 1 */
  int32_t page_size;      /* a positive multiple of 16: k.shape[1] */
  int32_t num_pages;      /* k.shape[0] */
} fa_paged_kv;
/* Paged-KV split forwards ("paged": true), which only this search returns
 * (and it returns no other), ranked as fa_kernel_find_for_keys ranks for
 * `nk` keys (the longest sequence, or 0): packed-GQA ones when pack_gqa is
 * 1, unpacked ones when 0. */
FA_API fa_status fa_kernel_find_paged(const fa_bundle *bundle,
                                      const fa_kernel_query *query, int64_t nk,
                                      int32_t pack_gqa,
                                      const fa_kernel **out);
/* fa_kernel_find_paged's packed-GQA kernels (with fa_kv_append when append
 * is 1) chosen for the rows as fa_kernel_find_packed_gqa_rows chooses:
 * `group` query heads per key head, `nq` queries (Sq). */
FA_API fa_status fa_kernel_find_paged_rows(const fa_bundle *bundle,
                                           const fa_kernel_query *query,
                                           int64_t group, int64_t nq,
                                           int64_t nk, int32_t append,
                                           const fa_kernel **out);
/* The checks of fa_attention_forward_splitkv_check with the paged K, V
 * above, and: `paged` non-null, max_pages >= 1, page_size a positive
 * multiple of 16 equal to k.shape[1] and v.shape[1], num_pages equal to
 * k.shape[0] and v.shape[0], max_pages x page_size and batch x max_pages
 * below 2^31, page_table and seqused_k non-null, 4-byte aligned and
 * overlapping no output; a paged kernel only (the split and plain launches
 * refuse one). Needs no GPU. */
FA_API fa_status fa_attention_forward_paged_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace,
    uint64_t workspace_bytes, int32_t splits);
/* The tensor maps a paged launch of `kernel` builds (after the checks of
 * the cache and the pools): none for a kernel that gathers its pages by
 * cp.async; for one that loads them by TMA (config field tma, bundle
 * version 20) the k and v maps, 4-D over each pool {D, page_size, Hkv,
 * num_pages} with strides row, head, page and boxes of 64 x 16 keys.
 * Needs no GPU. */
FA_API fa_status fa_attention_forward_paged_tensor_maps(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, fa_tensor_map_args out[FA_MAX_TENSOR_MAPS],
    int32_t *count);
/* Validate (above, plus the device checks: every tensor, page_table and
 * seqused_k memory of the context's device), then launch the split forward
 * and the merge on `stream`. fa_splitkv_workspace_bytes and
 * fa_splitkv_choose{,_gqa} (nk: the longest sequence's keys) serve these
 * kernels too. Capturable in a CUDA graph. */
FA_API fa_status fa_attention_forward_paged(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace,
    uint64_t workspace_bytes, int32_t splits, CUstream stream);
/* The paged decode of a kernel with sinks (fa_kernel_info.sinks and paged;
 * config `...:splitkv:paged:sinks`): the arguments above plus the sinks f32
 * [H] (contiguous, 16-byte aligned, overlapping no output), which the merge
 * joins to each row as fa_attention_forward_splitkv_sinks does. The launch
 * above refuses such kernels and this one kernels without sinks. */
FA_API fa_status fa_attention_forward_paged_sinks_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace,
    uint64_t workspace_bytes, int32_t splits, const fa_tensor *sinks);
FA_API fa_status fa_attention_forward_paged_sinks(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace,
    uint64_t workspace_bytes, int32_t splits, const fa_tensor *sinks,
    CUstream stream);
/* The paged decode of any paged kernel, with the tensors its score_mod and
 * mask_mod read (mod_args, mod_arg_count: as fa_attention_forward_ex; a
 * dimension named "nk" is the page table's capacity max_pages x page_size,
 * "kv_heads" the pools' heads) and, for a kernel with sinks, the sinks
 * (NULL for one without; either mismatch is refused). Its kv_idx is the key's
 * position in its sequence, q_idx the query's row (0 .. Nq - 1). */
FA_API fa_status fa_attention_forward_paged_check_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *mod_args, int32_t mod_arg_count,
    const fa_tensor *sinks);
FA_API fa_status fa_attention_forward_paged_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *mod_args, int32_t mod_arg_count,
    const fa_tensor *sinks, CUstream stream);

/* Appending new tokens to a KV cache before a decode (flash-attn's
 * flash_attn_with_kvcache with k, v, rotary_cos, rotary_sin; docs/ABI.md
 * "Appending to a KV cache"). k_new [B, Nnew, Hkv, D] and v_new
 * [B, Nnew, Hkv, Dv] become rows cache_seqlens[b] .. + Nnew - 1 of sequence
 * b of k_cache / v_cache: contiguous caches [B, Ncap, Hkv, D] (page_table 0)
 * or pools of pages [num_pages, page_size, Hkv, D] read through page_table
 * (i32 [B, max_pages]). With rotary_cos.data non-zero, rotary_cos and
 * rotary_sin (f32 [max_pos, rotary_dim / 2], 2 <= rotary_dim <= D) rotate
 * the new keys at their positions, pairs (2i, 2i+1) when rotary_interleaved
 * else (i, i + rotary_dim / 2), and, with q.data non-zero, q [B, Sq, H, D]
 * into q_out at positions cache_seqlens[b] + i (every row at
 * cache_seqlens[b] when q_same_position), each in f32 from separately
 * rounded products and rounded once. Every tensor is contiguous (row-major
 * strides) and of the kernel's dtype unless said otherwise.
 * cache_seqlens_host (and page_table_host when paged) are host copies of
 * the device arrays: the runtime rejects a call whose cache_seqlens[b] is
 * negative or whose cache_seqlens[b] + Nnew exceeds the capacity (Ncap or
 * max_pages x page_size), or a page-table entry that a new row would go
 * through outside [0, num_pages), and a rotary position past max_pos - 1;
 * the kernel itself also drops rows past the capacity and clamps page
 * indices, so no call writes outside the caches. */
typedef struct fa_kv_append_args {
  fa_tensor k_new, v_new, k_cache, v_cache;
  CUdeviceptr cache_seqlens;         /* i32 [B], 4-byte aligned */
  CUdeviceptr page_table;            /* i32 [B, max_pages]; 0: contiguous */
  int32_t max_pages;                 /* paged: >= 1; contiguous: 0 */
  const int32_t *cache_seqlens_host; /* [B], required */
  const int32_t *page_table_host;    /* [B, max_pages], required when paged */
  fa_tensor rotary_cos, rotary_sin;  /* f32; data 0: no rotary */
  int32_t rotary_interleaved;
  fa_tensor q, q_out;                /* [B, Sq, H, D]; data 0: q untouched */
  int32_t q_same_position;
} fa_kv_append_args;
/* fa_kernel_find_paged restricted to kernels with fa_kv_append. */
FA_API fa_status fa_kernel_find_paged_append(const fa_bundle *bundle,
                                             const fa_kernel_query *query,
                                             int64_t nk, int32_t pack_gqa,
                                             const fa_kernel **out);
/* The checks of fa_kv_append without a GPU (a kernel with kv_append: 1). */
FA_API fa_status fa_kv_append_check(const fa_kernel *kernel,
                                    const fa_kv_append_args *args);
/* Validate (above, plus: every tensor memory of the context's device),
 * then launch fa_kv_append on `stream`; the cache then holds
 * cache_seqlens[b] + Nnew rows per sequence for the decode that follows
 * (the caller passes those counts as its seqused_k). */
FA_API fa_status fa_kv_append(const fa_kernel *kernel,
                              const fa_kv_append_args *args, CUstream stream);

/* The launches and checks above for kernels whose score_mod reads tensors
 * (fa_kernel_info.mod_arg_count > 0; bundle version 8): `mod_args` holds
 * exactly that many tensors, in the kernel's order (NULL when 0). Each is
 * checked against its fa_mod_arg_info and the call's sizes: non-null data
 * aligned to its element size, dtype, rank, contiguous row-major strides,
 * every extent >= 1 and as the kernel requires (B, H, Hkv, Nq, Nk,
 * Nq + Nk - 1, a fixed size or any), at most 2^31 - 1 elements, no overlap
 * with an output; at launch also device memory of the context's device.
 * The kernels only read them (no gradient flows to them). The plain
 * functions are these with no mod_args, so they refuse kernels that take
 * some, naming what the kernel reads. */
FA_API fa_status fa_attention_forward_check_ex(const fa_kernel *kernel,
                                               const fa_attention_args *args,
                                               const fa_tensor *mod_args,
                                               int32_t mod_arg_count);
FA_API fa_status fa_attention_backward_check_ex(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count);
FA_API fa_status fa_attention_forward_splitkv_check_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count);
FA_API fa_status fa_attention_forward_ex(const fa_kernel *kernel,
                                         const fa_attention_args *args,
                                         const fa_tensor *mod_args,
                                         int32_t mod_arg_count,
                                         CUstream stream);
FA_API fa_status fa_attention_backward_ex(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count, CUstream stream);
FA_API fa_status fa_attention_forward_splitkv_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count, CUstream stream);

/* Varlen forward (kernels whose manifest entry has "varlen": true; bundle
 * version 10): B sequences of different lengths packed along the token
 * axis. Sequence b owns query rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q,
 * o and lse and key rows [cu_seqlens_k[b], cu_seqlens_k[b+1]) of k and v;
 * masks count from each sequence's own start with its own lengths
 * (docs/ABI.md, "Varlen wgmma forward").
 *
 * q [Tq,H,D], k [Tk,Hkv,D], v [Tk,Hkv,Dv], o [Tq,H,Dv] in the kernel's dtype,
 * any strides with a unit last one (each a multiple of 16 bytes: TMA), o's
 * elements distinct; lse [H,Tq] f32, contiguous. cu_seqlens_q/k: device
 * pointers to i32 [batch + 1], 4-byte aligned, non-decreasing from 0 to at
 * most Tq (Tk). max_seqlen_q: at least the longest query sequence (the
 * grid's x is ceil(max_seqlen_q / block_q); rows of a longer sequence past
 * it are not computed). The launch does not read the offsets (that would
 * need a synchronisation): the kernel clamps them to [0, T], so bad ones
 * cannot address memory outside the tensors, and fa_varlen_check_seqlens
 * checks a host copy. Rows outside every sequence are not written.
 * Tq = 0 or max_seqlen_q = 0: nothing to compute, nothing is launched (the
 * tensors of 0 tokens may have null data). Tk = 0 with Tq > 0: every query
 * sees no key: o is filled with 0 and lse with -inf (o's heads adjacent in
 * its rows, strides[1] = Dv). */
typedef struct fa_attention_varlen_args {
  fa_tensor q, k, v, o, lse;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  int32_t batch;        /* B >= 1, at most 65535 (the grid's z) */
  int32_t max_seqlen_q; /* >= 0 */
  float scale;
} fa_attention_varlen_args;

/* The varlen forward for the query (fa_kernel_find's matching and ranking
 * over the bundle's varlen kernels only; max_seqlen_k picks among tiles as
 * nk does, 0 if unknown). The other searches never return them. */
FA_API fa_status fa_kernel_find_varlen(const fa_bundle *bundle,
                                       const fa_kernel_query *query,
                                       int64_t max_seqlen_k,
                                       const fa_kernel **out);
/* The argument checks that need no GPU (shapes against the kernel and each
 * other, dtypes, strides, alignment, batch, max_seqlen_q, the cu_seqlens
 * pointers' alignment, scale, overlap). */
FA_API fa_status fa_attention_forward_varlen_check(
    const fa_kernel *kernel, const fa_attention_varlen_args *args);
/* The tensor maps a varlen launch builds (4-D over the packed tensors:
 * {D, T, H, 1}, strides row, head, whole tensor; after the checks); *count
 * is 0 when nothing would be launched. Needs no GPU. */
FA_API fa_status fa_attention_forward_varlen_tensor_maps(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count);
/* The launch grid (ceil(max_seqlen_q / block_q), H, batch); all 0 when
 * nothing would be launched. Needs no GPU. */
FA_API fa_status fa_attention_forward_varlen_grid(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    unsigned grid[3]);
/* Validate (above, plus: the tensors and both cu_seqlens arrays are device
 * memory of the context's device holding them whole, the stream belongs to
 * the context), then launch asynchronously on `stream`; capturable in a
 * CUDA graph. */
FA_API fa_status fa_attention_forward_varlen(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    CUstream stream);
/* Varlen backward (kernels whose manifest entry has "varlen": true and
 * direction "bwd", mma.sync; fa_kernel_find_varlen with FA_DIRECTION_BWD):
 * dQ, dK, dV of a varlen forward, each sequence's as fa_attention_backward
 * computes them (masks from each sequence's own start and lengths).
 *
 * q, o, d_o, dq [Tq,H,·] and k, v, dk, dv [Tk,Hkv,·] in the kernel's dtype,
 * any strides with a unit last one (each a multiple of the rows'
 * alignment), dq, dk, dv distinct; lse [H,Tq] f32 contiguous (the
 * forward's); the caller's workspaces delta [H,Tq] and dq_accum [H,Tq,D]
 * f32, contiguous, their contents ignored. cu_seqlens_q/k as for the
 * forward. max_seqlen_k: at least the longest key sequence (the main
 * kernel's grid x is ceil(max_seqlen_k / block_kv)·dsplit; keys of a longer
 * sequence past it get no gradient). dq rows outside every sequence are 0;
 * dk and dv rows outside every sequence are not written. Tq = 0: dk and dv
 * are filled with 0 (their heads adjacent in each row); Tk = 0: dq is
 * filled with 0 (likewise); Tq = Tk = 0: nothing is launched. Validated as fa_attention_backward is, then launched
 * asynchronously on `stream` (capturable in a CUDA graph). */
typedef struct fa_attention_backward_varlen_args {
  fa_tensor q, k, v, o, d_o, lse;
  fa_tensor dq, dk, dv;
  fa_tensor delta, dq_accum;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  int32_t batch;        /* B >= 1, at most 65535 (the grid's z) */
  int32_t max_seqlen_k; /* >= 0 */
  float scale;
} fa_attention_backward_varlen_args;

/* The GPU-free checks of a varlen backward. */
FA_API fa_status fa_attention_backward_varlen_check(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args);
FA_API fa_status fa_attention_backward_varlen(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    CUstream stream);

/* Varlen kernels with attention sinks (fa_kernel_info.sinks and varlen;
 * bundle version 18; config `...:varlen:sinks`): the arguments above plus
 * sinks f32 [H] (contiguous, 16-byte aligned), joined to every row of every
 * sequence as fa_attention_forward_sinks joins them: a row that sees no key
 * gets O = 0 and LSE = sinks[h] (so does every row when Tk = 0). The
 * backward also writes d_sinks f32 [H] (contiguous, 16-byte aligned,
 * overlapping no other tensor): -sum over the rows of every sequence of
 * exp(sinks[h] - lse)·delta, in a fixed order (bit-identical run to run),
 * overwritten; 0 when Tq = 0 or Tk = 0. The plain varlen launches refuse
 * these kernels, and these refuse varlen kernels without sinks. */
FA_API fa_status fa_attention_forward_varlen_sinks_check(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    const fa_tensor *sinks);
FA_API fa_status fa_attention_forward_varlen_sinks(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    const fa_tensor *sinks, CUstream stream);
FA_API fa_status fa_attention_backward_varlen_sinks_check(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    const fa_tensor *sinks, const fa_tensor *d_sinks);
FA_API fa_status fa_attention_backward_varlen_sinks(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    const fa_tensor *sinks, const fa_tensor *d_sinks, CUstream stream);

/* Checks host copies of the offsets against the packed tensors: each array
 * starts at 0, never decreases and ends at most at its total (tokens past
 * the end belong to no sequence), and no sequence is longer than
 * max_seqlen_q (max_seqlen_k; a negative one is not checked). The message
 * names the first offending sequence. */
FA_API fa_status fa_varlen_check_seqlens(const int32_t *cu_seqlens_q,
                                         const int32_t *cu_seqlens_k,
                                         int32_t batch, int64_t total_q,
                                         int64_t total_k, int32_t max_seqlen_q,
                                         int32_t max_seqlen_k);
/* Block sparsity (bundle version 11, docs/ABI.md "Block sparsity"). A
 * block-sparse forward (fa_kernel_info.block_sparse) visits, per query block,
 * only the key blocks its block mask lists, and evaluates its mask_mod only
 * on the partial ones. The block mask lives in caller-owned device memory
 * (`data`, `bytes`, 4-byte aligned; fa_block_mask_bytes says how much) and
 * is built there on `stream` by fa_block_mask_build from the kernel's own
 * mask_mod and its mod_args; it serves every launch with the same batch,
 * heads, kv_heads, nq and nk (and mod_args contents). mask_heads is 1 (one
 * mask for every head: the mask_mod is evaluated with h = 0 and must not
 * depend on h) or heads (one per query head). */
typedef struct fa_block_mask {
  CUdeviceptr data;
  uint64_t bytes;
  int64_t batch, heads, kv_heads, mask_heads, nq, nk;
} fa_block_mask;
/* fa_kernel_find_for_keys over the bundle's block-sparse kernels only (the
 * other finds never return one). */
FA_API fa_status fa_kernel_find_block_sparse(const fa_bundle *bundle,
                                             const fa_kernel_query *query,
                                             int64_t nk,
                                             const fa_kernel **out);
/* The bytes a block mask of `kernel` needs for these sizes. */
FA_API fa_status fa_block_mask_bytes(const fa_kernel *kernel, int64_t batch,
                                     int64_t mask_heads, int64_t nq,
                                     int64_t nk, uint64_t *bytes);
/* Builds `mask` (its data is overwritten) from the kernel's mask_mod with its
 * mod_args (as the forward takes them), in stream order. */
FA_API fa_status fa_block_mask_build(const fa_kernel *kernel,
                                     const fa_block_mask *mask,
                                     const fa_tensor *mod_args,
                                     int32_t mod_arg_count, CUstream stream);
/* fa_attention_forward_ex of a block-sparse kernel with its block mask,
 * which must have been built for the call's sizes by the same kernel. */
FA_API fa_status fa_attention_forward_block_sparse(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_block_mask *mask, const fa_tensor *mod_args,
    int32_t mod_arg_count, CUstream stream);
/* The block-sparse backward (bundle version 15): fa_attention_backward_ex of
 * a block-sparse backward kernel (fa_kernel_info.block_sparse, direction
 * bwd) with its block mask, built by fa_block_mask_build of the SAME backward
 * kernel (its block sizes, block_q 64 and block_kv 128, are not the
 * forward's: a forward's mask is refused where its size is too small, and
 * must not be passed). Each key block visits only the query blocks its
 * transposed lists (q_count, q_index, full_q_*) name: the full ones without
 * the mask_mod, the partial ones with it; a key block with none writes
 * dK = dV = 0. A per-head mask (mask_heads = heads) needs heads = kv_heads.
 * _check needs no GPU. */
FA_API fa_status fa_attention_backward_block_sparse_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_block_mask *mask, const fa_tensor *mod_args,
    int32_t mod_arg_count);
FA_API fa_status fa_attention_backward_block_sparse(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_block_mask *mask, const fa_tensor *mod_args,
    int32_t mod_arg_count, CUstream stream);
/* fp8 forwards (kernel dtype FA_DTYPE_F8E4M3; bundle version 12), which
 * the plain forward functions refuse: q, k, v in e4m3, o in bf16, lse f32,
 * and `descales` = {descale_q, descale_k, descale_v}: contiguous f32,
 * 4-byte aligned, overlapping no output. A kernel with descale_block 0
 * takes [B, Hkv] each (FA3's q/k/v_descale) and computes attention of the
 * dequantised inputs x * descale[b, h / (H / Hkv)] (a query head takes its
 * key head's factor); one with descale_block 64 (bundle version 21) takes
 * descale_q [B, H, ceil(Nq/64)] and descale_k [B, Hkv, ceil(Nk/64)], a
 * factor per 64-row block (q[b,h,n,:] * descale_q[b,h,n/64], k likewise per
 * key head), and descale_v [B, Hkv]. S is scaled by descale_q * descale_k,
 * P is rounded to e4m3 for P·V and O is scaled by descale_v. _check needs
 * no GPU. */
FA_API fa_status fa_attention_forward_fp8_check(const fa_kernel *kernel,
                                                const fa_attention_args *args,
                                                const fa_tensor descales[3]);
FA_API fa_status fa_attention_forward_fp8(const fa_kernel *kernel,
                                          const fa_attention_args *args,
                                          const fa_tensor descales[3],
                                          CUstream stream);
/* The fp8 backward (kernel dtype FA_DTYPE_F8E4M3, direction bwd; bundle
 * version 22), which fa_attention_backward refuses: q, k, v and d_o in
 * e4m3, o (the fp8 forward's) and dq, dk, dv in bf16, lse, delta and
 * dq_accum f32 as for fa_attention_backward, and `descales` = {descale_q,
 * descale_k, descale_v, descale_do}: f32 [B, Hkv] each, contiguous (d_o's
 * factor per key head, as q's). It computes the gradients of the fp8
 * forward at the dequantised inputs x * descale[b, h / (H / Hkv)] with
 * d_o * descale_do as the output gradient; every product runs in e4m3 (P
 * and dS rounded to e4m3, dS scaled per tile by a power of two). Launches
 * bwd_pre, bwd and bwd_post as fa_attention_backward does. _check needs no
 * GPU. */
FA_API fa_status fa_attention_backward_fp8_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor descales[4]);
FA_API fa_status fa_attention_backward_fp8(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor descales[4], CUstream stream);

/* attn.quantize on the GPU: fp8 forwards built with the config field
 * "quant=<bf16|f16|f32>" also hold a quantiser of inputs of that type
 * (manifest "quantize", entries quantize_amax and quantize; docs/ABI.md
 * "Quantising on the GPU"). It turns x [B, H, N, D] (the kernel's D,
 * contiguous, 16-byte aligned) into x8 (f8e4m3, same shape, contiguous)
 * and its descale (f32, contiguous): [B, G] with G dividing H, one factor
 * per group of H/G consecutive heads (FA3's per-head form: G = Hkv for q, H
 * for k and v), or [B, H, ceil(N/64)], one per 64-row block of a head.
 * Each factor is amax / 448 of |x| over what it covers (1 where that is 0)
 * and x8 = e4m3(x / factor), rounded to nearest even and saturated at
 * +-448: what fa.quantize_fp8 computes in PyTorch. rotate = 1 first
 * multiplies each row by the orthonormal Hadamard matrix of order D (FA3's
 * incoherent processing, attn.hadamard; for q and k only). The [B, G] form
 * needs `workspace`, f32 [B, H, ceil(N/64)] contiguous (the blocks'
 * maxima); the block form none (data 0). No tensor may overlap another. */
typedef struct fa_quantize_args {
  fa_tensor x, x8, descale, workspace;
  int32_t rotate;
} fa_quantize_args;
/* The kernel of `bundle` with a quantiser of `dtype` inputs at head dim
 * `head_dim`, or FA_ERROR_NOT_FOUND. */
FA_API fa_status fa_kernel_find_quantize(const fa_bundle *bundle,
                                         fa_dtype dtype, int64_t head_dim,
                                         const fa_kernel **out);
/* The checks of fa_quantize without a GPU. */
FA_API fa_status fa_quantize_check(const fa_kernel *kernel,
                                   const fa_quantize_args *args);
/* Validate (plus device memory of the context's device), then launch
 * quantize_amax and quantize on `stream`. */
FA_API fa_status fa_quantize(const fa_kernel *kernel,
                             const fa_quantize_args *args, CUstream stream);

/* Attention sinks (kernels with fa_kernel_info.sinks; bundle version 13;
 * docs/ABI.md "Attention sinks"). sinks: f32 [H] (one logit per query head,
 * natural-log units; -inf is no sink), contiguous, 16-byte aligned; it joins
 * every row's softmax denominator without a value, so the LSE counts it and
 * a row whose keys are all masked gets O = 0 and LSE = sinks[h]. The forward
 * and backward of such a kernel take the plain launch's arguments (and its
 * mod_args, as the _ex launches) plus these; the plain and _ex launches
 * refuse them, and these refuse kernels without sinks. The backward also
 * writes d_sinks f32 [H] (contiguous, 16-byte aligned, overlapping no other
 * tensor): d_sinks[h] = -sum over (b, q) of exp(sinks[h] - lse)·delta, summed
 * in a fixed order (bit-identical run to run), overwritten, not added to.
 * Split-KV kernels with sinks (packed GQA or not; bundle version 15) are
 * launched by fa_attention_forward_splitkv_sinks below, paged ones by
 * fa_attention_forward_paged_sinks, varlen ones by
 * fa_attention_{forward,backward}_varlen_sinks; block-sparse kernels have
 * no sinks. The checks need no GPU; the launches
 * add the device checks of fa_attention_forward. */
FA_API fa_status fa_attention_forward_sinks_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks);
FA_API fa_status fa_attention_backward_sinks_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks,
    const fa_tensor *d_sinks);
FA_API fa_status fa_attention_forward_sinks(const fa_kernel *kernel,
                                            const fa_attention_args *args,
                                            const fa_tensor *mod_args,
                                            int32_t mod_arg_count,
                                            const fa_tensor *sinks,
                                            CUstream stream);
/* Launches bwd_pre, bwd_sink (d_sinks from lse and delta; grid (H, 1, 1)),
 * bwd and bwd_post in order on `stream`. */
FA_API fa_status fa_attention_backward_sinks(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks,
    const fa_tensor *d_sinks, CUstream stream);
/* The split-KV decode of a kernel with sinks (fa_kernel_info.sinks and
 * split_kv; bundle version 15): the arguments of
 * fa_attention_forward_splitkv_ex plus the sinks as above. The split forward
 * computes its partials without them; the merge joins sinks[h] to each row
 * as one more partial (LSE = sinks[h], O = 0), so O and LSE are those of
 * fa_attention_forward_sinks. fa_attention_forward_splitkv{,_ex} refuse
 * these kernels, and these refuse split-KV kernels without sinks. */
FA_API fa_status fa_attention_forward_splitkv_sinks_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks);
FA_API fa_status fa_attention_forward_splitkv_sinks(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks,
    CUstream stream);

/* A single PTX (text) or cubin module, loaded into the current context. */
FA_API fa_status fa_module_load_file(const char *path, fa_module **out);
FA_API fa_status fa_module_load_data(const void *image, size_t size,
                                     fa_module **out);
FA_API fa_status fa_module_get_function(fa_module *module, const char *name,
                                        CUfunction *out);
/* Raises the function's dynamic shared-memory limit when shared_bytes exceeds
 * the 48 KiB default, then launches it. */
FA_API fa_status fa_module_launch(CUfunction function, const unsigned grid[3],
                                  const unsigned block[3],
                                  unsigned shared_bytes, CUstream stream,
                                  void **params);
FA_API void fa_module_free(fa_module *module);

#ifdef __cplusplus
}
#endif

#endif /* FA_RUNTIME_FA_RUNTIME_H */
