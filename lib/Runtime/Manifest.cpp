//===- Manifest.cpp - Parse an fa bundle's manifest.json
//-------------------===//
//
// The manifest format is docs/ABI.md's. Every field is checked here so that a
// malformed bundle fails at load time with the kernel and field named, not at
// launch time.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <climits>
#include <initializer_list>
#include <iterator>
#include <set>

using nlohmann::json;

namespace fa::runtime {

bool parseTarget(const std::string &text, Target &out) {
  if (text.size() < 4 || text.compare(0, 3, "sm_") != 0)
    return false;
  size_t end = text.size();
  bool arch = text.back() == 'a';
  if (arch)
    --end;
  if (end == 3 || end - 3 > 4)
    return false;
  int cc = 0;
  for (size_t i = 3; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])))
      return false;
    cc = cc * 10 + (text[i] - '0');
  }
  out.cc = cc;
  out.archSpecific = arch;
  return true;
}

bool isScoreModName(const std::string &name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_')
      return false;
  return true;
}

namespace {

/// Thrown (and caught in parseManifest) with a message naming the field.
struct ManifestError {
  std::string message;
};

[[noreturn]] void bad(const std::string &where, const std::string &what) {
  throw ManifestError{where + ": " + what};
}

const json &field(const json &obj, const char *key, const std::string &where) {
  auto it = obj.find(key);
  if (it == obj.end())
    bad(where, std::string("missing field '") + key + "'");
  return *it;
}

std::string stringField(const json &obj, const char *key,
                        const std::string &where) {
  const json &v = field(obj, key, where);
  if (!v.is_string())
    bad(where,
        std::string("field '") + key + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

int intField(const json &obj, const char *key, const std::string &where,
             long long lo, long long hi) {
  const json &v = field(obj, key, where);
  if (!v.is_number_integer())
    bad(where,
        std::string("field '") + key + "' must be an integer, got " + v.dump());
  long long x = v.get<long long>();
  if (x < lo || x > hi)
    bad(where, std::string("field '") + key + "' = " + std::to_string(x) +
                   " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return static_cast<int>(x);
}

/// The optional true/false field `key`: false where it is absent (or, with
/// `nullIsAbsent`, null); any other value is refused.
bool flagField(const json &obj, const char *key, const std::string &where,
               bool nullIsAbsent) {
  auto it = obj.find(key);
  if (it == obj.end() || (nullIsAbsent && it->is_null()))
    return false;
  if (!it->is_boolean())
    bad(where, std::string("field '") + key + "' must be true or false, got " +
                   it->dump());
  return it->get<bool>();
}

Entry parseEntry(const json &entries, const char *key,
                 const std::string &where) {
  std::string at = where + ".entries." + key;
  const json &e = field(entries, key, where + ".entries");
  if (!e.is_object())
    bad(at, "must be an object");
  Entry entry;
  entry.name = stringField(e, "name", at);
  if (entry.name.empty())
    bad(at, "empty entry name");
  entry.threads = intField(e, "threads", at, 1, 1024);
  entry.sharedBytes = intField(e, "shared_bytes", at, 0, INT_MAX);
  if (e.contains("grid")) {
    std::string grid = stringField(e, "grid", at);
    if (grid != "blocks" && grid != "persistent")
      bad(at, "unknown grid '" + grid + "' (expected blocks or persistent)");
    entry.persistent = grid == "persistent";
    if (entry.persistent && std::string(key) != "fwd")
      bad(at, "grid 'persistent' is for fwd entries only");
  }
  if (e.contains("launch")) {
    std::string launch = stringField(e, "launch", at);
    if (launch != "plain" && launch != "dependent")
      bad(at, "unknown launch '" + launch + "' (expected plain or dependent)");
    entry.dependent = launch == "dependent";
  }
  return entry;
}

std::string moduleFile(const json &k, const char *key, const std::string &dir,
                       const std::string &where, bool required) {
  auto it = k.find(key);
  if (it == k.end() || it->is_null()) {
    if (required)
      bad(where, std::string("missing field '") + key + "'");
    return "";
  }
  if (!it->is_string() || it->get<std::string>().empty())
    bad(where, std::string("field '") + key + "' must be a file name");
  std::string name = it->get<std::string>();
  // Module files live inside the bundle.
  if (name[0] == '/' || name.find("..") != std::string::npos)
    bad(where, std::string("field '") + key + "' = '" + name +
                   "' must be a path inside the bundle");
  return dir + "/" + name;
}

/// The maps a wgmma forward takes, in parameter order (docs/ABI.md): which
/// tensor, its parameter and the problem sizes of its dims, innermost first.
struct ExpectedMap {
  const char *tensor;
  int param;
  const char *dims[4]; // the 4th null for a 3-D map
  /// A paged kernel's map of a pool [pages, page_size, Hkv, D], in boxes
  /// of kPagedBoxRows keys.
  bool pool = false;
};
constexpr ExpectedMap kWgmmaMaps[] = {
    {"q", 11, {"head_dim", "nq", "batch*heads"}},
    {"k", 12, {"head_dim", "nk", "batch*kv_heads"}},
    {"v", 13, {"head_dim_v", "nk", "batch*kv_heads"}},
};
/// The 4-D maps of a strided wgmma forward (bundle version 7): the batch
/// and head dims apart, so the caller's strides address them.
constexpr ExpectedMap kWgmmaStridedMaps[] = {
    {"q", 11, {"head_dim", "nq", "heads", "batch"}},
    {"k", 12, {"head_dim", "nk", "kv_heads", "batch"}},
    {"v", 13, {"head_dim_v", "nk", "kv_heads", "batch"}},
};
/// The maps of the warp-specialised wgmma backward (384 threads), after
/// fa_bwd's 15 parameters.
constexpr ExpectedMap kWgmmaBackwardMaps[] = {
    {"q", 15, {"head_dim", "nq", "batch*heads"}},
    {"k", 16, {"head_dim", "nk", "batch*kv_heads"}},
    {"v", 17, {"head_dim_v", "nk", "batch*kv_heads"}},
    {"do", 18, {"head_dim_v", "nq", "batch*heads"}},
};
/// The 4-D maps of a strided warp-specialised wgmma backward.
constexpr ExpectedMap kWgmmaBackwardStridedMaps[] = {
    {"q", 15, {"head_dim", "nq", "heads", "batch"}},
    {"k", 16, {"head_dim", "nk", "kv_heads", "batch"}},
    {"v", 17, {"head_dim_v", "nk", "kv_heads", "batch"}},
    {"do", 18, {"head_dim_v", "nq", "heads", "batch"}},
};
/// The maps of a split-KV forward whose producer warp loads K and V by TMA
/// (bundle version 19), after fa_fwd's 11 parameters and the split count.
constexpr ExpectedMap kSplitTmaMaps[] = {
    {"k", 12, {"head_dim", "nk", "kv_heads", "batch"}},
    {"v", 13, {"head_dim_v", "nk", "kv_heads", "batch"}},
};
/// The same over a paged cache's pools (bundle version 20).
constexpr ExpectedMap kPagedTmaMaps[] = {
    {"k", 12, {"head_dim", "page_size", "kv_heads", "num_pages"}, true},
    {"v", 13, {"head_dim_v", "page_size", "kv_heads", "num_pages"}, true},
};
/// Rows of a paged kernel's boxes: 16 keys never straddle a page (the
/// compiler's kPagedTmaBoxRows; page sizes are multiples of 16).
constexpr int kPagedBoxRows = 16;
/// Threads of the warp-specialised wgmma backward's main entry.
constexpr unsigned kWgmmaBackwardWsThreads = 384;

/// Largest box extent TMA accepts in any dimension.
constexpr int kMaxBoxDim = 256;
/// Columns of the wgmma kernels' shared-memory slabs (128 B of 16-bit
/// elements).
constexpr int kSlabColumns = 64;

TensorMapSpec parseTensorMap(const json &m, const ExpectedMap &want,
                             const KernelConfig &c, const std::string &at) {
  if (!m.is_object())
    bad(at, "must be an object");
  TensorMapSpec spec;
  const bool bwd = c.direction == FA_DIRECTION_BWD;
  spec.tensor = stringField(m, "tensor", at);
  if (spec.tensor != "q" && spec.tensor != "k" && spec.tensor != "v" &&
      (!bwd || spec.tensor != "do"))
    bad(at, "unknown tensor '" + spec.tensor + "' (expected q, k" +
                (bwd ? ", v or do)" : " or v)"));
  if (spec.tensor != want.tensor)
    bad(at, "tensor is '" + spec.tensor + "', expected '" + want.tensor +
                (bwd ? "' (the maps are q, k, v, do in parameter order)"
                     : "' (the maps are q, k, v in parameter order)"));
  spec.param = intField(m, "param", at, 0, INT_MAX);
  if (spec.param != want.param)
    bad(at, "field 'param' = " + std::to_string(spec.param) + ", expected " +
                std::to_string(want.param) +
                (bwd        ? " (the q, k, v, do maps follow fa_bwd's 15 "
                              "parameters)"
                 : c.splitKv ? " (the k, v maps follow fa_fwd's 11 parameters "
                               "and the split count)"
                             : " (the q, k, v maps follow fa_fwd's 11 "
                               "parameters)"));

  const json &dims = field(m, "dims", at);
  const int rank = want.dims[3] ? 4 : 3;
  spec.rank = rank;
  std::string wantDims = "[";
  for (int i = 0; i < rank; ++i)
    wantDims += std::string(i ? ",\"" : "\"") + want.dims[i] + "\"";
  wantDims += "]";
  bool dimsOk = dims.is_array() && dims.size() == static_cast<size_t>(rank);
  for (int i = 0; dimsOk && i < rank; ++i)
    dimsOk = dims[i].is_string() && dims[i].get<std::string>() == want.dims[i];
  if (!dimsOk)
    bad(at, "field 'dims' = " + dims.dump() + ", expected " + wantDims);

  const json &box = field(m, "box", at);
  if (!box.is_array() || box.size() != static_cast<size_t>(rank))
    bad(at, "field 'box' must be an array of " + std::to_string(rank) +
                " integers, got " + box.dump());
  for (int i = 0; i < rank; ++i) {
    if (!box[i].is_number_integer() || box[i].get<long long>() < 1 ||
        box[i].get<long long>() > kMaxBoxDim)
      bad(at, "field 'box' = " + box.dump() + ": box[" + std::to_string(i) +
                  "] must be an integer in [1, " + std::to_string(kMaxBoxDim) +
                  "]");
    spec.box[i] = box[i].get<int>();
  }

  spec.swizzleBytes = intField(m, "swizzle", at, 0, INT_MAX);
  if (spec.swizzleBytes != 128)
    bad(at, "field 'swizzle' = " + std::to_string(spec.swizzleBytes) +
                " is not supported (expected 128)");
  // A 128 B swizzle permutes 16 B chunks within 128 B rows, so a box row
  // must be whole chunks and at most one row, whatever the element size.
  int rowBytes = spec.box[0] * static_cast<int>(elementSize(c.dtype));
  if (rowBytes > spec.swizzleBytes || rowBytes % 16 != 0)
    bad(at, "box[0] = " + std::to_string(spec.box[0]) + " elements is " +
                std::to_string(rowBytes) +
                " bytes; a 128-byte swizzle needs a multiple of 16 bytes, at "
                "most 128");
  // v and do have Dv columns; q and do are tiles of query rows.
  const std::string name = want.tensor;
  int cols = name == "v" || name == "do" ? c.headDimV : c.headDim;
  // The kernels' 64-column slabs may end past the head dim (D = 96: a last
  // box half past it, which TMA zero-fills); other boxes must divide it.
  if (cols % spec.box[0] != 0 && spec.box[0] != kSlabColumns)
    bad(at, "box[0] = " + std::to_string(spec.box[0]) +
                " does not divide the head dim " + std::to_string(cols) +
                " (only boxes of " + std::to_string(kSlabColumns) +
                " columns, the kernels' slabs, may end past it)");
  const bool queryRows = name == "q" || name == "do";
  int rows = want.pool ? kPagedBoxRows : queryRows ? c.blockQ : c.blockKV;
  if (spec.box[1] != rows)
    bad(at, "box[1] = " + std::to_string(spec.box[1]) + ", expected " +
                (want.pool   ? "a paged kernel's key group of "
                 : queryRows ? "block_q = "
                             : "block_kv = ") +
                std::to_string(rows));
  spec.pool = want.pool;
  for (int i = 2; i < rank; ++i)
    if (spec.box[i] != 1)
      bad(at, "box[" + std::to_string(i) + "] = " +
                  std::to_string(spec.box[i]) +
                  ", expected 1 (a tile lies in one batch and head)");

  spec.l2PromotionBytes = intField(m, "l2_promotion", at, 0, INT_MAX);
  if (spec.l2PromotionBytes != 0 && spec.l2PromotionBytes != 64 &&
      spec.l2PromotionBytes != 128 && spec.l2PromotionBytes != 256)
    bad(at, "field 'l2_promotion' = " + std::to_string(spec.l2PromotionBytes) +
                " is not one of 0, 64, 128, 256");
  std::string fill = stringField(m, "oob_fill", at);
  if (fill != "zero")
    bad(at, "field 'oob_fill' = '" + fill +
                "' is not supported (expected 'zero': rows past Nq or Nk "
                "must read as zero)");
  return spec;
}

/// The k and v maps of an mma.sync split-KV forward whose producer warp
/// loads them by TMA (sm_90a, 4-D maps over the caller's strides; a paged
/// kernel's over its pools).
void parseSplitTmaMaps(const json &k, const json &maps, KernelConfig &c,
                       const std::string &where) {
  if (!c.splitKv || c.targetName != "sm_90a")
    bad(where, "field 'tensor_maps' is given, but only mma 'wgmma' kernels "
               "and sm_90a split-KV forwards take tensor maps");
  if (!maps.is_array() || maps.size() != std::size(kSplitTmaMaps))
    bad(where, "field 'tensor_maps' of a split-KV forward must be an array "
               "of 2 maps (k, v), got " +
                   maps.dump());
  const ExpectedMap *want =
      flagField(k, "paged", where, /*nullIsAbsent=*/true) ? kPagedTmaMaps
                                                           : kSplitTmaMaps;
  for (size_t i = 0; i < std::size(kSplitTmaMaps); ++i)
    c.tensorMaps.push_back(
        parseTensorMap(maps[i], want[i], c,
                       where + ".tensor_maps[" + std::to_string(i) + "]"));
}

/// The optional "mma" and "tensor_maps" fields, and what a wgmma kernel
/// needs of the rest of its config.
void parseMma(const json &k, KernelConfig &c, const std::string &where) {
  auto mma = k.find("mma");
  if (mma != k.end() && !mma->is_null()) {
    std::string name = stringField(k, "mma", where);
    if (name == "mma_sync")
      c.mma = FA_MMA_SYNC;
    else if (name == "wgmma")
      c.mma = FA_MMA_WGMMA;
    else
      bad(where, "unknown mma '" + name + "' (expected mma_sync or wgmma)");
  }
  auto maps = k.find("tensor_maps");
  bool hasMaps = maps != k.end() && !maps->is_null();
  if (c.mma != FA_MMA_WGMMA) {
    if (hasMaps)
      parseSplitTmaMaps(k, *maps, c, where);
    return;
  }
  if (c.targetName != "sm_90a")
    bad(where, "mma 'wgmma' needs target sm_90a, got '" + c.targetName + "'");
  // The compiler's set (wgmmaHeadDimsSupported), both directions.
  const bool square = c.headDim == c.headDimV;
  const bool dimsOk =
      (square && (c.headDim == 64 || c.headDim == 96 || c.headDim == 128 ||
                  c.headDim == 256)) ||
      (c.headDim == 192 && c.headDimV == 128);
  if (!dimsOk)
    bad(where, "mma 'wgmma' needs (head_dim, head_dim_v) in {(64, 64), (96, "
               "96), (128, 128), (256, 256), (192, 128)}, got " +
                   std::to_string(c.headDim) + " and " +
                   std::to_string(c.headDimV));
  // Above 128 the backward's warpgroups split by role, warp-specialised.
  if (c.direction == FA_DIRECTION_BWD && c.headDim > 128 &&
      c.bwd.threads != kWgmmaBackwardWsThreads)
    bad(where, "mma 'wgmma' backward kernels above head_dim 128 are "
               "warp-specialised (bwd entry of " +
                   std::to_string(kWgmmaBackwardWsThreads) +
                   " threads), this one has " +
                   std::to_string(c.bwd.threads));
  // A wgmma backward of 256 threads keeps the mma.sync backward's
  // parameters (cp.async loads, no maps); the warp-specialised one (384
  // threads) loads q, k, v and do by TMA.
  // A strided forward (field 'stride_param') has 4-D maps.
  const bool strided = k.contains("stride_param");
  const ExpectedMap *want = strided ? kWgmmaStridedMaps : kWgmmaMaps;
  size_t n = std::size(kWgmmaMaps);
  const char *names = "q, k, v";
  if (c.direction == FA_DIRECTION_BWD) {
    bool ws = c.bwd.threads == kWgmmaBackwardWsThreads;
    if (!ws) {
      if (hasMaps)
        bad(where, "field 'tensor_maps' is given, but mma 'wgmma' backward "
                   "kernels take no tensor maps unless warp-specialised "
                   "(bwd entry of 384 threads, this one has " +
                       std::to_string(c.bwd.threads) + ")");
      return;
    }
    want = strided ? kWgmmaBackwardStridedMaps : kWgmmaBackwardMaps;
    n = std::size(kWgmmaBackwardMaps);
    names = "q, k, v, do";
  }
  if (!hasMaps)
    bad(where, c.direction == FA_DIRECTION_BWD
                   ? "missing field 'tensor_maps' (the warp-specialised mma "
                     "'wgmma' backward of 384 threads takes q, k, v and do "
                     "tensor maps)"
                   : "missing field 'tensor_maps' (mma 'wgmma' kernels take "
                     "q, k and v tensor maps)");
  if (!maps->is_array())
    bad(where, "field 'tensor_maps' must be an array");
  if (maps->size() != n)
    bad(where, "field 'tensor_maps' has " + std::to_string(maps->size()) +
                   " maps, expected " + std::to_string(n) + " (" + names + ")");
  for (size_t i = 0; i < n; ++i)
    c.tensorMaps.push_back(
        parseTensorMap((*maps)[i], want[i], c,
                       where + ".tensor_maps[" + std::to_string(i) + "]"));
}

/// The dtype of `allowed` that a manifest names `name` (fa_dtype_name's
/// spelling) into `out`; false when none is.
bool dtypeNamed(const std::string &name, std::initializer_list<fa_dtype> allowed,
                fa_dtype &out) {
  for (fa_dtype d : allowed)
    if (name == fa_dtype_name(d)) {
      out = d;
      return true;
    }
  return false;
}

/// The optional "quantize" of an fp8 forward: the source dtype of the
/// quantiser its module holds (entries quantize_amax and quantize).
void parseQuantizer(const json &k, const json &entries, KernelConfig &c,
                    const std::string &where) {
  if (!k.contains("quantize"))
    return;
  std::string dtype = stringField(k, "quantize", where);
  if (!dtypeNamed(dtype, {FA_DTYPE_F16, FA_DTYPE_BF16, FA_DTYPE_F32},
                  c.quantizeDtype))
    bad(where, "field 'quantize' = '" + dtype +
                   "', expected bf16, f16 or f32 (the quantiser's inputs)");
  c.quantizer = true;
  c.quantAmax = parseEntry(entries, "quantize_amax", where);
  c.quant = parseEntry(entries, "quantize", where);
}

/// "descale_param": the entry's first descale, `expected` (after `before`
/// tensor maps).
void parseDescaleParam(const json &k, KernelConfig &c, const std::string &where,
                       int expected, const char *before) {
  c.descaleParam = intField(k, "descale_param", where, 0, INT_MAX);
  if (c.descaleParam != expected)
    bad(where, "field 'descale_param' = " + std::to_string(c.descaleParam) +
                   ", expected " + std::to_string(expected) + " (after " +
                   before + " tensor maps)");
}

/// An fp8 forward (dtype f8e4m3, bundle version 12): the wgmma d128 or d256
/// forward that the compiler builds, with "descale_param" after its maps,
/// and the optional "descale_block" (bundle version 21): 64 for Q and K
/// descales per 64-row block, absent for per-(batch, key head) ones; and
/// its quantiser (parseQuantizer).
void parseFp8(const json &k, const json &entries, KernelConfig &c,
              const std::string &where) {
  const bool fp8 = c.dtype == FA_DTYPE_F8E4M3;
  if (!fp8) {
    for (const char *key : {"descale_param", "descale_block"})
      if (k.contains(key))
        bad(where, std::string("field '") + key +
                       "' is given, but only f8e4m3 kernels take descale "
                       "tensors");
    if (k.contains("quantize"))
      bad(where, "field 'quantize' is given, but only f8e4m3 kernels hold a "
                 "quantiser");
    return;
  }
  if (c.direction == FA_DIRECTION_BWD) {
    // The fp8 backward (bundle version 22): the warp-specialised wgmma
    // d128 kernel, descale_q, _k, _v, _do after fa_bwd's 15 and its 4 maps.
    if (c.mma != FA_MMA_WGMMA || c.headDim != 128 || c.headDimV != 128 ||
        c.tensorMaps.size() != 4 || c.deterministic || c.blockSparse ||
        c.varlen || c.sinks || !c.modArgs.empty() ||
        k.contains("descale_block") || k.contains("quantize"))
      bad(where, "an f8e4m3 backward needs the warp-specialised mma 'wgmma' "
                 "kernel with head_dim = head_dim_v = 128, per-head "
                 "descales, not deterministic, block-sparse, varlen, with "
                 "sinks or mod_args");
    parseDescaleParam(k, c, where, 19, "fa_bwd's 15 parameters and its 4");
    return;
  }
  if (c.direction != FA_DIRECTION_FWD || c.mma != FA_MMA_WGMMA ||
      (c.headDim != 128 && c.headDim != 256) || c.headDimV != c.headDim ||
      c.fwd.persistent || c.splitKv || c.packGqa || !c.modArgs.empty())
    bad(where, "dtype 'f8e4m3' needs the mma 'wgmma' forward with head_dim "
               "= head_dim_v in {128, 256}, one CTA per tile, no split-KV, "
               "packed GQA or mod_args");
  parseDescaleParam(k, c, where, 14, "fa_fwd's 11 parameters and its 3");
  parseQuantizer(k, entries, c, where);
  if (!k.contains("descale_block"))
    return;
  c.descaleBlock = intField(k, "descale_block", where, 0, INT_MAX);
  if (c.descaleBlock != 64)
    bad(where, "field 'descale_block' = " + std::to_string(c.descaleBlock) +
                   ", expected 64 (Q and K descales per 64-row block; omit "
                   "the field for per-(batch, key head) descales)");
}

/// The optional "stride_param" (bundle version 7): the index of the first
/// stride parameter of fa_fwd or fa_bwd, after every other parameter of
/// that entry (docs/ABI.md); a backward's bwd_pre and bwd_post then take
/// strides too, at fixed indices.
void parseStrides(const json &k, KernelConfig &c, const std::string &where) {
  if (!k.contains("stride_param"))
    return;
  c.strideParam = intField(k, "stride_param", where, 0, INT_MAX);
  const bool bwd = c.direction == FA_DIRECTION_BWD;
  // fa_fwd's 11, a split's count, the maps, a persistent grid's counter;
  // fa_bwd's 15, the maps, a deterministic kernel's semaphores.
  int maps = static_cast<int>(c.tensorMaps.size());
  const bool fp8 = c.dtype == FA_DTYPE_F8E4M3;
  int expect = bwd ? 15 + maps + (c.deterministic ? 1 : 0) + (fp8 ? 4 : 0)
                   : 11 + (c.splitKv ? 1 : 0) + maps +
                         (c.fwd.persistent ? 1 : 0) + (fp8 ? 3 : 0); // descales
  if (c.strideParam != expect)
    bad(where, "field 'stride_param' = " + std::to_string(c.strideParam) +
                   ", expected " + std::to_string(expect) +
                   (bwd ? " (the strides follow every other parameter of "
                          "fa_bwd)"
                        : " (the strides follow every other parameter of "
                          "fa_fwd)"));
}

/// The parameter after every other one of fa_fwd / fa_bwd, where the
/// mod_args start (docs/ABI.md): after a forward's strides (3 of each of
/// q, k, v and, unless split, o) and a varlen one's cu_seqlens, or the maps,
/// split count and counter of an
/// unstrided one; after a backward's maps and semaphores.
/// A paged forward's page_table, seqused_k, max_pages, page_size and
/// num_pages (docs/ABI.md "Paged KV cache").
constexpr int kPagedParams = 5;

int firstModArgParam(const KernelConfig &c) {
  int maps = static_cast<int>(c.tensorMaps.size());
  const bool bwd = c.direction == FA_DIRECTION_BWD;
  if (c.strided())
    return c.strideParam + 3 * (bwd ? 6 : c.splitKv ? 3 : 4) +
           (c.varlen ? 2 : 0) + (c.blockSparse ? 2 : 0) +
           (c.paged ? kPagedParams : 0);
  if (bwd)
    return 15 + maps + (c.deterministic ? 1 : 0);
  return 11 + (c.splitKv ? 1 : 0) + maps + (c.fwd.persistent ? 1 : 0);
}

/// The parameter after fa_fwd's / fa_bwd's mod_args (a forward's sinks,
/// then the run-time window sizes).
int afterModArgs(const KernelConfig &c) {
  int param = firstModArgParam(c);
  for (const ModArgSpec &m : c.modArgs)
    param += 1 + m.rank;
  return param;
}

/// One extent of a mod_arg: a positive integer (a fixed size) or the name
/// of a problem size ("heads", "nq+nk-1", "any").
void parseExtent(const json &v, ModArgSpec &m, int d,
                 const std::string &where) {
  if (v.is_number_integer() && v.get<long long>() >= 1 &&
      v.get<long long>() <= INT32_MAX) {
    m.extent[d] = FA_EXTENT_FIXED;
    m.size[d] = v.get<long long>();
    return;
  }
  for (fa_extent e : {FA_EXTENT_ANY, FA_EXTENT_BATCH, FA_EXTENT_HEADS,
                      FA_EXTENT_KV_HEADS, FA_EXTENT_NQ, FA_EXTENT_NK,
                      FA_EXTENT_NQ_NK})
    if (v.is_string() && v.get<std::string>() == extentName(e)) {
      m.extent[d] = e;
      return;
    }
  bad(where, "dims[" + std::to_string(d) + "] must be a size in [1, 2^31-1] "
             "or one of any, batch, heads, kv_heads, nq, nk, nq+nk-1, got " +
                 v.dump());
}

/// One entry of "mod_args": {"dtype", "rank", optional "dims"}.
ModArgSpec parseModArg(const json &a, const std::string &where) {
  if (!a.is_object())
    bad(where, "must be an object, got " + a.dump());
  ModArgSpec m;
  std::string dtype = stringField(a, "dtype", where);
  if (!dtypeNamed(dtype,
                  {FA_DTYPE_F16, FA_DTYPE_BF16, FA_DTYPE_F32, FA_DTYPE_I32,
                   FA_DTYPE_I64},
                  m.dtype))
    bad(where, "unknown dtype '" + dtype +
                   "' (expected f16, bf16, f32, i32 or i64)");
  m.rank = intField(a, "rank", where, 1, FA_MAX_RANK);
  auto dims = a.find("dims");
  if (dims == a.end())
    return m; // every extent free (FA_EXTENT_ANY)
  if (!dims->is_array() || dims->size() != static_cast<size_t>(m.rank))
    bad(where, "field 'dims' must be an array of " + std::to_string(m.rank) +
                   " extents (its rank), got " + dims->dump());
  for (int d = 0; d < m.rank; ++d)
    parseExtent((*dims)[d], m, d, where);
  return m;
}

/// The optional "mod_args" (bundle version 8) and "mod_arg_param": the
/// tensors the score_mod reads, passed after every other parameter of the
/// entry that evaluates scores (a split-KV kernel's merge takes none).
void parseModArgs(const json &k, KernelConfig &c, const std::string &where) {
  auto args = k.find("mod_args");
  if (args == k.end() || (args->is_array() && args->empty()))
    return;
  if (!args->is_array())
    bad(where, "field 'mod_args' must be an array, got " + args->dump());
  if (args->size() > FA_MAX_MOD_ARGS)
    bad(where, "field 'mod_args' lists " + std::to_string(args->size()) +
                   " tensors; at most " + std::to_string(FA_MAX_MOD_ARGS));
  if (c.scoreMod.empty() && c.maskMod.empty())
    bad(where, "field 'mod_args' is given, but the kernel has no score_mod "
               "or mask_mod to read them");
  for (size_t i = 0; i < args->size(); ++i)
    c.modArgs.push_back(parseModArg(
        (*args)[i], where + ".mod_args[" + std::to_string(i) + "]"));
  c.modArgParam = intField(k, "mod_arg_param", where, 0, INT_MAX);
  int expect = firstModArgParam(c);
  if (c.modArgParam != expect)
    bad(where, "field 'mod_arg_param' = " + std::to_string(c.modArgParam) +
                   ", expected " + std::to_string(expect) +
                   " (the mod_args follow every other parameter of the " +
                   (c.direction == FA_DIRECTION_FWD ? "fwd" : "bwd") +
                   " entry)");
}

/// The optional "split_kv" field of a forward: a split-KV kernel has the
/// entry "merge" beside "fwd", and only the mma.sync forwards have one.
void parseSplitKv(const json &k, const json &entries, KernelConfig &c,
                  const std::string &where) {
  c.splitKv = flagField(k, "split_kv", where, /*nullIsAbsent=*/false);
  if (!c.splitKv)
    return;
  if (c.fwd.persistent)
    bad(where + ".entries.fwd", "a split-KV kernel has no persistent grid");
  c.merge = parseEntry(entries, "merge", where);
  // fa_kv_append beside the decode: an additive entry that a runtime
  // without it ignores (the forward launches as before), so no version.
  c.kvAppend = entries.contains("kv_append");
  if (c.kvAppend)
    c.append = parseEntry(entries, "kv_append", where);
}

/// The optional "block_sparse" field (bundle version 11): a wgmma forward
/// with a mask_mod whose fwd entry takes a block mask and its head count
/// right after its strides, and the two entries that build the mask.
void parseBlockSparse(const json &k, const json &entries, KernelConfig &c,
                      const std::string &where) {
  c.blockSparse = flagField(k, "block_sparse", where, /*nullIsAbsent=*/false);
  if (!c.blockSparse)
    return;
  const bool bwd = c.direction == FA_DIRECTION_BWD;
  if (c.mma != FA_MMA_WGMMA || c.maskMod.empty() || c.splitKv || c.packGqa ||
      !c.strided() || (bwd && c.deterministic))
    bad(where, "field 'block_sparse' is true, but only strided wgmma "
               "forwards with a mask_mod, and strided non-deterministic wgmma "
               "backwards with a mask_mod, are block-sparse");
  c.blockMask = parseEntry(entries, "block_mask", where);
  c.blockLists = parseEntry(entries, "block_lists", where);
  if (entries.contains("block_order")) // bundle version 23
    c.blockOrder = parseEntry(entries, "block_order", where);
  c.blockMaskParam = intField(k, "block_mask_param", where, 0, INT_MAX);
  int expect = c.strideParam + 3 * (bwd ? 6 : 4);
  if (c.blockMaskParam != expect)
    bad(where, "field 'block_mask_param' = " +
                   std::to_string(c.blockMaskParam) + ", expected " +
                   std::to_string(expect) + " (after the strides of " +
                   (bwd ? "bwd" : "fwd") + ")");
}

/// The optional "pack_gqa" field: only mma.sync forwards pack GQA heads.
void parsePackGqa(const json &k, KernelConfig &c, const std::string &where) {
  c.packGqa = flagField(k, "pack_gqa", where, /*nullIsAbsent=*/false);
  if (c.packGqa && (c.direction != FA_DIRECTION_FWD || c.mma != FA_MMA_SYNC))
    bad(where, "field 'pack_gqa' is true, but only mma.sync forwards pack "
               "GQA heads");
  if (c.packGqa && c.fwd.persistent)
    bad(where + ".entries.fwd", "a packed-GQA kernel has no persistent grid");
}

/// The optional "varlen" and "cu_seqlens_param" fields (bundle version 10):
/// a wgmma forward or a backward over packed sequences, which takes the
/// strides of its packed tensors and then cu_seqlens_q, cu_seqlens_k
/// (docs/ABI.md).
void parseVarlen(const json &k, KernelConfig &c, const std::string &where) {
  c.varlen = flagField(k, "varlen", where, /*nullIsAbsent=*/false);
  if (!c.varlen)
    return;
  bool forward = c.direction == FA_DIRECTION_FWD;
  // The wgmma backward's rows come from TMA boxes: its warp-specialised
  // (12-warp) kernel only.
  bool backwardOk = c.mma == FA_MMA_SYNC || c.warps == 12;
  if ((forward ? c.mma != FA_MMA_WGMMA : !backwardOk) || c.splitKv ||
      c.packGqa || c.fwd.persistent || c.deterministic || c.blockSparse ||
      !c.strided())
    bad(where, "field 'varlen' is true, but only strided wgmma forwards on "
               "a grid of query tiles (no split-KV, packed GQA or persistent "
               "grid) and strided, non-deterministic mma.sync or "
               "warp-specialised wgmma backwards run varlen batches");
  if (!c.modArgs.empty() || !c.scoreMod.empty() || !c.maskMod.empty())
    bad(where, "field 'varlen' is true, but varlen kernels have no score_mod, "
               "mask_mod or mod_args");
  c.cuSeqlensParam = intField(k, "cu_seqlens_param", where, 0, INT_MAX);
  // After the three strides of q, k, v and o (forward) or of q, k, v, do,
  // dk and dv (backward).
  int expect = c.strideParam + 3 * (forward ? 4 : 6);
  if (c.cuSeqlensParam != expect)
    bad(where, "field 'cu_seqlens_param' = " +
                   std::to_string(c.cuSeqlensParam) + ", expected " +
                   std::to_string(expect) + " (cu_seqlens_q and cu_seqlens_k "
                   "follow the strides of " +
                   (forward ? "q, k, v and o)" : "q, k, v, do, dk and dv)"));
}

/// The optional "paged" and "page_table_param" fields (bundle version 14): a
/// strided mma.sync split forward over a paged KV cache, which takes the
/// page table, seqused_k, max_pages, page_size and num_pages after the
/// strides of q, k and v.
void parsePaged(const json &k, KernelConfig &c, const std::string &where) {
  c.paged = flagField(k, "paged", where, /*nullIsAbsent=*/true);
  if (!c.paged)
    return;
  if (c.direction != FA_DIRECTION_FWD || !c.splitKv || !c.strided())
    bad(where, "field 'paged' is true, but only strided split-KV forwards "
               "read a paged KV cache");
  c.pageTableParam = intField(k, "page_table_param", where, 0, INT_MAX);
  int expect = c.strideParam + 3 * 3;
  if (c.pageTableParam != expect)
    bad(where, "field 'page_table_param' = " +
                   std::to_string(c.pageTableParam) + ", expected " +
                   std::to_string(expect) +
                   " (the page table follows the strides of q, k and v)");
}

/// The optional "sinks" (bundle version 13): attention sinks. fa_fwd takes
/// them (f32 [H]) at "sinks_param", after every other parameter, the
/// mod_args included; a backward has the entry "bwd_sink" (d_sinks from LSE
/// and Delta) beside its three (docs/ABI.md "Attention sinks").
void parseSinks(const json &k, const json &entries, KernelConfig &c,
                const std::string &where) {
  c.sinks = flagField(k, "sinks", where, /*nullIsAbsent=*/true);
  if (!c.sinks)
    return;
  if (c.blockSparse || c.dtype == FA_DTYPE_F8E4M3 || (c.packGqa && !c.splitKv))
    bad(where, "field 'sinks' is true, but block-sparse, fp8 and unsplit "
               "packed-GQA kernels have no sinks");
  if (c.direction == FA_DIRECTION_BWD) {
    if (k.contains("sinks_param"))
      bad(where, "field 'sinks_param' is for forward kernels (a backward "
                 "passes its sinks to the bwd_sink entry)");
    c.bwdSink = parseEntry(entries, "bwd_sink", where);
    return;
  }
  c.sinksParam = intField(k, "sinks_param", where, 0, INT_MAX);
  if (c.splitKv) {
    // The merge takes them (bundle version 16), after o's strides.
    int mergeExpect = kMergeStrideParam + (c.strided() ? 3 : 0);
    if (c.sinksParam != mergeExpect)
      bad(where, "field 'sinks_param' = " + std::to_string(c.sinksParam) +
                     ", expected " + std::to_string(mergeExpect) +
                     " (a split-KV kernel's merge takes the sinks after its "
                     "8 parameters and o's strides)");
    return;
  }
  int expect = afterModArgs(c);
  if (c.sinksParam != expect)
    bad(where, "field 'sinks_param' = " + std::to_string(c.sinksParam) +
                   ", expected " + std::to_string(expect) +
                   " (the sinks follow every other parameter of fa_fwd, the "
                   "mod_args included)");
}

/// The optional "window_runtime" and "window_param" (bundle version 17): a
/// window kernel whose sizes are fa_fwd's (fa_bwd's) last two parameters,
/// i32 left and right, after every other one (the mod_args, a forward's
/// sinks).
void parseRuntimeWindow(const json &k, KernelConfig &c,
                        const std::string &where) {
  c.windowRuntime = flagField(k, "window_runtime", where, /*nullIsAbsent=*/true);
  if (!c.windowRuntime)
    return;
  if (c.mask != FA_MASK_WINDOW || c.blockSparse)
    bad(where, "field 'window_runtime' is true, but only window kernels "
               "without a block mask take their sizes at run time");
  if (c.windowLeft != -1 || c.windowRight != -1)
    bad(where, "fields 'window_left' and 'window_right' must be -1 for a "
               "run-time window kernel (its sizes come with each call)");
  int expect = afterModArgs(c) +
               (c.sinks && c.direction == FA_DIRECTION_FWD && !c.splitKv ? 1
                                                                          : 0);
  c.windowParam = intField(k, "window_param", where, 0, INT_MAX);
  if (c.windowParam != expect)
    bad(where, "field 'window_param' = " + std::to_string(c.windowParam) +
                   ", expected " + std::to_string(expect) +
                   " (the window sizes are the last two parameters)");
}

/// The optional "deterministic" and "semaphore_param" fields: only the
/// warp-specialised wgmma backward has a deterministic variant, and it takes
/// its semaphore workspace right after its tensor maps.
void parseDeterministic(const json &k, KernelConfig &c,
                        const std::string &where) {
  c.deterministic = flagField(k, "deterministic", where, /*nullIsAbsent=*/true);
  bool hasParam = k.contains("semaphore_param");
  if (!c.deterministic) {
    if (hasParam)
      bad(where, "field 'semaphore_param' is given, but the kernel is not "
                 "deterministic");
    return;
  }
  if (c.direction != FA_DIRECTION_BWD || c.mma != FA_MMA_WGMMA ||
      c.bwd.threads != kWgmmaBackwardWsThreads)
    bad(where, "field 'deterministic' is true, but only the warp-specialised "
               "mma 'wgmma' backward (bwd entry of 384 threads) has a "
               "deterministic variant");
  int want = 15 + static_cast<int>(c.tensorMaps.size());
  if (!hasParam)
    bad(where, "missing field 'semaphore_param' (a deterministic backward "
               "takes its semaphore workspace at parameter " +
                   std::to_string(want) + ")");
  c.semaphoreParam = intField(k, "semaphore_param", where, 0, INT_MAX);
  if (c.semaphoreParam != want)
    bad(where, "field 'semaphore_param' = " +
                   std::to_string(c.semaphoreParam) + ", expected " +
                   std::to_string(want) +
                   " (the semaphores follow fa_bwd's 15 parameters and its " +
                   std::to_string(c.tensorMaps.size()) + " tensor maps)");
}

std::unique_ptr<fa_kernel> parseKernel(const json &k, size_t index,
                                       const std::string &dir) {
  std::string where = "kernels[" + std::to_string(index) + "]";
  if (!k.is_object())
    bad(where, "must be an object");
  auto kernel = std::make_unique<fa_kernel>();
  KernelConfig &c = kernel->config;
  c.tag = stringField(k, "tag", where);
  where += " ('" + c.tag + "')";

  std::string dir2 = stringField(k, "direction", where);
  if (dir2 == "fwd")
    c.direction = FA_DIRECTION_FWD;
  else if (dir2 == "bwd")
    c.direction = FA_DIRECTION_BWD;
  else
    bad(where, "unknown direction '" + dir2 + "' (expected fwd or bwd)");

  std::string dtype = stringField(k, "dtype", where);
  if (!dtypeNamed(dtype,
                  {FA_DTYPE_F16, FA_DTYPE_BF16, FA_DTYPE_F32, FA_DTYPE_F8E4M3},
                  c.dtype))
    bad(where,
        "unknown dtype '" + dtype + "' (expected f16, bf16, f32 or f8e4m3)");
  // Runtimes before f32 kernels refuse their dtype, so "tf32" (on f32
  // kernels only) needs no newer bundle version either.
  c.tf32 = flagField(k, "tf32", where, /*nullIsAbsent=*/true);
  if (c.tf32 && c.dtype != FA_DTYPE_F32)
    bad(where, "field 'tf32' is true, but dtype is '" + dtype +
                   "'; only f32 kernels multiply in TF32");

  c.headDim = intField(k, "head_dim", where, 1, 1 << 16);
  c.headDimV = k.contains("head_dim_v")
                   ? intField(k, "head_dim_v", where, 1, 1 << 16)
                   : c.headDim;
  c.blockQ = intField(k, "block_q", where, 1, 1 << 16);
  c.blockKV = intField(k, "block_kv", where, 1, 1 << 16);
  c.warps = intField(k, "warps", where, 1, 32);
  c.stages = intField(k, "stages", where, 1, 64);
  if (k.contains("registers"))
    c.registers = intField(k, "registers", where, 1, 255);
  c.dsplit = k.contains("dsplit") ? intField(k, "dsplit", where, 1, 64) : 1;
  if (c.dsplit > 1 && c.direction != FA_DIRECTION_BWD)
    bad(where, "field 'dsplit' = " + std::to_string(c.dsplit) +
                   " is for backward kernels only (expected 1)");
  if (c.headDim % c.dsplit || c.headDimV % c.dsplit)
    bad(where, "field 'dsplit' = " + std::to_string(c.dsplit) +
                   " must divide head_dim " + std::to_string(c.headDim) +
                   " and head_dim_v " + std::to_string(c.headDimV));

  std::string mask = stringField(k, "mask", where);
  if (mask == "none")
    c.mask = FA_MASK_NONE;
  else if (mask == "causal")
    c.mask = FA_MASK_CAUSAL;
  else if (mask == "causal_bottom_right")
    c.mask = FA_MASK_CAUSAL_BOTTOM_RIGHT;
  else if (mask == "window")
    c.mask = FA_MASK_WINDOW;
  else
    bad(where, "unknown mask '" + mask +
                   "' (expected none, causal, causal_bottom_right, window)");
  c.windowLeft = k.contains("window_left")
                     ? intField(k, "window_left", where, -1, INT_MAX)
                     : -1;
  c.windowRight = k.contains("window_right")
                      ? intField(k, "window_right", where, -1, INT_MAX)
                      : -1;

  // A score_mod is compiled into the kernel under its name; queries name
  // it (fa_kernel_query.score_mod) and only kernels of that name match.
  // Runtimes that predate score_mod kernels reject a non-null score_mod, so
  // these kernels need no newer bundle version.
  auto mod = k.find("score_mod");
  if (mod != k.end() && !mod->is_null()) {
    if (!mod->is_string() || !isScoreModName(mod->get<std::string>()))
      bad(where, "field 'score_mod' must be null or a name of identifier "
                 "characters ([A-Za-z_][A-Za-z0-9_]*), got " +
                     mod->dump());
    c.scoreMod = mod->get<std::string>();
  }
  // A mask_mod (bundle version 9) is compiled into the kernel under its
  // name; only queries naming it (fa_kernel_query.mask_mod) match.
  if (auto maskMod = k.find("mask_mod");
      maskMod != k.end() && !maskMod->is_null()) {
    if (!maskMod->is_string() || !isScoreModName(maskMod->get<std::string>()))
      bad(where, "field 'mask_mod' must be null or a name of identifier "
                 "characters ([A-Za-z_][A-Za-z0-9_]*), got " +
                     maskMod->dump());
    c.maskMod = maskMod->get<std::string>();
  }

  c.targetName = stringField(k, "target", where);
  if (!parseTarget(c.targetName, c.target))
    bad(where, "malformed target '" + c.targetName + "' (expected sm_XY[a])");

  const json &entries = field(k, "entries", where);
  if (!entries.is_object())
    bad(where, "field 'entries' must be an object");
  if (c.direction == FA_DIRECTION_FWD) {
    c.fwd = parseEntry(entries, "fwd", where);
    parseSplitKv(k, entries, c, where);
  } else {
    c.bwdPre = parseEntry(entries, "bwd_pre", where);
    c.bwd = parseEntry(entries, "bwd", where);
    c.bwdPost = parseEntry(entries, "bwd_post", where);
  }
  parseMma(k, c, where);
  if (c.splitKv && c.mma != FA_MMA_SYNC)
    bad(where, "field 'split_kv' is true, but only mma.sync forwards have "
               "split-KV kernels");
  parsePackGqa(k, c, where);
  parseDeterministic(k, c, where);
  parseStrides(k, c, where);
  parseBlockSparse(k, entries, c, where);
  parsePaged(k, c, where);
  parseModArgs(k, c, where);
  parseVarlen(k, c, where);
  parseFp8(k, entries, c, where);
  parseSinks(k, entries, c, where);
  parseRuntimeWindow(k, c, where);
  if (c.fwd.persistent && c.tensorMaps.empty())
    bad(where + ".entries.fwd", "grid 'persistent' needs an mma 'wgmma' "
                                "kernel (its tile counter follows the tensor "
                                "maps)");
  c.ptxPath = moduleFile(k, "ptx", dir, where, /*required=*/false);
  c.cubinPath = moduleFile(k, "cubin", dir, where, /*required=*/false);
  if (c.ptxPath.empty() && c.cubinPath.empty())
    bad(where, "neither 'ptx' nor 'cubin' is given");
  return kernel;
}

/// Manifests nest a few levels; deeper JSON is rejected while parsing, which
/// bounds the recursion of DocumentOwner's teardown.
constexpr int kMaxJsonDepth = 16;

/// A parsed document, emptied bottom-up when it goes: nlohmann's own
/// teardown moves children to a heap-allocated stack inside a noexcept
/// destructor, where running out of memory would terminate the caller.
struct DocumentOwner {
  json root;
  ~DocumentOwner() { release(root); }
  static void release(json &v) noexcept {
    if (v.is_array()) {
      for (json &child : v)
        release(child);
      v.get_ref<json::array_t &>().clear();
    } else if (v.is_object()) {
      for (auto &member : v.get_ref<json::object_t &>())
        release(member.second);
      v.get_ref<json::object_t &>().clear();
    }
  }
};

} // namespace

fa_status parseManifest(const std::string &text, const std::string &dir,
                        std::vector<std::unique_ptr<fa_kernel>> &kernels,
                        std::string &error) {
  try {
    DocumentOwner document;
    document.root =
        json::parse(text, [](int depth, json::parse_event_t, json &) {
          if (depth > kMaxJsonDepth)
            bad("manifest", "nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
          return true;
        });
    const json &root = document.root;
    if (!root.is_object())
      bad("manifest", "must be a JSON object");
    std::string format = stringField(root, "format", "manifest");
    if (format != "fa-bundle")
      bad("manifest", "format is '" + format + "', expected 'fa-bundle'");
    int version = intField(root, "version", "manifest", 0, INT_MAX);
    if (version < 1 || version > FA_RUNTIME_BUNDLE_VERSION)
      bad("manifest", "version " + std::to_string(version) +
                          " is not supported (this runtime reads versions 1 "
                          "to " +
                          std::to_string(FA_RUNTIME_BUNDLE_VERSION) + ")");
    const json &list = field(root, "kernels", "manifest");
    if (!list.is_array())
      bad("manifest", "field 'kernels' must be an array");
    std::set<std::string> tags;
    for (size_t i = 0; i < list.size(); ++i) {
      auto kernel = parseKernel(list[i], i, dir);
      // A version-1 reader would run these with the wrong grid or body.
      const KernelConfig &c = kernel->config;
      if (version < 2 && c.dsplit != 1)
        bad("kernels[" + std::to_string(i) + "]",
            "field 'dsplit' = " + std::to_string(c.dsplit) +
                " needs bundle version 2, the manifest says 1");
      if (version < 2 && c.direction == FA_DIRECTION_BWD &&
          c.mma == FA_MMA_WGMMA)
        bad("kernels[" + std::to_string(i) + "]",
            "mma 'wgmma' backward kernels need bundle version 2, the "
            "manifest says 1");
      // `what` needs a bundle of at least version `since`: an older reader
      // would ignore the field that says so and launch it wrongly.
      auto needs = [&](int since, bool uses, const std::string &what) {
        if (version < since && uses)
          bad("kernels[" + std::to_string(i) + "]",
              what + " need bundle version " + std::to_string(since) +
                  ", the manifest says " + std::to_string(version));
      };
      // Without "deterministic": no semaphore parameter.
      needs(3, c.deterministic, "deterministic kernels");
      // Without "grid": one CTA per tile and no tile counter.
      needs(4, c.fwd.persistent, "persistent-grid kernels");
      // Before version 5 kernels took their tensor maps as pointers to
      // device memory the runtime owned; this runtime passes them by value.
      if (version < 5 && !c.tensorMaps.empty())
        bad("kernels[" + std::to_string(i) + "]",
            "kernels with tensor maps take them by value since bundle "
            "version 5; this manifest says " +
                std::to_string(version) +
                " (maps in device memory, which this runtime no longer "
                "supports): rebuild the bundle with this release's fa-aot");
      // Without "split_kv": the split forward launched as a plain one.
      needs(6, c.splitKv, "split-KV kernels");
      // Without "pack_gqa": one CTA per query head instead of per key head;
      // without "stride_param": the kernel launched without its strides.
      needs(7, c.packGqa, "packed-GQA kernels");
      needs(7, c.strided(), "strided kernels (field 'stride_param')");
      // Without "mask_mod": served to queries without the mask.
      needs(9, !c.maskMod.empty(), "mask_mod kernels");
      // Without "varlen": launched as a dense forward without cu_seqlens.
      needs(10, c.varlen, "varlen kernels");
      // Without "sinks": fa_fwd launched without its last parameter, and
      // the backward without bwd_sink.
      needs(13, c.sinks, "kernels with sinks");
      // Without "paged": launched as a dense split forward without its
      // page table.
      needs(14, c.paged, "paged-KV kernels");
      // Without split sinks: the merge launched without its last parameter.
      needs(15, c.sinks && c.splitKv, "split-KV kernels with sinks");
      // Older runtimes refuse "mod_args"; the version says so too.
      needs(8, !c.modArgs.empty(), "kernels with mod_args");
      // Without "block_sparse": launched without the block mask.
      needs(11, c.blockSparse, "block-sparse kernels");
      // Without "block_sparse" on a backward: launched without its mask.
      needs(15, c.blockSparse && c.direction == FA_DIRECTION_BWD,
            "block-sparse backwards");
      // Without varlen sinks: refused by older runtimes ("sinks" on a
      // varlen kernel); the varlen bwd_sink takes cu_seqlens_q.
      needs(18, c.sinks && c.varlen, "varlen kernels with sinks");
      // Tensor maps on a split-KV kernel: refused by older runtimes.
      needs(19, c.splitKv && !c.tensorMaps.empty(),
            "split-KV kernels with tensor maps");
      // Pool maps on a paged kernel: refused by older runtimes.
      needs(20, c.paged && !c.tensorMaps.empty(),
            "paged kernels with tensor maps");
      // Without "window_runtime": launched without its window sizes.
      needs(17, c.windowRuntime, "run-time window kernels");
      // Older runtimes refuse dtype f8e4m3; the version says so too.
      needs(12, c.dtype == FA_DTYPE_F8E4M3, "f8e4m3 kernels");
      // Without "descale_block": per-head descales checked against the
      // kernel's [B,H,ceil(Nq/64)] and [B,Hkv,ceil(Nk/64)] reads.
      needs(21, c.descaleBlock != 0, "block-scaled fp8 kernels");
      needs(22, c.dtype == FA_DTYPE_F8E4M3 && c.direction == FA_DIRECTION_BWD,
            "fp8 backwards");
      // Without "block_order": a mask sized and built without the grid
      // order the kernel reads.
      needs(23, !c.blockOrder.name.empty(), "kernels with a block order");
      // From version 23 every block-sparse kernel reads the order.
      if (version >= 23 && c.blockSparse && c.blockOrder.name.empty())
        bad("kernels[" + std::to_string(i) + "]",
            "block-sparse kernels of bundle version 23 or later have the "
            "entry 'block_order'");
      if (!tags.insert(kernel->config.tag).second)
        bad("kernels[" + std::to_string(i) + "]",
            "duplicate tag '" + kernel->config.tag + "'");
      kernels.push_back(std::move(kernel));
    }
  } catch (const ManifestError &e) {
    error = e.message;
    return FA_ERROR_BAD_MANIFEST;
  } catch (const json::exception &e) {
    error = std::string("invalid JSON: ") + e.what();
    return FA_ERROR_BAD_MANIFEST;
  }
  return FA_SUCCESS;
}

} // namespace fa::runtime
