/*===- fa_runtime.h - fa deployment runtime, C ABI -----------------*- C -*-===*
 *
 * Loads fa kernel bundles (see docs/ABI.md) or single PTX/cubin modules,
 * validates attention arguments and launches the kernels through the CUDA
 * driver API. Depends on libcuda only: no MLIR, LLVM or cudart.
 *
 * Errors: every function returns an fa_status; on failure the calling
 * thread's fa_last_error() holds a message naming the offending argument and
 * its values. Nothing is launched when validation fails.
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

#define FA_RUNTIME_BUNDLE_VERSION 1
#define FA_MAX_RANK 4

typedef enum fa_status {
  FA_SUCCESS = 0,
  FA_ERROR_INVALID_ARGUMENT = 1, /* a bad argument; nothing was launched */
  FA_ERROR_NOT_FOUND = 2,        /* no such file, kernel or entry point */
  FA_ERROR_IO = 3,               /* a file could not be read */
  FA_ERROR_BAD_MANIFEST = 4,     /* manifest.json is malformed */
  FA_ERROR_CUDA = 5,             /* a CUDA driver call failed */
  FA_ERROR_UNSUPPORTED = 6,      /* no kernel runs on this device */
} fa_status;

typedef enum fa_dtype {
  FA_DTYPE_F16 = 0,
  FA_DTYPE_BF16 = 1,
  FA_DTYPE_F32 = 2,
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

/* A dense tensor on the device. Shapes and strides count elements; strides
 * must be those of a contiguous row-major tensor of that shape. */
typedef struct fa_tensor {
  CUdeviceptr data;
  fa_dtype dtype;
  int32_t rank;
  int64_t shape[FA_MAX_RANK];
  int64_t strides[FA_MAX_RANK];
} fa_tensor;

/* Forward: O = softmax(mask(Q K^T scale)) V and LSE (natural log) per row.
 * q [B,H,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv], o [B,H,Nq,Dv] in the
 * kernel's dtype; lse [B,H,Nq] f32. */
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
} fa_kernel_info;

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

/* Picks the kernel of the bundle that matches the query and runs on its
 * device: a cubin built for exactly that compute capability first, then PTX
 * the driver can JIT (sm_XY on any device >= XY; sm_XYa only on XY). */
FA_API fa_status fa_kernel_find(const fa_bundle *bundle,
                                const fa_kernel_query *query,
                                const fa_kernel **out);

/* Argument checks that need no GPU: shapes against the kernel's config,
 * dtypes, contiguity, alignment, scale, 32-bit size limits, overlap of
 * outputs with other tensors. The launch functions run these first. */
FA_API fa_status fa_attention_forward_check(const fa_kernel *kernel,
                                            const fa_attention_args *args);
FA_API fa_status fa_attention_backward_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args);

/* Validate (above, plus: every pointer is device memory of the context's
 * device holding the whole tensor, and the stream belongs to the context),
 * then launch asynchronously on `stream`. */
FA_API fa_status fa_attention_forward(const fa_kernel *kernel,
                                      const fa_attention_args *args,
                                      CUstream stream);
/* Launches bwd_pre, bwd and bwd_post in order on `stream`. */
FA_API fa_status fa_attention_backward(const fa_kernel *kernel,
                                       const fa_attention_backward_args *args,
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
