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
  if (dtype == "f16")
    c.dtype = FA_DTYPE_F16;
  else if (dtype == "bf16")
    c.dtype = FA_DTYPE_BF16;
  else
    bad(where, "unknown dtype '" + dtype + "' (expected f16 or bf16)");

  c.headDim = intField(k, "head_dim", where, 1, 1 << 16);
  c.headDimV = k.contains("head_dim_v")
                   ? intField(k, "head_dim_v", where, 1, 1 << 16)
                   : c.headDim;
  c.blockQ = intField(k, "block_q", where, 1, 1 << 16);
  c.blockKV = intField(k, "block_kv", where, 1, 1 << 16);
  c.warps = intField(k, "warps", where, 1, 32);
  c.stages = intField(k, "stages", where, 1, 64);

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

  // A score_mod is compiled into the kernel; this runtime has no way to
  // request one, so such kernels would be picked for plain attention.
  auto mod = k.find("score_mod");
  if (mod != k.end() && !mod->is_null())
    bad(where, "score_mod kernels are not supported by this runtime, got " +
                   mod->dump());

  c.targetName = stringField(k, "target", where);
  if (!parseTarget(c.targetName, c.target))
    bad(where, "malformed target '" + c.targetName + "' (expected sm_XY[a])");

  const json &entries = field(k, "entries", where);
  if (!entries.is_object())
    bad(where, "field 'entries' must be an object");
  if (c.direction == FA_DIRECTION_FWD) {
    c.fwd = parseEntry(entries, "fwd", where);
  } else {
    c.bwdPre = parseEntry(entries, "bwd_pre", where);
    c.bwd = parseEntry(entries, "bwd", where);
    c.bwdPost = parseEntry(entries, "bwd_post", where);
  }
  c.ptxPath = moduleFile(k, "ptx", dir, where, /*required=*/false);
  c.cubinPath = moduleFile(k, "cubin", dir, where, /*required=*/false);
  if (c.ptxPath.empty() && c.cubinPath.empty())
    bad(where, "neither 'ptx' nor 'cubin' is given");
  return kernel;
}

} // namespace

fa_status parseManifest(const std::string &text, const std::string &dir,
                        std::vector<std::unique_ptr<fa_kernel>> &kernels,
                        std::string &error) {
  try {
    json root = json::parse(text);
    if (!root.is_object())
      bad("manifest", "must be a JSON object");
    std::string format = stringField(root, "format", "manifest");
    if (format != "fa-bundle")
      bad("manifest", "format is '" + format + "', expected 'fa-bundle'");
    int version = intField(root, "version", "manifest", 0, INT_MAX);
    if (version != FA_RUNTIME_BUNDLE_VERSION)
      bad("manifest", "version " + std::to_string(version) +
                          " is not supported (this runtime reads version " +
                          std::to_string(FA_RUNTIME_BUNDLE_VERSION) + ")");
    const json &list = field(root, "kernels", "manifest");
    if (!list.is_array())
      bad("manifest", "field 'kernels' must be an array");
    std::set<std::string> tags;
    for (size_t i = 0; i < list.size(); ++i) {
      auto kernel = parseKernel(list[i], i, dir);
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
