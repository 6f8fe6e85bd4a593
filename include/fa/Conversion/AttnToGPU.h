//===- AttnToGPU.h - attn → gpu kernels, as functions -----------*- C++ -*-===//
//
// The kernel shapes (tile sizes, warps, shared memory) and the builders that
// emit the kernels of docs/ABI.md; the pass and the compiler API share them.
//
//===----------------------------------------------------------------------===//

#ifndef FA_CONVERSION_ATTNTOGPU_H
#define FA_CONVERSION_ATTNTOGPU_H

#include "fa/Conversion/KernelParamIndices.h"
#include "fa/Dialect/Attn/IR/Attn.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/Support/CommandLine.h"

#include <optional>
#include <string>

namespace mlir::fa {

/// How the tensor-core products are issued: mma.sync (sm_80+), or wgmma
/// (sm_90a: the forward with TMA loads and warp specialisation,
/// HopperForwardKernel.cpp; the backward, HopperBackwardKernel.cpp).
enum class MmaStrategy { MmaSync, Wgmma };

/// The wgmma forward's schedule (docs/hopper-notes.md): resolved once into
/// the plan, read by the builder, and part of the tag wherever it differs
/// from the measured default for the plan.
struct WgmmaForwardSchedule {
  /// The consumer warpgroups take turns issuing their GEMMs.
  bool pingPong = true;
  /// O leaves through shared memory with 16-byte stores.
  bool smemEpilogue = true;
  /// A row keeps its base until its max grows by more than 2^8.
  bool lazyRescale = false;
  /// O takes the previous tile's factors inside the ping-pong turn.
  bool rescaleInTurn = false;
  /// Maskless: the last, ragged key tile runs first.
  bool raggedFirst = false;
  /// Of every 8 n8 tiles of scores, how many take their exponentials from
  /// a polynomial on the FMA pipe instead of the special-function unit.
  int64_t polyExp2 = 0;

  bool operator==(const WgmmaForwardSchedule &o) const {
    return pingPong == o.pingPong && smemEpilogue == o.smemEpilogue &&
           lazyRescale == o.lazyRescale && rescaleInTurn == o.rescaleInTurn &&
           raggedFirst == o.raggedFirst && polyExp2 == o.polyExp2;
  }
  /// "_pp0_rit1"-style fields for the choices that differ from `measured`.
  std::string tagSuffix(const WgmmaForwardSchedule &measured) const;
};

/// The tiling of one kernel. Zero fields mean "the default for the head dim".
struct GpuTileOptions {
  int64_t blockQ = 0;
  int64_t blockKV = 0;
  int64_t warps = 0;
  int64_t stages = 2;
  std::string target = "sm_90a";
  /// "mma_sync" or "wgmma" (sm_90a, wgmmaHeadDimsSupported).
  std::string mma = "mma_sync";
  /// The deterministic warp-specialised wgmma backward (KernelPlan).
  bool deterministic = false;
  /// wgmma forward: "persistent", "blocks", or "" (wgmmaPersistentGrid).
  std::string grid;
  /// wgmma forward: exactly this schedule (a plan read back from IR), or
  /// none for the command-line switches over the measured defaults.
  std::optional<WgmmaForwardSchedule> schedule;
  /// mma.sync forward only: split-KV decode (attn-split-kv), the key range
  /// split over a grid dimension by a run-time count, partials merged by
  /// attn.merge.
  bool splitKv = false;
  /// mma.sync split-KV forward only: packed GQA (attn-tile pack-gqa), the
  /// query heads of one key head in one CTA's rows.
  bool packGqa = false;
  /// wgmma forward only: a varlen batch (packed [T, H, D] tensors, the
  /// sequences named by cu_seqlens), set from the op by attn-gpu-plan.
  bool varlen = false;
  /// mma.sync split-KV forward only: K/V in a paged cache (page table,
  /// seqused_k), set from the op by attn-gpu-plan.
  bool paged = false;
  /// split-KV forward only: also emit fa_kv_append (KvAppendKernel.cpp).
  bool kvAppend = false;
  /// mma.sync forward only: one more warp copies K/V into the ring
  /// (attn-gpu-warp-specialize, KernelPlan::producerWarp).
  bool producerWarp = false;
  /// With producerWarp and splitKv: K/V loaded by TMA (KernelPlan::tma).
  bool tma = false;
  /// f32 inputs: one TF32 MMA per product (KernelPlan::tf32).
  bool tf32 = false;
  /// wgmma forward with a mask_mod only: the key loop runs over the key
  /// blocks a block mask lists (BlockMask.h, docs/ABI.md "Block sparsity").
  bool blockSparse = false;
  /// Attention sinks (KernelPlan::sinks), set from the op's sinks operand by
  /// resolveKernelPlanFor, or from the plan of a tile op.
  bool sinks = false;
  /// fp8 forward: Q and K descale factors per this many rows
  /// (KernelPlan::descaleBlock), set from the op's descale types as sinks.
  int64_t descaleBlock = 0;
  /// fp8 forward: also emit the quantiser of inputs of this type ("bf16",
  /// "f16" or "f32"; KernelPlan::quantize), or "" for none.
  std::string quantize;
};

/// Threads per CTA of a block-sparse kernel's fa_block_mask (one warp per
/// block), fa_block_lists (one warp per line) and fa_block_order (one
/// row's blocks) entries.
constexpr int64_t kBlockMaskThreads = 32;
constexpr int64_t kBlockListsThreads = 32;
constexpr int64_t kBlockOrderThreads = 128;
/// Threads of an fa_kv_append CTA (one element each).
constexpr int64_t kKvAppendThreads = 256;
/// Threads of an fa_quantize_amax / fa_quantize CTA (8 warps, 8 rows each)
/// and the rows a CTA covers (the block form's 64-row blocks).
constexpr int64_t kQuantizeThreads = 256;
constexpr int64_t kQuantizeRows = 64;
/// Dynamic shared bytes of those entries: the warps' maxima.
constexpr int64_t kQuantizeSharedBytes = 64;

/// A fully resolved kernel plan: what the builders emit and what the bundle
/// manifest describes.
struct KernelPlan {
  bool backward = false;
  Type elemType; // f16, bf16, f32 (mma.sync) or f8E4M3FN (wgmma forward)
  int64_t headDim = 0;      // D
  int64_t headDimV = 0;     // Dv
  int64_t blockQ = 0;
  int64_t blockKV = 0;
  int64_t warps = 0;
  int64_t stages = 2;
  std::string target;
  MmaStrategy strategy = MmaStrategy::MmaSync;
  /// wgmma forward only: one CTA per SM (at most one per query tile), each
  /// walking tiles blockIdx.x + k·gridDim.x (manifest "grid": "persistent").
  bool persistent = false;
  attn::ScoreSpec spec;
  /// The name of spec.scoreMod, if any (the tag ends in `_mod_<name>`):
  /// the op's `attn.score_mod_name`, else a hash of the region's text.
  std::string scoreModName;
  /// The name of spec.maskMod, if any (the tag ends in `_maskmod_<name>`):
  /// the op's `attn.mask_mod_name`, else a hash of the region's text.
  std::string maskModName;
  /// Backward: CTAs per key block, each accumulating D/dsplit columns of dK
  /// and dQ and Dv/dsplit of dV (docs/ABI.md grid); 1 unless D + Dv > 256.
  int64_t dsplit = 1;
  /// wgmma backward only: the warp-specialised kernel (-fa-wgmma-bwd-ws):
  /// 12 warps, a producer warpgroup loading Q, K, V and dO by TMA (four
  /// tensor-map parameters after fa_bwd's 15) and writing dQ with bulk
  /// reductions into a row-swizzled dq_accum (docs/ABI.md).
  bool warpSpecialized = false;
  /// Warp-specialised wgmma backward above D or Dv = 128 only: the two
  /// consumer warpgroups share one 64-key block by role, not by keys:
  /// warpgroup 0 computes Pᵀ and accumulates dV, warpgroup 1 dPᵀ, dSᵀ and
  /// dK (each would otherwise hold dK and dV of D = 256: 256 registers).
  /// Each stages its D/2 columns of a dQ tile in shared memory (over a
  /// query-slot tile no product reads any more, or a per-stage panel
  /// buffer at Dv < D) and one bulk
  /// reduction a panel adds them into dq_accum, laid out as two column
  /// panels [B·H][2][Nq][D/2] (HopperBackwardRoles.cpp, docs/ABI.md).
  bool splitRoles = false;
  int64_t dqAccumPanels() const { return splitRoles ? 2 : 1; }
  /// fa_bwd_post reads dq_accum with the dQ tiles' chunk swizzle: the
  /// warp-specialised wgmma backward's bulk reductions copied it there.
  bool dqAccumSwizzled() const { return warpSpecialized; }
  /// wgmma forward only: its schedule.
  WgmmaForwardSchedule schedule;
  /// Warp-specialised wgmma backward only: dQ tiles are added in key-block
  /// order, each (batch, head, query tile) behind a 32-bit semaphore in a
  /// workspace that the kernel takes after the tensor maps (docs/ABI.md);
  /// the tag ends in `_det`.
  bool deterministic = false;
  /// mma.sync forward only: split-KV (GpuTileOptions::splitKv); the tag
  /// ends in `_splitkv`.
  bool splitKv = false;
  /// mma.sync forward only: packed GQA. One CTA per (batch, key head, block
  /// of block_q / G queries of each of the G = H / Hkv heads); tile row r
  /// holds head hk·G + r mod G at query q0 + r div G (TileRows.h). The
  /// tag has `_packgqa`.
  bool packGqa = false;
  /// wgmma forward only: a varlen batch. The grid's z runs over sequences,
  /// its x over the query blocks of the longest; the kernel reads each
  /// sequence's rows from cu_seqlens (VarlenKernel.h). The tag has
  /// `_varlen`.
  bool varlen = false;
  /// mma.sync split-KV forward only: a paged KV cache. K and V are pools
  /// [pages, page_size, Hkv, D]; each key tile is gathered through the
  /// page table (attn_gpu.async_copy paged) and a CTA's keys end at its
  /// sequence's seqused_k. The tag has `_paged`.
  bool paged = false;
  /// split-KV forward only: the module also holds fa_kv_append, the
  /// elementwise append of new keys and values (rotary on them and on q
  /// optional) into the contiguous or paged cache the decode reads. The
  /// tag has `_append`.
  bool kvAppend = false;
  /// fp8 forward only: the module also holds fa_quantize_amax and
  /// fa_quantize (QuantizeKernel.cpp), which turn inputs of this type
  /// ("bf16", "f16", "f32") into e4m3 and their descales, optionally
  /// Hadamard-rotated first: attn.quantize (and attn.hadamard) on the GPU.
  /// The tag ends in `_quant<type>`; "" for none.
  std::string quantize;
  /// The element type named by `quantize`.
  Type quantizeSourceType(MLIRContext *ctx) const;
  /// wgmma forward with a mask_mod only: the key loop visits the full and
  /// the partial key blocks of a block mask (a kernel parameter built by the
  /// module's fa_block_mask entries), evaluating the mask_mod on partial
  /// blocks only. The tag has `_blocksparse`.
  bool blockSparse = false;
  /// Attention sinks: a forward takes the sinks (f32 [H]) as its last
  /// parameter and joins sink[h] to every row at the finalisation; a
  /// backward adds the `fa_bwd_sink` entry that reduces d_sinks from LSE and
  /// Delta. The tag ends in `_sink`.
  bool sinks = false;
  /// mma.sync forward only: a last warp of the CTA copies K and V into the
  /// ring and signals each slot on mbarriers; the `warps` warps before it
  /// compute without CTA barriers in the key loop (attn-gpu-warp-specialize).
  /// The tag has `_pw`.
  bool producerWarp = false;
  /// sm_90a split-KV forward with a producer warp only: it loads K and V by
  /// TMA (k_map and v_map parameters after the split count, 4-D maps of 64
  /// × block_kv boxes), one thread arming each slot with its bytes; the K
  /// and V tiles are 64-column slabs with the 128-byte swizzle. The tag has
  /// `_tma`.
  bool tma = false;
  /// f32 inputs (the mma.sync kernels) only: each product is one TF32 MMA
  /// (m16n8k8, 10-bit mantissas; opt-in as PyTorch's allow_tf32); without
  /// it three, big·big + big·small + small·big of each operand's TF32 split
  /// (3xTF32, within the accuracy rule of f32 math; forwards only: a
  /// backward needs tf32). The tag ends in `_tf32`.
  bool tf32 = false;
  /// fp8 forward only: Q's and K's descale factors per
  /// attn::kDescaleBlockRows rows ([B, H, ceil(Nq/64)], [B, Hkv,
  /// ceil(Nk/64)]; V's per key head), 0 for per-(batch, key head) ones. A
  /// consumer warpgroup's 64 rows take one Q factor, each 64 keys of a key
  /// tile their K factor in the online softmax's scale. The tag ends in
  /// `_bs64`.
  int64_t descaleBlock = 0;

  /// Threads per CTA: the computing warps and the producer warp.
  int64_t threads() const { return (warps + (producerWarp ? 1 : 0)) * 32; }
  /// Threads per CTA of a split plan's merge kernel: a warp per row; the
  /// producer warp is the split forward's alone.
  int64_t mergeThreads() const { return warps * 32; }
  /// A split plan's merge is a dependent launch (manifest "launch":
  /// "dependent") on sm_90 and later: it waits for the split forward
  /// (griddepcontrol.wait) before its first access to memory, and the split
  /// forward lets it be scheduled once its every CTA runs
  /// (griddepcontrol.launch_dependents), so the merge's launch overlaps the
  /// split forward's last CTAs instead of following them.
  bool dependentMerge() const { return splitKv && gridDependencies(); }
  /// A kv-append plan's split forward is, in turn, fa_kv_append's dependent:
  /// it waits for the appended keys, values and rotated queries before its
  /// first global access, and fa_kv_append lets it be scheduled first thing.
  bool dependentForward() const { return kvAppend && gridDependencies(); }
  /// griddepcontrol (programmatic dependent launch): sm_90 and later.
  bool gridDependencies() const { return target != "sm_80"; }
  /// fp8 e4m3 inputs (the sm_90a wgmma forward with descale factors).
  bool isFp8() const { return isa<Float8E4M3FNType>(elemType); }
  /// f32 inputs on TF32 tensor cores (the mma.sync kernels).
  bool isF32() const { return elemType.isF32(); }
  /// Bytes of one element of Q, K, V (and of the shared tiles).
  int64_t elemBytes() const { return elemType.getIntOrFloatBitWidth() / 8; }
  /// Elements of a 16-byte chunk: a cp.async copy, a swizzle unit, one
  /// row of an ldmatrix 8x8 b16 matrix.
  int64_t chunkElems() const { return 16 / elemBytes(); }
  /// The k extent of one mma.sync: 16 for 16-bit types, 8 for TF32 (both
  /// 32 bytes of a row, two ldmatrix chunks).
  int64_t mmaK() const { return isF32() ? 8 : 16; }
  /// The element type of O: bf16 for fp8 inputs, else the inputs' type.
  Type outputElemType() const {
    return isFp8() ? BFloat16Type::get(elemType.getContext()) : elemType;
  }
  /// Whether Q fragments stay in registers for the whole KV loop (they are
  /// re-read from shared memory for large head dims to avoid spills).
  /// A three-warp TMA decode CTA re-reads them (capsTmaRegisters).
  bool keepQInRegisters() const {
    return headDim * elemBytes() <= 256 && !capsTmaRegisters();
  }
  /// The TMA decode kernel of two consumer warps and the producer runs
  /// three CTAs per SM (its shared memory allows it) only at 168 registers
  /// a thread (3 warps of a sub-partition's 16384); Q's 32 registers of
  /// fragments make room. Wider CTAs (two per SM) would spill at that cap,
  /// and so would the paged kernel (its key counts and the producer's
  /// zero-filled gather of a sequence's last tile: 12-60 bytes), which runs
  /// two CTAs per SM with Q in registers. So would kernels with a mod
  /// (2026-12-07, d128: softcap30 68 B, key_bias 40 B, rel_bias 24 B, the
  /// document mask_mod 32 B, depending on ptxas's allocation): they keep Q
  /// in registers uncapped, two CTAs per SM.
  bool capsTmaRegisters() const {
    return tma && warps == 2 && !paged && scoreModName.empty() &&
           maskModName.empty();
  }
  /// Head dims rounded up to the k16 / n16 step of the tensor-core loops;
  /// shared tiles hold the extra columns as zeros and they are never stored.
  int64_t paddedHeadDim() const { return (headDim + 15) / 16 * 16; }
  int64_t paddedHeadDimV() const { return (headDimV + 15) / 16 * 16; }
  /// Columns of dK/dQ and of dV one backward CTA accumulates.
  int64_t sliceHeadDim() const { return headDim / dsplit; }
  int64_t sliceHeadDimV() const { return headDimV / dsplit; }
  /// mma.sync forward only: its Q, K and V tiles are swizzled instead of
  /// padded (head dims multiples of 64): the split-KV decode kernels, where
  /// 16 B per row cost a third CTA per SM (bq32, 2 warps, d128). Not with a
  /// deeper ring: the 3-stage packed causal tile, which spills 52 B padded,
  /// spills 100 B swizzled. With a producer warp, rings of 2 or 4 slots
  /// (3 spills 16 B at d128).
  bool swizzledForwardTiles() const {
    return strategy == MmaStrategy::MmaSync && !backward && splitKv &&
           (stages == 2 || (producerWarp && stages == 4)) &&
           headDim % 64 == 0 && headDimV % 64 == 0;
  }
  /// Row strides (elements) of the shared tiles: +16 B per row makes the
  /// eight row addresses of an ldmatrix fall in distinct bank groups, unless
  /// the tiles are swizzled.
  int64_t strideQK() const {
    return paddedHeadDim() + (swizzledForwardTiles() ? 0 : chunkElems());
  }
  int64_t strideV() const {
    return paddedHeadDimV() + (swizzledForwardTiles() ? 0 : chunkElems());
  }
  /// Dynamic shared memory of the forward kernel, in bytes.
  int64_t forwardSharedBytes() const;
  /// Dynamic shared memory of the main backward kernel, in bytes.
  int64_t backwardSharedBytes() const;
  /// "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a".
  std::string tag() const;
  /// The mask name of the manifest: none, causal, causal_bottom_right, window.
  std::string maskName() const;
};

/// Names the score_mod region of an attn op (set by the compiler from the
/// score-mod library's function name); it becomes part of the kernel tag.
inline constexpr llvm::StringLiteral kScoreModNameAttr = "attn.score_mod_name";
/// The same for a mask_mod attached from a library.
inline constexpr llvm::StringLiteral kMaskModNameAttr = "attn.mask_mod_name";

/// The plan of the kernel computing `op` (attn.attention,
/// attn.attention_backward or one of their tile ops: the element type, head
/// dims and mask are read from it).
FailureOr<KernelPlan> resolveKernelPlanFor(Operation *op,
                                           const GpuTileOptions &options,
                                           std::string &error);

/// The plan as the `attn.kernel_plan` dictionary (attn::kKernelPlanAttr):
/// its block sizes, warps, stages, target, mma, grid, deterministic and
/// split-KV choices, which resolve back to the same plan, and its tag.
DictionaryAttr kernelPlanAttr(MLIRContext *ctx, const KernelPlan &plan);

/// The options a `attn.kernel_plan` dictionary holds.
GpuTileOptions kernelPlanOptions(DictionaryAttr attr);

/// Resolves defaults and checks a plan; the error names the offending field.
FailureOr<KernelPlan> resolveKernelPlan(bool backward, Type elemType,
                                        int64_t headDim, int64_t headDimV,
                                        const attn::ScoreSpec &spec,
                                        const GpuTileOptions &options,
                                        std::string &error);

class TiledLoopNest;

/// Emits `fa_fwd_<tag>` into `module` (docs/ABI.md): one CTA per iteration
/// of the parallel loops of `loops`, running its key-block loop.
gpu::GPUFuncOp buildForwardKernel(OpBuilder &b, Location loc,
                                  gpu::GPUModuleOp module,
                                  const KernelPlan &plan,
                                  const TiledLoopNest &loops);

/// Emits the sm_90a wgmma/TMA `fa_fwd_<tag>` into `module`: the forward
/// parameters of docs/ABI.md followed by the tensor-map pointers of Q, K, V
/// ("sm_90a wgmma entries").
gpu::GPUFuncOp buildForwardKernelWgmma(OpBuilder &b, Location loc,
                                       gpu::GPUModuleOp module,
                                       const KernelPlan &plan,
                                       const TiledLoopNest &loops);

/// Where the optional parameter groups of fa_fwd (fa_bwd) start, from the
/// parameter list the kernel is built with (KernelParamIndices.h).
KernelParamIndices kernelParamIndices(MLIRContext *ctx, const KernelPlan &plan);

/// The category of the code-generation switches (-fa-wgmma-*), so that tools
/// can list them in their --help beside their own options.
llvm::cl::OptionCategory &codegenOptionCategory();

/// The A/B switches of the wgmma forward that change its code without
/// changing its tag (command-line flags); part of every cache key.
std::string wgmmaVariantKey();

/// The measured default schedule of a wgmma forward plan (its grid, block
/// sizes and mask resolved).
WgmmaForwardSchedule measuredWgmmaForwardSchedule(const KernelPlan &plan);

/// The schedule the -fa-wgmma-* switches ask for over the measured default.
WgmmaForwardSchedule wgmmaForwardSchedule(const KernelPlan &plan);

/// Whether the wgmma forward for `spec` and head dim D is built with a
/// persistent grid (-fa-wgmma-persistent, else the measured default).
bool wgmmaPersistentGrid(const attn::ScoreSpec &spec, int64_t headDim);

/// Whether the mma = wgmma kernels take head dims (D, Dv): both directions
/// (64, 64), (96, 96) and (128, 128); the forward also (256, 256) and
/// (192, 128). The runtime's manifest check (lib/Runtime/Manifest.cpp)
/// accepts the same set.
bool wgmmaHeadDimsSupported(bool backward, int64_t headDim, int64_t headDimV);

/// Dynamic shared memory of the wgmma forward: Q and `stages` K/V tiles in
/// 64-column slabs (128 B swizzle; a head dim that is not a multiple of 64
/// takes a last slab whose columns past it TMA fills with zeros).
int64_t wgmmaForwardSharedBytes(const KernelPlan &plan);

/// The same for the wgmma backward.
std::string wgmmaBackwardVariantKey();

/// Whether -fa-wgmma-bwd-ws asks for the warp-specialised wgmma backward.
bool wgmmaBackwardWarpSpecialized();

/// Dynamic shared memory of the wgmma main backward: K, V, two stages of
/// Q, dO, LSE and Delta, and dSᵀ, unpadded (128 B swizzle).
int64_t wgmmaBackwardSharedBytes(const KernelPlan &plan);

/// Emits `fa_bwd_pre_<tag>`, `fa_bwd_<tag>` and `fa_bwd_post_<tag>` (fa_bwd
/// on wgmma for mma = wgmma, with the same parameters); fa_bwd runs the
/// query-block loop of `loops` for its key block.
void buildBackwardKernels(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                          const KernelPlan &plan, const TiledLoopNest &loops);

/// Emits `fa_bwd_sink_<tag>` of a backward plan with sinks: d_sinks [H]
/// from LSE, Delta and the sinks, one CTA per head (BackwardSinkKernel.cpp).
void buildBackwardSinkKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan);

} // namespace mlir::fa

#endif // FA_CONVERSION_ATTNTOGPU_H
