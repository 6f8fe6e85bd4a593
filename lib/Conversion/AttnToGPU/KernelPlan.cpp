//===- KernelPlan.cpp - tile sizes, defaults, tags --------------*- C++ -*-===//
//
// Per-head-dim defaults, chosen so ptxas reports no spills (their H200
// measurements are in docs/gpu-notes.md). Forward: 4 warps of 16 query rows;
// 64-key tiles up to D = 128 and 32-key tiles above, where the O accumulator
// alone takes D/2 registers per lane. Backward: 8 warps of 16 keys and 64-row
// query tiles for D = Dv in {64, 128}; otherwise 4 warps, 64-row query tiles up
// to D = 64 (D = 48 for head dims that are not multiples of 8) and 32-row
// tiles above (dK and dV take D registers); above
// D + Dv = 256 the dK/dV/dQ columns are split over CTAs (KernelPlan::dsplit).
//
//===----------------------------------------------------------------------===//

#include "fa/Conversion/AttnToGPU.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::fa;

/// Largest dynamic shared memory per CTA on sm_80 / sm_90 (bytes).
static constexpr int64_t kMaxSharedBytes = 227 * 1024;

int64_t KernelPlan::forwardSharedBytes() const {
  if (strategy == MmaStrategy::Wgmma)
    return wgmmaForwardSharedBytes(*this);
  int64_t elems = blockQ * strideQK() + stages * blockKV * strideQK() +
                  stages * blockKV * strideV();
  if (!producerWarp)
    return elems * elemBytes();
  // The K and V rings' mbarriers follow the tiles.
  return attn_gpu::ringBarrierBase(elems * elemBytes()) +
         2 * attn_gpu::ringBarrierBytes(stages);
}

int64_t KernelPlan::backwardSharedBytes() const {
  if (strategy == MmaStrategy::Wgmma)
    return wgmmaBackwardSharedBytes(*this);
  // K, V (resident for the CTA) | Q, dO (one query tile) | dSᵀ (bkv × bq).
  int64_t elems = blockKV * strideQK() + blockKV * strideV() +
                  blockQ * strideQK() + blockQ * strideV() +
                  blockKV * (blockQ + chunkElems());
  return elems * elemBytes();
}

std::string KernelPlan::maskName() const {
  return attn::stringifyMaskKind(spec.mask).str();
}

std::string KernelPlan::tag() const {
  std::string t = backward ? "bwd_" : "fwd_";
  t += isFp8()               ? "f8e4m3"
       : isF32()             ? "f32"
       : elemType.isBF16() ? "bf16"
                           : "f16";
  t += "_d" + std::to_string(headDim);
  if (headDimV != headDim)
    t += "v" + std::to_string(headDimV);
  t += "_bq" + std::to_string(blockQ) + "_bkv" + std::to_string(blockKV) +
       "_w" + std::to_string(warps) + "_s" + std::to_string(stages);
  if (dsplit > 1)
    t += "_ds" + std::to_string(dsplit);
  t += "_" + maskName();
  if (spec.runtimeWindow())
    t += "_rt"; // the sizes are kernel parameters
  else if (spec.mask == attn::MaskKind::Window)
    t += "_l" + std::to_string(spec.windowLeft) + "_r" +
         std::to_string(spec.windowRight);
  if (strategy == MmaStrategy::Wgmma)
    t += "_wgmma";
  std::string chip = target;
  llvm::erase(chip, '_');
  return t + "_" + chip + (deterministic ? "_det" : "") +
         (packGqa ? "_packgqa" : "") + (splitKv ? "_splitkv" : "") +
         (persistent ? "_persistent" : "") + (varlen ? "_varlen" : "") +
         (paged ? "_paged" : "") + (kvAppend ? "_append" : "") +
         (blockSparse ? "_blocksparse" : "") + (producerWarp ? "_pw" : "") +
         (tma ? "_tma" : "") + (tf32 ? "_tf32" : "") +
         (descaleBlock ? "_bs" + std::to_string(descaleBlock) : "") +
         (quantize.empty() ? "" : "_quant" + quantize) +
         (strategy == MmaStrategy::Wgmma && !backward
              ? schedule.tagSuffix(measuredWgmmaForwardSchedule(*this))
              : "") +
         (scoreModName.empty() ? "" : "_mod_" + scoreModName) +
         (maskModName.empty() ? "" : "_maskmod_" + maskModName) +
         (sinks ? "_sink" : "");
}

Type KernelPlan::quantizeSourceType(MLIRContext *ctx) const {
  OpBuilder b(ctx);
  if (quantize == "f16")
    return b.getF16Type();
  return quantize == "f32" ? b.getF32Type() : b.getBF16Type();
}

std::string
WgmmaForwardSchedule::tagSuffix(const WgmmaForwardSchedule &measured) const {
  std::string t;
  auto field = [&](const char *name, bool mine, bool theirs) {
    if (mine != theirs)
      t += std::string("_") + name + (mine ? "1" : "0");
  };
  field("pp", pingPong, measured.pingPong);
  field("epi", smemEpilogue, measured.smemEpilogue);
  field("lazy", lazyRescale, measured.lazyRescale);
  field("rit", rescaleInTurn, measured.rescaleInTurn);
  field("ragged", raggedFirst, measured.raggedFirst);
  if (polyExp2 != measured.polyExp2)
    t += "_pe" + std::to_string(polyExp2);
  return t;
}

bool mlir::fa::wgmmaHeadDimsSupported(bool backward, int64_t headDim,
                                      int64_t headDimV) {
  if (headDim == headDimV && (headDim == 64 || headDim == 96 || headDim == 128))
    return true;
  // D = 96 takes a last TMA box half past D (one box of 64 and one of 32
  // columns plus 32 zero-filled) and, in the backward, splits dQ's columns
  // in slab-sized pieces (dqPieces). Both directions also take the 256-wide
  // head of d256 and the DeepSeek shape with Dv < D (the backward's
  // warpgroups split by role there, KernelPlan::splitRoles).
  (void)backward;
  return (headDim == headDimV && headDim == 256) ||
         (headDim == 192 && headDimV == 128);
}

/// The forward's key tile: 128 keys up to D = 192, 64 at Dv = 256, where
/// the O accumulator alone takes 128 of a consumer's 240 registers and
/// Q (64 KB) plus two 64-key K/V stages (128 KB) fill shared memory.
static int64_t wgmmaDefaultBlockKV(const KernelPlan &plan) {
  if (plan.headDimV > 128) // fp8 too: its 128-key tile spills at d256
    return 64;
  // 192 query rows: the widest key tile whose S, P and O fit a consumer's
  // 160 registers without spills: 128 keys at d64, 96 at d96, 80 at d128.
  if (plan.blockQ == 192)
    return plan.headDim <= 64 ? 128 : plan.headDim <= 96 ? 96 : 80;
  // fp8: 192 keys halve nothing but amortise the per-tile costs its faster
  // GEMMs expose (+4-8% over 128 at N >= 2k on the H200, PERF.md).
  return plan.isFp8() ? 192 : 128;
}

/// The forward's query tile: 128 rows (two consumer warpgroups), 192 (three)
/// for a plain maskless d96 forward, where the 192 x 96 tile ran 1.05-1.11x
/// the 128 x 128 one (H100, same process; causal 0.94-0.95x; PERF.md
/// 2026-12-05). d64 takes both from `fa-aot --defaults` and the runtime
/// chooses by the row length.
static int64_t wgmmaDefaultBlockQ(const KernelPlan &plan) {
  bool plain = plan.spec.mask == attn::MaskKind::None && !plan.spec.scoreMod &&
               !plan.spec.maskMod && !plan.varlen && !plan.blockSparse &&
               !plan.sinks && !plan.isFp8();
  return plain && plan.headDim == 96 && plan.headDimV == 96 ? 192 : 128;
}

/// The fp8 forward (HopperFp8.cpp): D = Dv in {128, 256}. The transposed V
/// tile is 128 B-swizzled slabs of 128 keys and the transposer moves whole
/// 64-key halves of one: 128- or 192-key tiles at d128 (256 keys would not
/// leave the consumers registers for S and O), 64 or 128 at d256 (O alone
/// takes 128 registers, and two 128-key stages of K, V and Vᵀ fill shared
/// memory). One CTA per query tile, O leaving from registers (its bf16 tile
/// is twice Q's fp8 buffer).
static LogicalResult checkFp8Plan(KernelPlan &plan, std::string &error) {
  const int64_t d = plan.headDim;
  if (d != plan.headDimV || (d != 128 && d != 256)) {
    error = "expected D = Dv in {128, 256} for the f8E4M3FN forward, got D " +
            std::to_string(d) + " and Dv " + std::to_string(plan.headDimV);
    return failure();
  }
  // A third consumer warpgroup's 152 registers hold only 64-key tiles,
  // which ran 0.86-0.99x the 128-row kernel (H100, PERF.md 2026-12-05).
  if (plan.blockQ != 128) {
    error = "expected block-q = 128 for the f8E4M3FN forward, got " +
            std::to_string(plan.blockQ);
    return failure();
  }
  const bool wide = d == 256;
  if (wide ? plan.blockKV != 64 && plan.blockKV != 128
           : plan.blockKV != 128 && plan.blockKV != 192) {
    error = std::string("expected block-kv = ") +
            (wide ? "64 or 128" : "128 or 192") +
            " for the f8E4M3FN forward at D " + std::to_string(d) + ", got " +
            std::to_string(plan.blockKV);
    return failure();
  }
  if (plan.persistent) {
    error = "expected grid = blocks for the f8E4M3FN forward, got grid = "
            "persistent";
    return failure();
  }
  return success();
}

/// The wgmma backward above D or Dv = 128 (KernelPlan::splitRoles): one
/// 64-key block, its warpgroups split by role, dQ by panels. It needs
/// the warp-specialised kernel (TMA leaves shared memory for the Pᵀ
/// exchange), and its dQ order is the reductions' (not deterministic); the
/// block-sparse walk is the 128-key kernel's.
static LogicalResult checkSplitRolesPlan(const KernelPlan &plan,
                                         const GpuTileOptions &options,
                                         std::string &error) {
  const char *why =
      !plan.warpSpecialized
          ? "the mma = wgmma backward above D = 128 is warp-specialised only "
            "(-fa-wgmma-bwd-ws)"
      : options.deterministic
          ? "expected no deterministic option on the mma = wgmma backward "
            "above D = 128 (its dQ panels are added in arrival order)"
      : plan.blockSparse
          ? "expected no block-sparse mma = wgmma backward above D = 128 "
            "(the block-sparse key walk is built for 128-key blocks)"
          : nullptr;
  if (!why)
    return success();
  error = std::string(why) + ", got D " + std::to_string(plan.headDim) +
          " and Dv " + std::to_string(plan.headDimV);
  return failure();
}

/// The wgmma forward: 128 query rows in two consumer warpgroups of 64 and a
/// producer warpgroup (12 warps), 128-key tiles, a 2- or 3-stage K/V ring.
/// The plan resolvers' diagnostic: `fail(msg)` stores msg in `error` and
/// returns failure (a LogicalResult, which a FailureOr<KernelPlan> takes).
namespace {
struct PlanFailure {
  std::string &error;
  LogicalResult operator()(const llvm::Twine &msg) const {
    error = msg.str();
    return failure();
  }
};
} // namespace

/// The wgmma backward: 128 keys in two warpgroups of 64 (8 warps; 12 with
/// the producer warpgroup of -fa-wgmma-bwd-ws), 64-row query tiles
/// double-buffered (2 stages).
static FailureOr<KernelPlan> resolveWgmmaPlan(KernelPlan plan,
                                              const GpuTileOptions &options,
                                              std::string &error) {
  PlanFailure fail{error};
  if (plan.target != "sm_90a")
    return fail("expected target sm_90a for mma = wgmma, got " + plan.target);
  if (!wgmmaHeadDimsSupported(plan.backward, plan.headDim, plan.headDimV))
    return fail(llvm::Twine("expected (D, Dv) in {(64, 64), (96, 96), "
                            "(128, 128), (256, 256), (192, 128)} for mma = "
                            "wgmma, got D ") +
                llvm::Twine(plan.headDim) + " and Dv " +
                llvm::Twine(plan.headDimV));
  plan.strategy = MmaStrategy::Wgmma;
  if (!options.grid.empty() && options.grid != "persistent" &&
      options.grid != "blocks")
    return fail("expected grid = persistent or blocks, got " + options.grid);
  if (plan.backward && !options.grid.empty())
    return fail("grid = " + options.grid +
                " applies to the mma = wgmma forward only, got a backward");
  plan.persistent = options.grid.empty()
                        ? !plan.backward && !plan.varlen && !plan.blockSparse &&
                              options.blockQ != 192 &&
                              wgmmaPersistentGrid(plan.spec, plan.headDim)
                        : options.grid == "persistent";
  if (plan.backward) {
    // The warp-specialised backward adds a producer warpgroup to the two
    // consumer warpgroups.
    // Also with a score_mod: its d(score)/d(S), kept until dS, costs the
    // 12-warp d128 consumer up to 12 B of spills (softcap), yet that kernel
    // ran 1.25-1.5x the 8-warp one on the H200 (PERF.md).
    plan.warpSpecialized = wgmmaBackwardWarpSpecialized();
    plan.splitRoles = std::max(plan.headDim, plan.headDimV) > 128;
    if (plan.splitRoles) {
      if (failed(checkSplitRolesPlan(plan, options, error)))
        return failure();
    }
    const int64_t warps = plan.warpSpecialized ? 12 : 8;
    const int64_t blockKV = plan.splitRoles ? 64 : 128;
    // 128-row query tiles (FA3's at D = 64), where asked: each consumer
    // warpgroup takes dQ's 64 rows of its half with all D columns; dense
    // bf16/f16 rows (varlen too) under no mask or a causal one: --defaults'
    // d64 backward, 1.06-1.16x the 64-row kernel (PERF.md, 2026-12-07).
    const bool wideQ = plan.warpSpecialized && !plan.splitRoles &&
                       !plan.isFp8() && plan.headDim == 64 &&
                       plan.headDimV == 64 && !plan.deterministic &&
                       !plan.blockSparse &&
                       !plan.spec.scoreMod && !plan.spec.maskMod &&
                       (plan.spec.mask == attn::MaskKind::None ||
                        plan.spec.mask == attn::MaskKind::Causal);
    plan.warps = warps;
    plan.blockQ = wideQ && options.blockQ == 128 ? 128 : 64;
    plan.blockKV = blockKV;
    if ((options.blockQ && options.blockQ != plan.blockQ) ||
        (options.blockKV && options.blockKV != blockKV) ||
        (options.warps && options.warps != warps))
      return fail(llvm::Twine("expected block-q = 64") +
                  (wideQ ? " or 128" : "") + ", block-kv = " +
                  llvm::Twine(blockKV) + " and " + llvm::Twine(warps) +
                  " warps for the mma = wgmma backward at D " +
                  llvm::Twine(plan.headDim) + ", Dv " +
                  llvm::Twine(plan.headDimV));
    if (plan.stages != 2)
      return fail("expected 2 stages for the mma = wgmma backward, got " +
                  llvm::Twine(plan.stages));
    // Varlen rows come from TMA boxes of the packed tensors, which the
    // cp.async kernel does not use.
    if (plan.varlen && !plan.warpSpecialized)
      return fail("a varlen batch needs the warp-specialised mma = wgmma "
                  "backward (-fa-wgmma-bwd-ws)");
    // The fp8 backward's transposes run on the producer warpgroup.
    if (plan.isFp8() && !plan.warpSpecialized)
      return fail("the f8E4M3FN backward needs the warp-specialised mma = "
                  "wgmma backward (-fa-wgmma-bwd-ws)");
    if (plan.backwardSharedBytes() > kMaxSharedBytes)
      return fail("the mma = wgmma backward needs " +
                  llvm::Twine(plan.backwardSharedBytes()) +
                  " bytes of shared memory with switches " +
                  wgmmaBackwardVariantKey() + ", more than " +
                  llvm::Twine(kMaxSharedBytes));
    return plan;
  }
  // A producer warpgroup and one consumer warpgroup per 64 query rows: two
  // (FA3's 128-row tile) or three (its 192-row tile for small head dims).
  plan.blockQ = options.blockQ    ? options.blockQ
                : plan.persistent ? 128
                                  : wgmmaDefaultBlockQ(plan);
  plan.warps = 4 + plan.blockQ / 16;
  if ((plan.blockQ != 128 && plan.blockQ != 192) ||
      (options.warps && options.warps != plan.warps))
    return fail("expected block-q = 128 with 12 warps or 192 with 16 for "
                "mma = wgmma, got block-q = " +
                llvm::Twine(plan.blockQ) +
                (options.warps ? " and " + llvm::Twine(options.warps) + " warps"
                               : llvm::Twine("")));
  if (plan.blockQ == 192 && (plan.persistent || plan.blockSparse))
    return fail(llvm::Twine("expected block-q = 128 for ") +
                (plan.persistent ? "the persistent wgmma grid"
                                 : "a block-sparse wgmma forward") +
                ", got 192");
  if (plan.blockQ == 192 && plan.headDimV > 128)
    return fail("expected block-q = 128 for Dv " + llvm::Twine(plan.headDimV) +
                " (a third consumer warpgroup's 160 registers do not hold "
                "O), got 192");
  if (plan.blockQ == 192 && plan.headDim > 128)
    return fail("expected block-q = 128 for D " + llvm::Twine(plan.headDim) +
                " (a third consumer warpgroup's 160 registers spill with "
                "its S), got 192");
  plan.blockKV = options.blockKV ? options.blockKV : wgmmaDefaultBlockKV(plan);
  if (plan.isFp8() && failed(checkFp8Plan(plan, error)))
    return failure();
  // S = Q·Kᵀ is one m64nNk16 chain with N = block_kv, so any multiple of 16
  // the instruction takes (N ≤ 256) is a legal tile.
  if (plan.blockKV % 16 || plan.blockKV < 64 || plan.blockKV > 256)
    return fail("expected block-kv a multiple of 16 in [64, 256] for mma = "
                "wgmma, got " + llvm::Twine(plan.blockKV));
  if (plan.stages != 2 && plan.stages != 3)
    return fail("expected 2 or 3 stages for mma = wgmma, got " +
                llvm::Twine(plan.stages));
  plan.schedule =
      options.schedule ? *options.schedule : wgmmaForwardSchedule(plan);
  if (plan.schedule.polyExp2 < 0 || plan.schedule.polyExp2 > 8)
    return fail("expected a polynomial exp2 share of 0 to 8 n8 tiles in 8, "
                "got " +
                llvm::Twine(plan.schedule.polyExp2));
  if (plan.schedule.pingPong && plan.blockQ != 128)
    return fail("expected no ping-pong turns with block-q = " +
                llvm::Twine(plan.blockQ) +
                " (the turns alternate two consumer warpgroups)");
  if (plan.forwardSharedBytes() > kMaxSharedBytes)
    return fail("tile needs " + llvm::Twine(plan.forwardSharedBytes()) +
                " bytes of shared memory, more than " +
                llvm::Twine(kMaxSharedBytes));
  return plan;
}

/// `type` as IR prints it (f16, bf16, f32, f8E4M3FN).
static std::string typeText(Type type) {
  std::string text;
  llvm::raw_string_ostream(text) << type;
  return text;
}

/// The element type, head dims and target the tensor-core kernels take,
/// and the options each element type allows.
static LogicalResult checkElementType(bool backward, Type elemType,
                                      int64_t headDim, int64_t headDimV,
                                      const attn::ScoreSpec &spec,
                                      const GpuTileOptions &options,
                                      std::string &error) {
  PlanFailure fail{error};
  if (isa<Float8E4M3FNType>(elemType)) {
    // FA3's fp8 forward and fa's fp8 backward: no mods, dense batches,
    // wgmma only.
    if (options.mma != "wgmma" || options.target != "sm_90a")
      return fail("expected f8E4M3FN kernels with mma = wgmma on sm_90a, "
                  "got " +
                  llvm::Twine(backward ? "a backward" : "a forward") +
                  " with mma = " + options.mma + " on " + options.target);
    if (backward &&
        (headDim != 128 || headDimV != 128 || options.deterministic ||
         options.blockSparse || options.sinks))
      return fail("expected the f8E4M3FN backward at D = Dv = 128, not "
                  "deterministic, block-sparse or with sinks, got D " +
                  llvm::Twine(headDim) + " and Dv " + llvm::Twine(headDimV));
    if (spec.scoreMod || spec.maskMod || options.varlen || options.splitKv ||
        options.packGqa)
      return fail("expected no score_mod, mask_mod, varlen, split-KV or "
                  "packed GQA with f8E4M3FN inputs");
  } else if (elemType.isF32()) {
    // TF32 tensor cores (mma.sync m16n8k8): dense batches so far.
    if (options.mma != "mma_sync")
      return fail("expected f32 kernels with mma = mma_sync (TF32 tensor "
                  "cores), got mma = " + options.mma);
    // dK and dV live in registers beside the split operands: the 3xTF32
    // backward spills 2-22 KB (d64, d128), so only TF32 products build.
    if (backward && !options.tf32)
      return fail("expected tf32 for an f32 backward (one TF32 product per "
                  "multiply; the f32-accurate 3xTF32 backward is not built: "
                  "its dK, dV and split operands spill)");
    if (spec.scoreMod || spec.maskMod || options.sinks || options.splitKv ||
        options.packGqa || options.producerWarp || options.varlen ||
        options.paged)
      return fail("expected no score_mod, mask_mod, sinks, split-KV, packed "
                  "GQA, producer warp, varlen or paged KV with f32 inputs");
  } else if (!elemType.isBF16() && !elemType.isF16()) {
    return fail("expected f16, bf16, f32 (mma.sync) or f8E4M3FN "
                "(wgmma forward) for the tensor-core kernels");
  }
  if (options.descaleBlock && !isa<Float8E4M3FNType>(elemType))
    return fail("block descales apply to f8E4M3FN inputs, got " +
                typeText(elemType));
  if (options.descaleBlock && options.descaleBlock != attn::kDescaleBlockRows)
    return fail("expected block descales of " +
                llvm::Twine(attn::kDescaleBlockRows) + " rows, got " +
                llvm::Twine(options.descaleBlock));
  if (options.tf32 && !elemType.isF32())
    return fail("tf32 applies to f32 inputs, got " + typeText(elemType));
  // The quantiser's rotation is one Hadamard group per row: D a power of
  // two, whole 128-column warp accesses.
  if (!options.quantize.empty() &&
      (!isa<Float8E4M3FNType>(elemType) || backward ||
       (options.quantize != "bf16" && options.quantize != "f16" &&
        options.quantize != "f32")))
    return fail("quantize (bf16, f16 or f32 inputs) comes with the fp8 "
                "forward, got '" +
                options.quantize + "' for " +
                (backward ? "a backward of " : "a forward of ") +
                typeText(elemType));
  // The kernels pad the head dims to a multiple of 16 in shared memory;
  // global rows are copied as wide as their alignment allows.
  for (int64_t dim : {headDim, headDimV})
    if (dim < 1 || dim > 256)
      return fail("expected a head dim in [1, 256], got " + llvm::Twine(dim));
  if (options.target != "sm_80" && options.target != "sm_90" &&
      options.target != "sm_90a")
    return fail("expected target sm_80, sm_90 or sm_90a, got " + options.target);

  return success();
}

/// The options that add a feature to the kernel (deterministic dQ, split-KV,
/// packed GQA, paged KV, the producer warp, TMA, the cache append, varlen,
/// block sparsity, sinks), each checked against the kernels that have it.
static LogicalResult resolveFeatures(KernelPlan &plan,
                                     const GpuTileOptions &options,
                                     std::string &error) {
  PlanFailure fail{error};
  const bool backward = plan.backward;
  const attn::ScoreSpec &spec = plan.spec;
  const int64_t headDim = plan.headDim, headDimV = plan.headDimV;
  // Only the warp-specialised wgmma backward has a dQ writer that can order
  // its reductions; the others add dQ with red.global from every thread.
  if (options.deterministic) {
    if (!backward)
      return fail("the deterministic option applies to the warp-specialised "
                  "wgmma backward only, got a forward (its outputs are "
                  "already deterministic)");
    if (options.mma != "wgmma")
      return fail("the deterministic option needs mma = wgmma (the "
                  "warp-specialised backward), got mma = " + options.mma);
    if (!wgmmaBackwardWarpSpecialized())
      return fail("the deterministic option needs the warp-specialised wgmma "
                  "backward (-fa-wgmma-bwd-ws), not the 256-thread one");
    plan.deterministic = true;
  }
  // The split kernels are the mma.sync forward's, with a split grid
  // dimension and a merge kernel (docs/ABI.md).
  if (options.splitKv) {
    if (backward)
      return fail("split-KV applies to the forward only, got a backward");
    if (options.mma != "mma_sync")
      return fail("split-KV needs mma = mma_sync, got mma = " + options.mma);
    plan.splitKv = true;
  }
  // Packed rows are gathered by the mma.sync forward's Q loads and O/LSE
  // stores (attn_gpu.packed_rows, TileRows.h).
  if (options.packGqa) {
    if (backward)
      return fail("pack-gqa applies to the forward only, got a backward");
    if (options.mma != "mma_sync")
      return fail("pack-gqa needs mma = mma_sync, got mma = " + options.mma);
    // The packed forward is built split-KV only, which also runs unsplit
    // (splits = 1): the unsplit build spills at d128 under causal and
    // window masks (24-40 B).
    if (!options.splitKv)
      return fail("pack-gqa needs split-kv (the packed forward is the "
                  "split-KV kernel; it runs unsplit with splits = 1)");
    plan.packGqa = true;
  }
  if (options.paged) {
    // The gather is the mma.sync split forward's K/V load (cp.async rows).
    if (backward || !options.splitKv)
      return fail(llvm::Twine("a paged KV cache has a GPU kernel for the "
                              "split-KV forward only (split-kv=1, any split "
                              "count at launch), got ") +
                  (backward ? "a backward" : "no split-kv"));
    plan.paged = true;
  }
  if (options.producerWarp) {
    // The producer warp fills the mma.sync forward's K/V ring
    // (attn-gpu-warp-specialize); the wgmma kernels have their own.
    if (backward || options.mma != "mma_sync")
      return fail(llvm::Twine("producer-warp applies to the mma.sync forward "
                              "only, got ") +
                  (backward ? "a backward" : "mma = " + options.mma));
    // Its copies signal the ring when they land: cp.async only, which odd
    // rows (plain stores) would leave out.
    if (headDim % 8 || headDimV % 8)
      return fail("producer-warp needs head dims that are multiples of 8 "
                  "(16-byte cp.async rows), got D " + llvm::Twine(headDim) +
                  " and Dv " + llvm::Twine(headDimV));
    plan.producerWarp = true;
  }
  if (options.tma) {
    // The producer warp's one thread loads a K/V tile as 64-column boxes of
    // a 4-D tensor map into the ring's swizzled slabs (paged: 16-key boxes
    // of the pool's map, each through the page table).
    if (!plan.producerWarp || !plan.splitKv || plan.target != "sm_90a" ||
        !plan.swizzledForwardTiles())
      return fail(llvm::Twine("tma needs the split-KV forward with a producer "
                              "warp on sm_90a, with swizzled tiles (head dims "
                              "multiples of 64, 2 or 4 stages), got ") +
                  (plan.splitKv ? "" : "no split-kv, ") +
                  (plan.producerWarp ? "" : "no producer-warp, ") + "target " +
                  plan.target + ", D " + llvm::Twine(headDim) + ", Dv " +
                  llvm::Twine(headDimV) + ", stages " +
                  llvm::Twine(plan.stages));
    plan.tma = true;
  }
  if (options.kvAppend) {
    // The append runs before the decode that reads the cache.
    if (backward || !options.splitKv)
      return fail(llvm::Twine("kv-append has a GPU kernel beside the "
                              "split-KV forward only (split-kv=1), got ") +
                  (backward ? "a backward" : "no split-kv"));
    plan.kvAppend = true;
  }
  if (options.varlen) {
    // The forward runs on wgmma, the backward on either.
    if (!backward && options.mma != "wgmma")
      return fail("varlen (cu_seqlens) batches have GPU forwards on mma = "
                  "wgmma only, got mma = " + options.mma);
    // The deterministic dQ order counts the key blocks of a dense batch.
    if (options.deterministic)
      return fail("expected no deterministic option on a varlen batch (its "
                  "dQ order counts the key blocks of a dense batch)");
    if (spec.scoreMod)
      return fail("expected no score_mod on a varlen batch on the GPU (its "
                  "mod_args are indexed by a dense batch)");
    // One CTA per (sequence, head, query block): the persistent tile walk
    // counts dense tiles.
    if (options.grid == "persistent")
      return fail("expected grid = blocks for a varlen batch, got grid = "
                  "persistent");
    plan.varlen = true;
  }
  if (options.blockSparse) {
    if (options.mma != "wgmma")
      return fail("block-sparse kernels exist for mma = wgmma only, got mma "
                  "= " + options.mma);
    // The deterministic dQ order counts the key blocks of a dense band;
    // a sparse key block would wait for blocks that never add.
    if (backward && options.deterministic)
      return fail("expected no deterministic option on a block-sparse "
                  "backward (its dQ order assumes every key block of the "
                  "band adds into each query tile)");
    if (!spec.maskMod)
      return fail("expected a mask_mod for a block-sparse kernel (its block "
                  "mask is built from the mask_mod)");
    if (spec.mask != attn::MaskKind::None)
      return fail("expected mask = none for a block-sparse kernel (the "
                  "mask_mod carries the whole mask), got mask = " +
                  attn::stringifyMaskKind(spec.mask));
    if (options.varlen)
      return fail("expected a dense batch for a block-sparse kernel, got a "
                  "varlen batch");
    plan.blockSparse = true;
  }
  if (options.sinks) {
    // The sink joins each row at the finalisation of a whole row (a varlen
    // sequence's too), or, split (a paged decode too), at the merge (one
    // more partial, LSE = sink): the split forward, packed or not, is built
    // without it. Block-sparse rows have no kernel for it yet.
    if (options.blockSparse)
      return fail("expected no block-sparse kernel with sinks (no GPU "
                  "kernel joins a sink there yet)");
    plan.sinks = true;
  }
  return success();
}

/// The mma.sync kernels' tiles: warps, block sizes, the backward's column
/// split and the ring's stages, within a CTA's threads and shared memory.
static FailureOr<KernelPlan> resolveMmaSyncPlan(KernelPlan plan,
                                                const GpuTileOptions &options,
                                                std::string &error) {
  PlanFailure fail{error};
  const bool backward = plan.backward;
  const attn::ScoreSpec &spec = plan.spec;
  const int64_t headDim = plan.headDim, headDimV = plan.headDimV;
  if (!options.grid.empty())
    return fail("grid = " + options.grid +
                " applies to the mma = wgmma forward only, got mma = " +
                options.mma);
  if (options.mma != "mma_sync")
    return fail("expected mma = mma_sync or wgmma, got " + options.mma);
  int64_t maxD = std::max(headDim, headDimV);
  if (!backward) {
    // f32 above D = 64: 8 warps share each K/V tile (one CTA of 8 warps per
    // SM instead of two of 4: TF32 1.2-1.25x on the H200 at d128).
    int64_t warps = plan.isF32() && maxD > 64 ? 8 : 4;
    plan.warps = options.warps ? options.warps
                               : (options.blockQ ? options.blockQ / 16 : warps);
    plan.blockQ = options.blockQ ? options.blockQ : plan.warps * 16;
    // A mask_mod evaluated on every score of a 64-key tile spills (8 B at
    // d64, 72 B at d128 beside a score_mod reading a tensor): 32 keys. So
    // do f32 tiles: at d64 they ran 1.3x the 64-key ones on the H200 (four
    // CTAs per SM instead of two), at d128 2.1x (two instead of one).
    plan.blockKV = options.blockKV                                ? options.blockKV
                   : maxD <= 128 && !spec.maskMod && !plan.isF32() ? 64
                                                                   : 32;
    if (plan.blockQ != plan.warps * 16)
      return fail("expected block-q = 16 x warps, got block-q " +
                  llvm::Twine(plan.blockQ) + " and " + llvm::Twine(plan.warps) +
                  " warps");
  } else {
    // One warp per 16 keys; query tiles of 64 rows (32 for large D). For
    // D = Dv in {64, 128} the measured default is wider: 8 warps, 128 keys,
    // 64 query rows (0.83-0.89x SDPA flash vs 0.73-0.86x; docs/gpu-notes.md).
    // The window mask's two-sided test spills at d128 with 8 warps (684 B).
    // A score_mod keeps d(score)/d(S) per score until dS: the wide tile
    // spills at d128 (112 B), the 4-warp one does not.
    bool wide = !options.warps && !options.blockKV && !options.blockQ &&
                !spec.scoreMod &&
                plan.headDim == plan.headDimV &&
                (plan.headDim == 64 ||
                 (plan.headDim == 128 && spec.mask != attn::MaskKind::Window));
    plan.warps = options.warps ? options.warps
                 : options.blockKV ? options.blockKV / 16
                 : wide            ? 8
                                   : 4;
    plan.blockKV = options.blockKV ? options.blockKV : plan.warps * 16;
    // Head dims that are not multiples of 8 copy Q and dO in narrower
    // chunks (more address registers): 64-row tiles only up to D = 48.
    bool narrow = headDim % 8 || headDimV % 8;
    plan.blockQ = options.blockQ ? options.blockQ
                  : (wide || maxD <= (narrow ? 48 : 64)) ? 64
                                                         : 32;
    if (plan.blockKV != plan.warps * 16)
      return fail("expected block-kv = 16 x warps for the backward, got block-kv " +
                  llvm::Twine(plan.blockKV) + " and " + llvm::Twine(plan.warps) +
                  " warps");
    // dQ = dS·K splits the block_q × D tile over the warps by 16-row groups.
    if (plan.blockQ % 16 || plan.warps % std::max<int64_t>(plan.blockQ / 16, 1))
      return fail("expected the warps to be a multiple of block-q / 16 for the "
                  "backward, got block-q " + llvm::Twine(plan.blockQ) + " and " +
                  llvm::Twine(plan.warps) + " warps");
    // dK and dV stay in registers: one accumulator per lane for every two
    // columns, in n8 tiles. Above D + Dv = 256, `dsplit` CTAs per key block
    // each own an equal column slice (a multiple of 8, so slices start
    // 16-byte aligned) of dK, dQ and dV; each recomputes Sᵀ and dPᵀ over the
    // full head dims.
    plan.dsplit = 0;
    if (llvm::alignTo(headDim, 8) + llvm::alignTo(headDimV, 8) <= 256)
      plan.dsplit = 1;
    for (int64_t s = 2; s <= 8 && !plan.dsplit; ++s)
      if (headDim % (8 * s) == 0 && headDimV % (8 * s) == 0 &&
          (headDim + headDimV) / s <= 256)
        plan.dsplit = s;
    if (!plan.dsplit)
      return fail("expected D and Dv to split into column slices that are "
                  "multiples of 8 with D + Dv <= 256 per slice for the "
                  "backward (dK and dV live in registers), got D " +
                  llvm::Twine(headDim) + " and Dv " + llvm::Twine(headDimV));
  }
  if (plan.blockQ % 16 || plan.blockKV % 16 || plan.blockQ <= 0 ||
      plan.blockKV <= 0)
    return fail("expected block-q and block-kv to be positive multiples of 16");
  // A CTA has at most 1024 threads.
  if (plan.warps < 1 || plan.threads() > 1024)
    return fail(llvm::Twine("expected 1 to ") +
                (plan.producerWarp ? "31 warps and the producer warp"
                                   : "32 warps") +
                " (at most 1024 threads per CTA), got " +
                llvm::Twine(plan.warps));
  // The forward streams K/V through a ring of 2 to 4 stages; the backward
  // keeps K/V resident and single-buffers the Q/dO tiles of its query loop.
  if (backward)
    plan.stages = 1;
  else if (plan.stages < 2 || plan.stages > 4)
    return fail("expected 2 to 4 stages (the K/V ring of the mma.sync "
                "forward), got " + llvm::Twine(plan.stages));
  // The backward keeps full K, V, Q and dO tiles (the recomputed products
  // need every column): a default query tile shrinks until they fit.
  while (backward && !options.blockQ && plan.blockQ > 16 &&
         plan.backwardSharedBytes() > kMaxSharedBytes)
    plan.blockQ /= 2;
  int64_t smem =
      backward ? plan.backwardSharedBytes() : plan.forwardSharedBytes();
  if (smem > kMaxSharedBytes)
    return fail("tile needs " + llvm::Twine(smem) +
                " bytes of shared memory, more than " +
                llvm::Twine(kMaxSharedBytes));
  return plan;
}

FailureOr<KernelPlan>
mlir::fa::resolveKernelPlan(bool backward, Type elemType, int64_t headDim,
                            int64_t headDimV, const attn::ScoreSpec &spec,
                            const GpuTileOptions &options, std::string &error) {
  if (failed(checkElementType(backward, elemType, headDim, headDimV, spec,
                              options, error)))
    return failure();
  KernelPlan plan;
  plan.backward = backward;
  plan.elemType = elemType;
  plan.headDim = headDim;
  plan.headDimV = headDimV;
  plan.target = options.target;
  plan.spec = spec;
  plan.stages = options.stages;
  plan.tf32 = options.tf32;
  plan.descaleBlock = options.descaleBlock;
  plan.quantize = options.quantize;
  if (failed(resolveFeatures(plan, options, error)))
    return failure();
  if (options.mma == "wgmma")
    return resolveWgmmaPlan(plan, options, error);
  return resolveMmaSyncPlan(plan, options, error);
}

/// The name a score_mod or mask_mod (`region`, or null) goes by in tags:
/// the plan's field `planField`, or the op's attribute `opAttr`, else "r"
/// and a hash of the region's text, so equal regions share kernels.
static std::string modName(Operation *op, Region *region, StringRef planField,
                           StringRef opAttr) {
  if (!region)
    return "";
  if (auto plan = op->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr))
    if (auto name = plan.getAs<StringAttr>(planField))
      return name.str();
  if (auto name = op->getAttrOfType<StringAttr>(opAttr))
    return name.str();
  std::string text;
  llvm::raw_string_ostream os(text);
  Block &body = region->front();
  for (BlockArgument arg : body.getArguments())
    os << arg.getType() << ",";
  for (Operation &o : body)
    o.print(os, OpPrintingFlags().useLocalScope().skipRegions(false));
  return "r" + llvm::utohexstr(llvm::xxh3_64bits(text), /*LowerCase=*/true)
                   .substr(0, 8);
}

FailureOr<KernelPlan> mlir::fa::resolveKernelPlanFor(
    Operation *op, const GpuTileOptions &options, std::string &error) {
  bool backward = isa<attn::AttentionBackwardOp, attn::BackwardTileOp>(op);
  auto q = cast<ShapedType>(op->getOperand(0).getType());
  auto v = cast<ShapedType>(op->getOperand(2).getType());
  attn::ScoreSpec spec =
      llvm::TypeSwitch<Operation *, attn::ScoreSpec>(op)
          .Case<attn::AttentionOp, attn::AttentionBackwardOp,
                attn::OnlineAttentionOp, attn::BackwardTileOp>(
              [](auto o) { return o.getScoreSpec(); });
  // The attn ops say whether they have sinks and block descales; tile ops
  // keep their plan's.
  GpuTileOptions fromOp = options;
  if (auto fwd = dyn_cast<attn::AttentionOp>(op)) {
    fromOp.sinks = static_cast<bool>(fwd.getSinks());
    fromOp.descaleBlock =
        attn::isBlockDescale(fwd.getDescaleQ()) ? attn::kDescaleBlockRows : 0;
  }
  if (auto bwd = dyn_cast<attn::AttentionBackwardOp>(op))
    fromOp.sinks = static_cast<bool>(bwd.getSinks());
  FailureOr<KernelPlan> plan =
      resolveKernelPlan(backward, q.getElementType(), q.getShape().back(),
                        v.getShape().back(), spec, fromOp, error);
  if (succeeded(plan)) {
    plan->scoreModName =
        modName(op, spec.scoreMod, "score_mod", kScoreModNameAttr);
    plan->maskModName =
        modName(op, spec.maskMod, "mask_mod", kMaskModNameAttr);
  }
  return plan;
}

DictionaryAttr mlir::fa::kernelPlanAttr(MLIRContext *ctx,
                                        const KernelPlan &plan) {
  Builder b(ctx);
  SmallVector<NamedAttribute> fields{
      b.getNamedAttr("block_q", b.getI64IntegerAttr(plan.blockQ)),
      b.getNamedAttr("block_kv", b.getI64IntegerAttr(plan.blockKV)),
      b.getNamedAttr("warps", b.getI64IntegerAttr(plan.warps)),
      b.getNamedAttr("stages", b.getI64IntegerAttr(plan.stages)),
      b.getNamedAttr("target", b.getStringAttr(plan.target)),
      b.getNamedAttr("mma", b.getStringAttr(plan.strategy == MmaStrategy::Wgmma
                                                ? "wgmma"
                                                : "mma_sync")),
      b.getNamedAttr("tag", b.getStringAttr(plan.tag()))};
  // The grid is a choice of the wgmma forward only (resolveWgmmaPlan).
  if (plan.strategy == MmaStrategy::Wgmma && !plan.backward)
    fields.push_back(b.getNamedAttr(
        "grid", b.getStringAttr(plan.persistent ? "persistent" : "blocks")));
  if (plan.deterministic)
    fields.push_back(b.getNamedAttr("deterministic", b.getUnitAttr()));
  if (plan.splitKv)
    fields.push_back(b.getNamedAttr("split_kv", b.getUnitAttr()));
  if (plan.packGqa)
    fields.push_back(b.getNamedAttr("pack_gqa", b.getUnitAttr()));
  if (plan.varlen)
    fields.push_back(b.getNamedAttr("varlen", b.getUnitAttr()));
  if (plan.paged)
    fields.push_back(b.getNamedAttr("paged", b.getUnitAttr()));
  if (plan.kvAppend)
    fields.push_back(b.getNamedAttr("kv_append", b.getUnitAttr()));
  if (plan.blockSparse)
    fields.push_back(b.getNamedAttr("block_sparse", b.getUnitAttr()));
  if (plan.sinks)
    fields.push_back(b.getNamedAttr("sinks", b.getUnitAttr()));
  if (plan.producerWarp)
    fields.push_back(b.getNamedAttr("producer_warp", b.getUnitAttr()));
  if (plan.tma)
    fields.push_back(b.getNamedAttr("tma", b.getUnitAttr()));
  if (plan.tf32)
    fields.push_back(b.getNamedAttr("tf32", b.getUnitAttr()));
  if (!plan.quantize.empty())
    fields.push_back(
        b.getNamedAttr("quantize", b.getStringAttr(plan.quantize)));
  if (plan.descaleBlock)
    fields.push_back(b.getNamedAttr("descale_block",
                                    b.getI64IntegerAttr(plan.descaleBlock)));
  if (!plan.scoreModName.empty())
    fields.push_back(
        b.getNamedAttr("score_mod", b.getStringAttr(plan.scoreModName)));
  if (!plan.maskModName.empty())
    fields.push_back(
        b.getNamedAttr("mask_mod", b.getStringAttr(plan.maskModName)));
  if (plan.strategy == MmaStrategy::Wgmma && !plan.backward) {
    const WgmmaForwardSchedule &w = plan.schedule;
    SmallVector<NamedAttribute> schedule{
        b.getNamedAttr("ping_pong", b.getBoolAttr(w.pingPong)),
        b.getNamedAttr("smem_epilogue", b.getBoolAttr(w.smemEpilogue)),
        b.getNamedAttr("lazy_rescale", b.getBoolAttr(w.lazyRescale)),
        b.getNamedAttr("rescale_in_turn", b.getBoolAttr(w.rescaleInTurn)),
        b.getNamedAttr("ragged_first", b.getBoolAttr(w.raggedFirst))};
    if (w.polyExp2)
      schedule.push_back(
          b.getNamedAttr("poly_exp2", b.getI64IntegerAttr(w.polyExp2)));
    fields.push_back(b.getNamedAttr("schedule", b.getDictionaryAttr(schedule)));
  }
  return b.getDictionaryAttr(fields);
}

GpuTileOptions mlir::fa::kernelPlanOptions(DictionaryAttr attr) {
  GpuTileOptions options;
  auto integer = [&](StringRef name) {
    auto a = attr.getAs<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  auto string = [&](StringRef name, StringRef otherwise) {
    auto a = attr.getAs<StringAttr>(name);
    return (a ? a.getValue() : otherwise).str();
  };
  options.blockQ = integer("block_q");
  options.blockKV = integer("block_kv");
  options.warps = integer("warps");
  options.stages = integer("stages");
  options.target = string("target", "");
  options.mma = string("mma", "");
  options.grid = string("grid", "");
  options.deterministic = attr.contains("deterministic");
  options.splitKv = attr.contains("split_kv");
  options.packGqa = attr.contains("pack_gqa");
  options.varlen = attr.contains("varlen");
  options.paged = attr.contains("paged");
  options.kvAppend = attr.contains("kv_append");
  options.blockSparse = attr.contains("block_sparse");
  options.sinks = attr.contains("sinks");
  options.producerWarp = attr.contains("producer_warp");
  options.tma = attr.contains("tma");
  options.tf32 = attr.contains("tf32");
  options.descaleBlock = integer("descale_block");
  options.quantize = string("quantize", "");
  if (auto schedule = attr.getAs<DictionaryAttr>("schedule")) {
    auto flag = [&](StringRef name) {
      auto a = schedule.getAs<BoolAttr>(name);
      return a && a.getValue();
    };
    WgmmaForwardSchedule w;
    w.pingPong = flag("ping_pong");
    w.smemEpilogue = flag("smem_epilogue");
    w.lazyRescale = flag("lazy_rescale");
    w.rescaleInTurn = flag("rescale_in_turn");
    w.raggedFirst = flag("ragged_first");
    if (auto poly = schedule.getAs<IntegerAttr>("poly_exp2"))
      w.polyExp2 = poly.getInt();
    options.schedule = w;
  }
  return options;
}
