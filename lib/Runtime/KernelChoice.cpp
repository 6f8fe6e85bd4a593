//===- KernelChoice.cpp - Choose a bundle's kernel for a problem ---------===//
//
// A bundle may hold several kernels for one problem (targets, instructions,
// tiles, grids). fa_kernel_find* takes the one that runs best on the device:
// native code before PTX, wgmma before mma.sync, then the lowest modelled
// cost of the key loop. A kernel's score_mod is part of the problem: only
// kernels of the query's score_mod name (or of none) match; so is an fp8
// kernel's descale form (per head or per 64-row block). When none fits, the
// error lists what the bundle has.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <cstdint>
#include <numeric>
#include <set>
#include <sstream>

using namespace fa::runtime;

namespace fa::runtime {

int targetRank(const KernelConfig &c, int cc) {
  const Target &t = c.target;
  bool exact = t.cc == cc;
  if (exact && !c.cubinPath.empty())
    return 3000 + t.cc; // native code: no JIT
  if (c.ptxPath.empty())
    return 0;
  if (t.archSpecific ? exact : t.cc <= cc)
    return 1000 + t.cc; // JIT; prefer the newest target
  return 0;
}

int kernelRank(const KernelConfig &c, int cc, fa_mma want) {
  if (want != FA_MMA_ANY && c.mma != want)
    return 0;
  int rank = targetRank(c, cc);
  // wgmma kernels are sm_90a-only and run where nothing else is faster.
  if (rank > 0 && want == FA_MMA_ANY && c.mma == FA_MMA_WGMMA)
    rank += 10000;
  return rank;
}

} // namespace fa::runtime

namespace {

/// Modeled cost of one query tile over nk keys, in key columns: each key
/// tile costs its block_kv columns plus a fixed per-tile overhead (the softmax
/// reductions, barriers and the ring handshake). A kernel with one CTA per
/// query tile pays its prologue and epilogue on top, which a persistent grid
/// overlaps with the previous tile, but a persistent grid runs each key tile
/// a little slower (it loses the hardware's balancing of unequal tiles and
/// L2 sharing). Fitted to the H200 wgmma forward (PERF.md): 32 to block_kv
/// 128 vs 192 at N = 1k..8k; 64 and 3% to persistent vs one-CTA kernels at
/// N = 512..16k, where a persistent kernel of the same tile wins up to ~12 key
/// tiles. With nk unknown (0) the cost per key decides (rows taken as long).
///
/// Under a causal mask (Nq taken as Nk) the average query tile reads
/// (Nk + block_q) / 2 keys; its diagonal tile is ragged, on average
/// (1 - gcd(block_q, block_kv) / block_kv) / 2 of a tile beyond the band, and
/// masked, half a tile's columns more. A persistent grid loses 6% per tile
/// there. Fitted to block_kv 128 vs 192 (both head dims: 128 up to 2k keys,
/// 192 from 4k) and persistent vs one-CTA tiles at D = 64 (persistent up to
/// 1k keys).
///
/// A kernel loading its tiles by TMA (tensor maps: every wgmma kernel, and
/// the split-KV and paged decode kernels of config `tma`) reads a key tile
/// at 0.96 of the time of its cp.async twin: the decode grid's median, paged
/// 0.83-0.95 (PERF.md, sixteenth and seventeenth sessions).
double keyLoopCost(const KernelConfig &c, int64_t nk) {
  constexpr double kTileOverheadKeys = 32, kCtaOverheadKeys = 64,
                   kPersistentTileFactor = 1.03,
                   kCausalPersistentTileFactor = 1.06, kMaskedTiles = 0.5,
                   kTmaTileFactor = 0.96;
  const bool causal =
      c.mask == FA_MASK_CAUSAL || c.mask == FA_MASK_CAUSAL_BOTTOM_RIGHT;
  double bkv = c.blockKV;
  double perTile =
      (bkv + kTileOverheadKeys) *
      (!c.fwd.persistent ? 1.0
       : causal          ? kCausalPersistentTileFactor
                         : kPersistentTileFactor) *
      (c.tensorMaps.empty() ? 1.0 : kTmaTileFactor);
  if (nk <= 0)
    return perTile / bkv;
  double cta = c.fwd.persistent ? 0 : kCtaOverheadKeys;
  if (!causal)
    return static_cast<double>((nk + c.blockKV - 1) / c.blockKV) * perTile +
           cta;
  double ragged =
      (1.0 - static_cast<double>(std::gcd(c.blockQ, c.blockKV)) / bkv) / 2;
  double tiles = (static_cast<double>(nk) + c.blockQ) / (2 * bkv) + ragged;
  return tiles * perTile + cta + kMaskedTiles * bkv;
}

/// Modelled cost of a (batch, head)'s query tiles, Nq taken as nk: a tile's
/// key loop (keyLoopCost) times the tiles, where a 192-row tile (three
/// consumer warpgroups) runs a key tile in 1.38 times a 128-row one's time
/// (0.92 per row; fitted to d64 bq192 vs bq128 on an H100, N 1k-16k, PERF.md
/// 2026-12-05) but leaves its last tile more ragged. With nk unknown, the cost
/// per query row and key. Kernels of one block_q compare as by keyLoopCost.
double queryRowsCost(const KernelConfig &c, int64_t nk) {
  constexpr double kThreeConsumerTileFactor = 1.38;
  double tile =
      keyLoopCost(c, nk) * (c.blockQ == 192 ? kThreeConsumerTileFactor : 1.0);
  if (nk <= 0)
    return tile / c.blockQ;
  return static_cast<double>((nk + c.blockQ - 1) / c.blockQ) * tile;
}

/// The query rows of a packed-GQA problem: `group` query heads per key head
/// and `nq` queries of each (fa_kernel_find_packed_gqa_rows); 0 unknown.
struct PackedRows {
  int64_t group = 0, nq = 0;
};

/// Modelled cost of the query tiles of one (batch, key head) of a packed
/// problem, in query rows: each tile costs its block_q rows plus a fixed
/// overhead of 112 rows' worth (the K/V tiles it reads, the softmax's
/// reductions, the CTA's start), which every tile pays however few of its
/// rows are real. So the smallest tile that holds a (batch, key head)'s rows
/// wins, and rows past it go to the larger tile rather than to two small
/// ones. Fitted to bq16 (one consumer warp) vs bq32 (two) on the H200
/// decode grid (PERF.md, eighteenth session): one tile of 16 rows against one
/// of 32 at 0.54-1.02 of its time, two of 16 against one of 32 at 0.56-1.19,
/// four against two at 1.04-1.64. With the rows unknown, 1 (the key loop
/// decides; among equals the larger tile, which holds more heads).
double queryTilesCost(const KernelConfig &c, const PackedRows &rows) {
  constexpr double kQueryTileOverheadRows = 112;
  if (rows.group <= 0 || rows.nq <= 0)
    return 1;
  double perTile = c.blockQ + kQueryTileOverheadRows;
  int64_t queriesPerTile = std::max<int64_t>(c.blockQ / rows.group, 1);
  return static_cast<double>((rows.nq + queriesPerTile - 1) / queriesPerTile) *
         perTile;
}

const char *maskName(fa_mask m) {
  switch (m) {
  case FA_MASK_NONE:
    return "none";
  case FA_MASK_CAUSAL:
    return "causal";
  case FA_MASK_CAUSAL_BOTTOM_RIGHT:
    return "causal_bottom_right";
  case FA_MASK_WINDOW:
    return "window";
  }
  return "<invalid mask>";
}

const char *mmaName(fa_mma m) {
  switch (m) {
  case FA_MMA_ANY:
    return "any";
  case FA_MMA_SYNC:
    return "mma_sync";
  case FA_MMA_WGMMA:
    return "wgmma";
  }
  return "<invalid mma>";
}

/// A problem as errors name it: "fwd bf16 d=128 dv=128 mask=causal", then
/// " score_mod=<name>" for a score_mod.
std::string describe(fa_direction dir, fa_dtype dtype, int d, int dv,
                     fa_mask mask, int windowLeft, int windowRight,
                     fa_mma mma, const std::string &scoreMod = "",
                     const std::string &maskMod = "") {
  std::ostringstream os;
  os << (dir == FA_DIRECTION_FWD ? "fwd" : "bwd") << ' ' << fa_dtype_name(dtype)
     << " d=" << d << " dv=" << dv << " mask=" << maskName(mask);
  if (mask == FA_MASK_WINDOW)
    os << '(' << windowLeft << ',' << windowRight << ')';
  if (mma != FA_MMA_ANY)
    os << " mma=" << mmaName(mma);
  if (!scoreMod.empty())
    os << " score_mod=" << scoreMod;
  if (!maskMod.empty())
    os << " mask_mod=" << maskMod;
  return os.str();
}

/// The kernel's own problem, with its target, for the list of what a
/// bundle has.
std::string describeKernel(const KernelConfig &c) {
  return describe(c.direction, c.dtype, c.headDim, c.headDimV, c.mask,
                  c.windowLeft, c.windowRight,
                  c.mma == FA_MMA_WGMMA ? FA_MMA_WGMMA : FA_MMA_ANY, c.scoreMod,
                  c.maskMod) +
         (c.deterministic ? " (deterministic)" : "") +
         (c.varlen ? " (varlen)" : "") + (c.sinks ? " (sinks)" : "") +
         (c.tf32 ? " (tf32)" : "") +
         (c.descaleBlock
              ? " (descale_block " + std::to_string(c.descaleBlock) + ")"
              : "") +
         " (" + c.targetName + ")";
}

/// The query's compute capability, else the current context's device's.
fa_status queryComputeCapability(const fa_kernel_query &q, int &cc) {
  cc = q.compute_capability;
  if (cc != 0)
    return FA_SUCCESS;
  if (fa_status s = initDriver())
    return s;
  CUdevice dev;
  CUresult r = cuCtxGetDevice(&dev);
  if (r != CUDA_SUCCESS)
    return fail(FA_ERROR_CUDA,
                cuMessage("cuCtxGetDevice", r) +
                    "; make a context current or set compute_capability");
  return deviceComputeCapability(dev, cc);
}

/// Whether kernel `c` computes the query's attention problem (direction,
/// dtype, head dims, mask), whatever its score_mod, instructions and target.
bool computesAttention(const KernelConfig &c, const fa_kernel_query &q,
                       int headDimV) {
  if (c.direction != q.direction || c.dtype != q.dtype ||
      c.headDim != q.head_dim || c.headDimV != headDimV || c.mask != q.mask)
    return false;
  return q.mask != FA_MASK_WINDOW || c.windowRuntime ||
         (c.windowLeft == q.window_left && c.windowRight == q.window_right);
}

/// The kernels that need their own launch (split-KV, packed GQA, varlen,
/// block-sparse): each search takes one family and never returns another's.
struct KernelFamily {
  bool splitKv = false, packGqa = false, varlen = false, blockSparse = false,
       paged = false;
  /// Only kernels with fa_kv_append; a family without it takes them too
  /// (their forward is the same kernel).
  bool kvAppend = false;

  bool holds(const KernelConfig &c) const {
    return c.splitKv == splitKv && c.packGqa == packGqa &&
           c.varlen == varlen && c.blockSparse == blockSparse &&
           c.paged == paged && (!kvAppend || c.kvAppend);
  }
  /// " (split-KV)" etc., for the not-found message.
  std::string describe() const {
    return std::string(splitKv ? " (split-KV)" : "") +
           (packGqa ? " (packed GQA)" : "") + (varlen ? " (varlen)" : "") +
           (blockSparse ? " (block-sparse)" : "") +
           (paged ? " (paged KV)" : "") + (kvAppend ? " (kv_append)" : "");
  }
};

/// Whether kernel `c` of `family` computes the query's problem with its
/// score_mod (`scoreMod`, "" for none), whatever its target.
bool computesQuery(const KernelConfig &c, const fa_kernel_query &q,
                   int headDimV, const std::string &scoreMod,
                   const std::string &maskMod, bool deterministic,
                   const KernelFamily &family) {
  if (!computesAttention(c, q, headDimV) || c.scoreMod != scoreMod ||
      c.maskMod != maskMod || c.sinks != (q.sinks != 0) || !family.holds(c))
    return false;
  if (q.mma != FA_MMA_ANY && c.mma != q.mma)
    return false;
  return c.deterministic == deterministic;
}

/// The score_mods of the bundle's kernels for the query's attention problem,
/// "" for plain ones.
std::set<std::string> scoreModsFor(const fa_bundle &bundle,
                                   const fa_kernel_query &q, int headDimV) {
  std::set<std::string> mods;
  for (const auto &k : bundle.kernels)
    if (!k->config.splitKv && !k->config.packGqa && !k->config.varlen &&
        computesAttention(k->config, q, headDimV))
      mods.insert(k->config.scoreMod);
  return mods;
}

/// The error when no kernel was chosen: either some compute the problem but
/// none runs on sm_<cc>, or none computes it and the bundle's list follows
/// `hints` (why the near misses were not taken).
fa_status noKernelError(const fa_bundle &bundle, const std::string &want,
                        const std::vector<std::string> &matchingTargets, int cc,
                        bool deterministic, const std::string &hints) {
  if (!matchingTargets.empty()) {
    std::string targets;
    for (const std::string &t : matchingTargets)
      targets += (targets.empty() ? "" : ", ") + t;
    return fail(FA_ERROR_UNSUPPORTED,
                "bundle '" + bundle.dir + "' has " + want +
                    " only for targets " + targets +
                    ", none of which runs on sm_" + std::to_string(cc));
  }
  std::string have;
  for (const auto &k : bundle.kernels)
    have += "\n  " + describeKernel(k->config);
  std::string hint;
  if (deterministic)
    hint = "; deterministic kernels are built with the 'det' config field "
           "(e.g. bwd:bf16:d128:causal:wgmma:det), for warp-specialised "
           "wgmma backwards only";
  return fail(FA_ERROR_NOT_FOUND,
              "bundle '" + bundle.dir + "' has no " +
                  (deterministic ? "deterministic " : "") + "kernel for " +
                  want + hint + hints +
                  "; it has:" + (have.empty() ? " none" : have));
}

/// What a TF32 kernel adds to its kernelRank for a query that allows TF32:
/// more than any kernelRank, so it wins over every f32-accurate kernel.
constexpr int kTf32Rank = 100000;

/// fa_kernel_find_for_keys over the bundle's deterministic kernels only, or
/// over one family's kernels only.
fa_status findKernel(const fa_bundle *bundle, const fa_kernel_query *query,
                     int64_t nk, bool deterministic, const fa_kernel **out,
                     const KernelFamily &family = {},
                     const PackedRows &rows = {}) {
  if (!bundle || !query || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_kernel_find: null argument");
  if (nk < 0)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find_for_keys: nk is " + std::to_string(nk) +
                    "; expected the number of keys, or 0 if unknown");
  *out = nullptr;
  const fa_kernel_query &q = *query;
  if (q.mma != FA_MMA_ANY && q.mma != FA_MMA_SYNC && q.mma != FA_MMA_WGMMA)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: mma is " + std::to_string(q.mma) +
                    "; expected FA_MMA_ANY, FA_MMA_SYNC or FA_MMA_WGMMA");
  std::string scoreMod = q.score_mod ? q.score_mod : "";
  if (q.score_mod && !isScoreModName(scoreMod))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: score_mod is '" + scoreMod +
                    "'; expected NULL (none) or a name of identifier "
                    "characters ([A-Za-z_][A-Za-z0-9_]*)");
  std::string maskMod = q.mask_mod ? q.mask_mod : "";
  if (q.mask_mod && !isScoreModName(maskMod))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: mask_mod is '" + maskMod +
                    "'; expected NULL (none) or a name of identifier "
                    "characters ([A-Za-z_][A-Za-z0-9_]*)");
  if (q.mask == FA_MASK_WINDOW && (q.window_left < -1 || q.window_right < -1))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: window (" + std::to_string(q.window_left) +
                    ", " + std::to_string(q.window_right) +
                    "); expected sizes >= 0, or -1 for an unbounded side");
  const bool fp8 = q.dtype == FA_DTYPE_F8E4M3;
  if (fp8 && q.descale_block != 0 && q.descale_block != 64)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: descale_block is " +
                    std::to_string(q.descale_block) +
                    "; expected 0 (fp8 descales per batch and key head) or "
                    "64 (Q and K descales per 64-row block)");
  int dv = q.head_dim_v ? q.head_dim_v : q.head_dim;
  int cc = 0;
  if (fa_status s = queryComputeCapability(q, cc))
    return s;
  // Kernels of one rank differ in their tiles or grid: take the cheapest.
  auto cheaper = [&](const KernelConfig &c, const KernelConfig &than) {
    // The wgmma forwards' 128- and 192-row tiles compare per query row.
    if (!family.packGqa && c.mma == FA_MMA_WGMMA && than.mma == FA_MMA_WGMMA)
      return queryRowsCost(c, nk) < queryRowsCost(than, nk);
    if (!family.packGqa)
      return keyLoopCost(c, nk) < keyLoopCost(than, nk);
    double a = keyLoopCost(c, nk), b = keyLoopCost(than, nk);
    a *= queryTilesCost(c, rows);
    b *= queryTilesCost(than, rows);
    return a < b || (a == b && c.blockQ > than.blockQ);
  };
  const fa_kernel *best = nullptr;
  int bestRank = 0;
  std::vector<std::string> matchingTargets;
  bool tf32Refused = false; // a TF32 kernel matched, but the query refuses it
  // An fp8 kernel matched, but reads the other descale form: its block.
  int otherDescaleBlock = -1;
  for (const auto &k : bundle->kernels) {
    const KernelConfig &c = k->config;
    if (!computesQuery(c, q, dv, scoreMod, maskMod, deterministic, family))
      continue;
    // A packed tile holds whole groups of query heads.
    if (family.packGqa && rows.group > c.blockQ)
      continue;
    // Only f32 kernels are TF32 (the manifest's rule), and only by consent.
    if (c.tf32 && !q.allow_tf32) {
      tf32Refused = true;
      continue;
    }
    // An fp8 kernel reads its descales in one form only.
    if (fp8 && c.descaleBlock != q.descale_block) {
      otherDescaleBlock = c.descaleBlock;
      continue;
    }
    matchingTargets.push_back(c.targetName);
    int rank = kernelRank(c, cc, q.mma);
    // The caller who allows TF32 wants its speed (a third of the MMAs)
    // over any f32-accurate kernel that runs, whatever its instructions.
    if (rank > 0 && c.tf32)
      rank += kTf32Rank;
    // A compile-time window's kernel before a run-time one of its rank.
    rank *= 2;
    if (rank > 0 && !c.windowRuntime)
      ++rank;
    if (rank > bestRank ||
        (rank == bestRank && rank > 0 && cheaper(c, best->config))) {
      best = k.get();
      bestRank = rank;
    }
  }
  if (best) {
    *out = best->config.windowRuntime
               ? bundle->windowView(*best, q.window_left, q.window_right)
               : best;
    return succeed();
  }
  std::string want =
      describe(q.direction, q.dtype, q.head_dim, dv, q.mask, q.window_left,
               q.window_right, q.mma, scoreMod, maskMod) +
      (deterministic ? " (deterministic)" : "") + family.describe() +
      (q.sinks ? " (sinks)" : "") +
      (q.dtype == FA_DTYPE_F32 && q.allow_tf32 ? " (tf32 allowed)" : "") +
      (fp8 && q.descale_block
           ? " (descale_block " + std::to_string(q.descale_block) + ")"
           : "");
  if (rows.group > 0)
    want += " holding " + std::to_string(rows.group) +
            " query heads per key head";
  // Where the bundle has the attention problem but not with this score_mod,
  // say which score_mods it has for it.
  std::string hints;
  std::set<std::string> mods = scoreModsFor(*bundle, q, dv);
  if (!mods.empty() && !mods.count(scoreMod)) {
    std::string list;
    for (const std::string &m : mods)
      list += (list.empty() ? "" : ", ") + (m.empty() ? "none" : m);
    hints = "; score_mod " + (scoreMod.empty() ? "none" : scoreMod) +
            " is not in the bundle for " +
            describe(q.direction, q.dtype, q.head_dim, dv, q.mask,
                     q.window_left, q.window_right, FA_MMA_ANY) +
            ", which has score_mod " + list;
  }
  if (tf32Refused)
    hints += "; the bundle has a TF32 kernel for it (fa_kernel_info.tf32), "
             "but the query's allow_tf32 is 0 (set it to 1 to accept TF32 "
             "products, or build the f32-accurate kernel: the config "
             "without 'tf32')";
  if (otherDescaleBlock >= 0)
    hints += "; the bundle has an fp8 kernel for it with descale_block " +
             std::to_string(otherDescaleBlock) +
             ", but the query's descale_block is " +
             std::to_string(q.descale_block) +
             " (0: descales per batch and key head, 64: Q and K descales per "
             "64-row block; a kernel reads one form)";
  return noKernelError(*bundle, want, matchingTargets, cc, deterministic,
                       hints);
}

} // namespace

extern "C" {

fa_status fa_kernel_find(const fa_bundle *bundle, const fa_kernel_query *query,
                         const fa_kernel **out) try {
  return findKernel(bundle, query, 0, false, out);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_for_keys(const fa_bundle *bundle,
                                  const fa_kernel_query *query, int64_t nk,
                                  const fa_kernel **out) try {
  return findKernel(bundle, query, nk, false, out);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_splitkv(const fa_bundle *bundle,
                                  const fa_kernel_query *query, int64_t nk,
                                  const fa_kernel **out) try {
  KernelFamily splitKv;
  splitKv.splitKv = true;
  return findKernel(bundle, query, nk, false, out, splitKv);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_packed_gqa(const fa_bundle *bundle,
                                    const fa_kernel_query *query, int64_t nk,
                                    int32_t split_kv,
                                    const fa_kernel **out) try {
  if (split_kv != 0 && split_kv != 1)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find_packed_gqa: split_kv is " +
                    std::to_string(split_kv) + "; expected 0 or 1");
  KernelFamily packed;
  packed.splitKv = split_kv == 1;
  packed.packGqa = true;
  return findKernel(bundle, query, nk, false, out, packed);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

/// fa_kernel_find_{packed_gqa,paged}_rows: `flag` (split_kv or append) is 0
/// or 1, group and nq positive int32 values; else the error naming `api`.
fa_status checkRowsQuery(const char *api, const char *flagName, int32_t flag,
                         int64_t group, int64_t nq) {
  if (flag != 0 && flag != 1)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + flagName +
                                               " is " + std::to_string(flag) +
                                               "; expected 0 or 1");
  if (group < 1 || nq < 1 || group > INT32_MAX || nq > INT32_MAX)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": group " + std::to_string(group) +
                    ", nq " + std::to_string(nq) +
                    ": each must be in [1, 2^31 - 1]");
  return FA_SUCCESS;
}

fa_status fa_kernel_find_packed_gqa_rows(const fa_bundle *bundle,
                                         const fa_kernel_query *query,
                                         int64_t group, int64_t nq, int64_t nk,
                                         int32_t split_kv,
                                         const fa_kernel **out) try {
  if (fa_status s = checkRowsQuery(__func__, "split_kv", split_kv, group, nq))
    return s;
  KernelFamily packed;
  packed.splitKv = split_kv == 1;
  packed.packGqa = true;
  return findKernel(bundle, query, nk, false, out, packed, {group, nq});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_paged_rows(const fa_bundle *bundle,
                                    const fa_kernel_query *query, int64_t group,
                                    int64_t nq, int64_t nk, int32_t append,
                                    const fa_kernel **out) try {
  if (fa_status s = checkRowsQuery(__func__, "append", append, group, nq))
    return s;
  KernelFamily paged;
  paged.splitKv = paged.paged = paged.packGqa = true;
  paged.kvAppend = append == 1;
  return findKernel(bundle, query, nk, false, out, paged, {group, nq});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_paged(const fa_bundle *bundle,
                               const fa_kernel_query *query, int64_t nk,
                               int32_t pack_gqa, const fa_kernel **out) try {
  if (pack_gqa != 0 && pack_gqa != 1)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find_paged: pack_gqa is " +
                    std::to_string(pack_gqa) + "; expected 0 or 1");
  KernelFamily paged;
  paged.splitKv = paged.paged = true;
  paged.packGqa = pack_gqa == 1;
  return findKernel(bundle, query, nk, false, out, paged);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_paged_append(const fa_bundle *bundle,
                                      const fa_kernel_query *query,
                                      int64_t nk, int32_t pack_gqa,
                                      const fa_kernel **out) try {
  if (pack_gqa != 0 && pack_gqa != 1)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find_paged_append: pack_gqa is " +
                    std::to_string(pack_gqa) + "; expected 0 or 1");
  KernelFamily paged;
  paged.splitKv = paged.paged = paged.kvAppend = true;
  paged.packGqa = pack_gqa == 1;
  return findKernel(bundle, query, nk, false, out, paged);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_varlen(const fa_bundle *bundle,
                                const fa_kernel_query *query,
                                int64_t max_seqlen_k,
                                const fa_kernel **out) try {
  KernelFamily varlen;
  varlen.varlen = true;
  return findKernel(bundle, query, max_seqlen_k, false, out, varlen);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_block_sparse(const fa_bundle *bundle,
                                       const fa_kernel_query *query, int64_t nk,
                                       const fa_kernel **out) try {
  KernelFamily blockSparse;
  blockSparse.blockSparse = true;
  return findKernel(bundle, query, nk, false, out, blockSparse);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_find_deterministic(const fa_bundle *bundle,
                                       const fa_kernel_query *query, int64_t nk,
                                       const fa_kernel **out) try {
  return findKernel(bundle, query, nk, true, out);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
