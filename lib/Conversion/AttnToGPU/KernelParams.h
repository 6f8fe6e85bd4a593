//===- KernelParams.h - the kernels' parameter lists ------------*- C++ -*-===//
//
// The parameter list of every kernel entry of docs/ABI.md, built in one
// place so that the kernels, the manifest's parameter indices and new
// entries (split-KV, strides) agree on order and passing.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_KERNELPARAMS_H
#define FA_LIB_CONVERSION_ATTNTOGPU_KERNELPARAMS_H

#include "fa/Conversion/AttnToGPU.h"

#include <array>

namespace mlir::fa::gpu_lowering {

/// Bytes of a CUtensorMap, the by-value size of a tensor-map parameter.
constexpr int64_t kTensorMapBytes = 128;

/// The function attribute listing a kernel's by-value tensor-map parameters
/// (i32 indices) until `attn-grid-constant-params` turns each into a 128-byte
/// `__grid_constant__` parameter of the lowered llvm.func (gpu.func drops
/// argument attributes in its lowering and rejects nvvm.grid_constant).
inline constexpr llvm::StringLiteral kGridConstantParamsAttr =
    "fa.grid_constant_params";

/// A kernel's parameters in order.
struct KernelParams {
  SmallVector<Type> types;
  /// Indices of the CUtensorMaps passed by value (kGridConstantParamsAttr).
  SmallVector<int32_t> tensorMaps;
  /// Index of the first stride parameter (addStrides), -1 for none.
  int32_t strideParam = -1;
  /// Varlen forward: index of cu_seqlens_q (cu_seqlens_k follows), -1 for
  /// none.
  int32_t cuSeqlensParam = -1;
  /// Block-sparse forward: index of the block mask's pointer (its head
  /// count, i32, follows), -1 for none.
  int32_t blockMaskParam = -1;
  /// Paged forward: index of the page table (i32 [B, max_pages], global);
  /// seqused_k (i32 [B]) and the i32 max_pages, page_size and num_pages
  /// follow. -1 for none.
  int32_t pageTableParam = -1;
  /// Forward (unsplit) or merge with sinks: index of the sinks (f32 [H]),
  /// after the mod_args; -1 for none.
  int32_t sinksParam = -1;
  /// fp8 forward: index of descale_q (descale_k, descale_v follow); -1
  /// for none.
  int32_t descaleParam = -1;
  /// A plan whose mods read tensors: index of the first mod_arg (its
  /// pointer, then its i32 extents, then the next one's); -1 for none.
  int32_t modArgParam = -1;
  /// Deterministic backward: index of the dQ semaphores' pointer; -1 for
  /// none.
  int32_t semaphoreParam = -1;
  /// fa_fwd and fa_bwd: index of Nq (i32; Nk follows).
  int32_t nqParam = -1;
  /// A plan with run-time window sizes: index of the left size (i32; the
  /// right follows), the last two parameters; -1 for none.
  int32_t windowParam = -1;

  /// Appends `t`; returns its index.
  unsigned add(Type t) {
    types.push_back(t);
    return types.size() - 1;
  }
  /// Appends a CUtensorMap passed by value: an !llvm.ptr to the parameter
  /// inside the kernel (TMA and prefetch.tensormap take its generic
  /// address), so no launch needs runtime-owned device memory.
  unsigned addTensorMap(MLIRContext *ctx);
  /// Appends the batch, head and row strides (i64, in elements) of each of
  /// `tensors` global [B, H, N, D] tensors, in the order the tensors come;
  /// after them come only a score_mod's mod_args (strideParam).
  void addStrides(MLIRContext *ctx, int tensors);
  /// The three stride parameters of tensor `tensor` (0 = the first with
  /// strides) of a kernel body built with this list.
  std::array<Value, 3> strides(Block &entry, int tensor) const;
};

class KernelBuilder;

/// `plan` with its run-time window sizes bound at `entry` (insertion point
/// of `b`) to the kernel's window parameters: index values, where a
/// negative size (unbounded) or one past max(Nq, Nk) becomes max(Nq, Nk),
/// which every row reads as unbounded and which keeps the band's edges
/// (diag -/+ size) far inside the kernels' 32-bit compares. The plan
/// itself for a kernel without window parameters.
KernelPlan bindWindowParams(OpBuilder &b, Location loc, const KernelPlan &plan,
                            Block &entry, const KernelParams &params);

/// The attention-sink logit of query head `head` (f32), loaded from the
/// sinks parameter of a kernel built with `params`; null without sinks.
Value loadSink(KernelBuilder &kb, Block &entry, const KernelParams &params,
               Value head);

/// Strides per tensor: batch, head, row (the last dimension's is 1).
constexpr int kStridesPerTensor = 3;

/// fa_fwd: q, k, v, o, lse; batch, heads, kv_heads, nq, nk; scale; then a
/// split-KV forward's split count (its o and lse are the f32 workspace) and
/// with TMA its k and v maps, or the wgmma forward's q, k, v maps, a
/// persistent grid's tile counter and an fp8 forward's descale_q,
/// descale_k, descale_v (f32 [B, Hkv]);
/// then the strides of q, k, v and o (a split forward's o_part is the
/// workspace: q, k, v only), a varlen forward's cu_seqlens_q and
/// cu_seqlens_k (i32; batch is then the sequence count B and nq, nk the
/// token totals), a block-sparse forward's block mask and its head count,
/// the mod_args of a score_mod (ModArgs.h), and last the sinks (f32 [H]) of
/// an unsplit plan with sinks (a split plan's merge takes them); after
/// everything, a plan's run-time window sizes (i32 left, right).
KernelParams forwardParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_bwd_pre: o, do, delta, dq_accum; batch, heads, nq; the strides of o
/// and do.
KernelParams backwardPreParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_bwd: q, k, v, do, lse, delta, dq_accum, dk, dv; batch, heads,
/// kv_heads, nq, nk; scale; then the warp-specialised wgmma backward's q, k,
/// v, do maps and a deterministic one's semaphores; the strides of q, k, v,
/// do, dk and dv; the mod_args; last, a plan's run-time window sizes (i32
/// left, right).
KernelParams backwardMainParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_fwd's or (a backward plan) fa_bwd's parameters: the kernel the score
/// and mask mods are evaluated in.
KernelParams mainKernelParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_bwd_sink (plans with sinks): lse, delta, sinks, d_sinks (f32);
/// batch, heads, nq.
KernelParams backwardSinkParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_bwd_post: dq_accum, dq; batch, heads, nq; the strides of dq.
KernelParams backwardPostParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_merge (split-KV): o_part, lse_part (f32 workspace), o, lse; rows
/// (batch·heads·nq), splits, heads, nq; the strides of o; last the sinks
/// (f32 [H]) of a plan with sinks.
KernelParams mergeParams(MLIRContext *ctx, const KernelPlan &plan);
/// fa_kv_append (plans with kv_append): k_new, v_new, k_cache, v_cache,
/// q, q_out (the element type), cache_seqlens, page_table (i32), cos, sin
/// (f32); then the i32 sizes batch, new_tokens, kv_heads, q_tokens, heads,
/// max_pages (0: a contiguous cache), page_size (a contiguous cache's
/// capacity), num_pages (a contiguous cache's batch), rotary_dim (0: no
/// rotary), max_pos, interleaved, q_same_position. Every tensor is dense.
KernelParams kvAppendParams(MLIRContext *ctx, const KernelPlan &plan);

/// fa_quantize_amax and fa_quantize (fp8 plans with `quantize`): x (the
/// source type), x8 (i8: e4m3 bytes), amax (f32 [B, H, ceil(N/64)]: the
/// rows' maxima; the descale itself in the block form), descale (f32); then
/// the i32 batch, heads, n, heads_per_factor (0: one factor per 64-row
/// block) and rotate. x and x8 are dense [B, H, N, D].
KernelParams quantizeParams(MLIRContext *ctx, const KernelPlan &plan);

/// Parameter indices of fa_quantize_amax and fa_quantize.
enum QuantizeParam : unsigned {
  kQuantX,
  kQuantX8,
  kQuantAmax,
  kQuantDescale,
  kQuantBatch,
  kQuantHeads,
  kQuantRows,
  kQuantHeadsPerFactor,
  kQuantRotate,
  kQuantParamCount
};

/// Parameter indices of fa_kv_append.
enum KvAppendParam : unsigned {
  kAppendKeyNew, kAppendValueNew, kAppendKeyCache, kAppendValueCache,
  kAppendQuery, kAppendQueryOut, kAppendSeqlens, kAppendPageTable,
  kAppendCos, kAppendSin, kAppendBatch, kAppendNewTokens, kAppendKvHeads,
  kAppendQueryTokens, kAppendHeads, kAppendMaxPages, kAppendPageSize,
  kAppendNumPages, kAppendRotaryDim, kAppendMaxPos, kAppendInterleaved,
  kAppendSamePosition, kAppendParamCount
};

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_KERNELPARAMS_H
