//===- RuntimeTest.cpp - GPU-free tests of libfa_runtime
//-------------------===//
//
// Manifest parsing, kernel selection and argument validation through the
// public C API, with fake device addresses: nothing here calls the driver.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace fa_test;

namespace {

/// A kernel object of the manifest, with fields overridable by `extra`
/// (JSON members appended after the defaults; later keys win in nlohmann).
std::string kernelJson(const std::string &tag, const std::string &direction,
                       const std::string &dtype, int d, const std::string &mask,
                       const std::string &target, bool cubin,
                       const std::string &extra = "") {
  std::string entries =
      direction == "fwd"
          ? R"({"fwd": {"name": "fa_fwd_)" + tag +
                R"(", "threads": 128, "shared_bytes": 49152}})"
          : R"({"bwd_pre": {"name": "a", "threads": 128, "shared_bytes": 0},
               "bwd": {"name": "b", "threads": 256, "shared_bytes": 65536},
               "bwd_post": {"name": "c", "threads": 128, "shared_bytes": 0}})";
  std::string s =
      R"({"tag": ")" + tag + R"(", "direction": ")" + direction +
      R"(", "dtype": ")" + dtype + R"(", "head_dim": )" + std::to_string(d) +
      R"(, "head_dim_v": )" + std::to_string(d) +
      R"(, "block_q": 64, "block_kv": 64, "warps": 4, "stages": 2,
      "mask": ")" +
      mask + R"(", "window_left": )" + (mask == "window" ? "16" : "-1") +
      R"(, "window_right": )" + (mask == "window" ? "0" : "-1") +
      R"(, "score_mod": null, "target": ")" + target + R"(", "entries": )" +
      entries + R"(, "ptx": ")" + tag + R"(.ptx")";
  if (cubin)
    s += R"(, "cubin": ")" + tag + R"(.cubin")";
  return s + extra + "}";
}

std::string manifest(const std::vector<std::string> &kernels,
                     const std::string &version = "5") {
  return manifestOf(kernels, version);
}

/// One entry of a wgmma kernel's "tensor_maps", as text fields.
struct MapJson {
  std::string tensor, param, dims, box, swizzle = "128", l2 = "256",
                                        fill = R"("zero")";
  std::string str() const {
    return R"({"tensor": ")" + tensor + R"(", "param": )" + param +
           R"(, "dims": )" + dims + R"(, "box": )" + box + R"(, "swizzle": )" +
           swizzle + R"(, "l2_promotion": )" + l2 + R"(, "oob_fill": )" + fill +
           "}";
  }
};

/// The maps of docs/ABI.md for block_q = block_kv = 128.
std::vector<MapJson> abiMaps() {
  return {
      {"q", "11", R"(["head_dim", "nq", "batch*heads"])", "[64, 128, 1]"},
      {"k", "12", R"(["head_dim", "nk", "batch*kv_heads"])", "[64, 128, 1]"},
      {"v", "13", R"(["head_dim_v", "nk", "batch*kv_heads"])", "[64, 128, 1]"}};
}

std::string mapsJson(const std::vector<MapJson> &maps) {
  std::string list;
  for (const MapJson &m : maps)
    list += (list.empty() ? "" : ", ") + m.str();
  return "[" + list + "]";
}

/// A wgmma forward kernel object as fa-aot writes it (sm_90a, 12 warps,
/// 128 x 128 tiles), with `extra` members appended.
std::string wgmmaJson(const std::string &tag, const std::string &dtype, int d,
                      const std::string &mask, bool cubin,
                      const std::vector<MapJson> &maps = abiMaps(),
                      const std::string &extra = "") {
  return kernelJson(tag, "fwd", dtype, d, mask, "sm_90a", cubin,
                    R"(, "block_q": 128, "block_kv": 128, "warps": 12,
                       "entries": {"fwd": {"name": "fa_fwd_)" +
                        tag +
                        R"(", "threads": 384, "shared_bytes": 163840}},
                       "mma": "wgmma", "tensor_maps": )" +
                        mapsJson(maps) + extra);
}

//===----------------------------------------------------------------------===//
// Manifest parsing
//===----------------------------------------------------------------------===//

TEST(Manifest, MissingFile) {
  fa_bundle *b = nullptr;
  std::string dir = tempDir("missing") + "/nowhere";
  EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_NOT_FOUND);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(lastError().find(dir + "/manifest.json"), std::string::npos)
      << lastError();
}

TEST(Manifest, NotARegularFile) {
  // A manifest.json that is a directory, or a device that never ends, is an
  // error with the path, never a crash or a hang.
  fa_bundle *b = nullptr;
  std::string dir = tempDir("manifest_dir");
  mkdir((dir + "/manifest.json").c_str(), 0755);
  EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_IO);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(lastError().find("regular file"), std::string::npos) << lastError();
  std::string zero = tempDir("manifest_zero");
  unlink((zero + "/manifest.json").c_str());
  ASSERT_EQ(symlink("/dev/zero", (zero + "/manifest.json").c_str()), 0);
  EXPECT_EQ(fa_bundle_load(zero.c_str(), &b), FA_ERROR_IO);
  EXPECT_EQ(b, nullptr);
}

TEST(Manifest, BadJson) {
  expectRejected("badjson", R"({"format": "fa-bundle", "version": 1,)",
                 "invalid JSON");
}

TEST(Manifest, WrongVersion) {
  expectRejected("version", manifest({}, newerVersion()),
                 newerVersionRejected());
}


TEST(Manifest, WrongFormat) {
  expectRejected("format", R"({"format": "x", "version": 1, "kernels": []})",
                 "format is 'x'");
}

TEST(Manifest, UnknownDtype) {
  expectRejected(
      "dtype",
      manifest({kernelJson("k0", "fwd", "f8", 64, "none", "sm_90a", true)}),
      "kernels[0] ('k0'): unknown dtype 'f8' (expected f16, bf16, "
      "f32 or f8e4m3)");
}

TEST(Manifest, FieldErrorsNameTheField) {
  struct Case {
    std::string kernel, expect;
  } cases[] = {
      {kernelJson("k", "fwd", "bf16", 64, "diagonal", "sm_90a", true),
       "unknown mask 'diagonal'"},
      {kernelJson("k", "sideways", "bf16", 64, "none", "sm_90a", true),
       "unknown direction 'sideways'"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "gfx90a", true),
       "malformed target 'gfx90a'"},
      {kernelJson("k", "fwd", "bf16", 0, "none", "sm_90a", true),
       "field 'head_dim' = 0 is outside"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "block_q": "64")"),
       "field 'block_q' must be an integer"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "entries": {})"),
       "entries: missing field 'fwd'"},
      {kernelJson("k", "bwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "entries": {"bwd": {"name": "b", "threads": 1,
                      "shared_bytes": 0}})"),
       "missing field 'bwd_pre'"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "entries": {"fwd": {"name": "f", "threads": 2048,
                      "shared_bytes": 0}})"),
       "field 'threads' = 2048 is outside [1, 1024]"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", false,
                  R"(, "ptx": "../../etc/passwd")"),
       "must be a path inside the bundle"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", false,
                  R"(, "ptx": null)"),
       "neither 'ptx' nor 'cubin' is given"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "score_mod": "soft cap")"),
       "field 'score_mod' must be null or a name of identifier characters"},
      {kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "dsplit": 2)"),
       "field 'dsplit' = 2 is for backward kernels only"},
      {kernelJson("k", "bwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "dsplit": 3)"),
       "field 'dsplit' = 3 must divide head_dim 64 and head_dim_v 64"},
      {kernelJson("k", "bwd", "bf16", 64, "none", "sm_90a", true,
                  R"(, "dsplit": 0)"),
       "field 'dsplit' = 0 is outside"},
  };
  for (const Case &c : cases)
    expectRejected("fields", manifest({c.kernel}), c.expect);
}

TEST(Manifest, WgmmaKernel) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(
      loadText("wgmma",
               manifest({wgmmaJson("w", "bf16", 128, "causal", true),
                         kernelJson("s", "fwd", "bf16", 128, "causal", "sm_90a",
                                    true, R"(, "mma": "mma_sync")")}),
               &b),
      FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.mma, FA_MMA_WGMMA);
  EXPECT_EQ(info.tensor_map_count, 3);
  EXPECT_EQ(info.block_q, 128);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.mma, FA_MMA_SYNC);
  EXPECT_EQ(info.tensor_map_count, 0);
  fa_bundle_free(b);
}

TEST(Manifest, PersistentGrid) {
  auto withGrid = [](const std::string &grid) {
    return wgmmaJson("w", "bf16", 64, "none", true, abiMaps(),
                     R"(, "entries": {"fwd": {"name": "fa_fwd_w", "threads": 384,
                         "shared_bytes": 81936, "grid": ")" +
                         grid + R"("}})");
  };
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("persistent",
                     manifest({withGrid("persistent"),
                               wgmmaJson("v", "bf16", 128, "none", true)},
                              "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.persistent_grid, 1);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.persistent_grid, 0);
  fa_bundle_free(b);

  // A version-3 runtime would launch it with one CTA per tile.
  expectRejected("grid_v3", manifest({withGrid("persistent")}, "3"),
                 "kernels[0]: persistent-grid kernels need bundle version 4, "
                 "the manifest says 3");
  expectRejected("grid_bad", manifest({withGrid("rows")}, "4"),
                 "unknown grid 'rows' (expected blocks or persistent)");
  // The tile counter follows the tensor maps: no maps, no persistent grid.
  expectRejected("grid_sync",
                 manifest({kernelJson("s", "fwd", "bf16", 64, "none", "sm_80",
                                      true, R"(, "entries": {
                 "fwd": {"name": "s", "threads": 128, "shared_bytes": 0,
                         "grid": "persistent"}})")}),
                 "grid 'persistent' needs an mma 'wgmma' kernel");
  expectRejected(
      "grid_bwd",
      manifest({kernelJson("k", "bwd", "bf16", 64, "none", "sm_80", true,
                           R"(, "entries": {
                 "bwd_pre": {"name": "a", "threads": 128, "shared_bytes": 0},
                 "bwd": {"name": "b", "threads": 256, "shared_bytes": 65536,
                         "grid": "persistent"},
                 "bwd_post": {"name": "c", "threads": 128, "shared_bytes": 0}})")}),
      "grid 'persistent' is for fwd entries only");
}

TEST(Manifest, KernelsWithoutMmaAreMmaSync) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("nomma",
                     manifest({kernelJson("s", "fwd", "bf16", 64, "none",
                                          "sm_80", true)}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.mma, FA_MMA_SYNC);
  EXPECT_EQ(info.tensor_map_count, 0);
  fa_bundle_free(b);
}

/// The wgmma forwards beyond d64/d128: d96 (its k and v maps' last 64-column
/// box ends past the head dim), d256 and the 192/128 shape.
TEST(Manifest, WgmmaForwardHeadDims) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("wgmma_dims",
                     manifest({wgmmaJson("a", "bf16", 96, "none", true),
                               wgmmaJson("b", "f16", 256, "causal", true),
                               wgmmaJson("c", "bf16", 192, "causal", true,
                                         abiMaps(), R"(, "head_dim_v": 128)")}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.mma, FA_MMA_WGMMA);
  EXPECT_EQ(info.head_dim, 96);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 2), &info), FA_SUCCESS);
  EXPECT_EQ(info.head_dim, 192);
  EXPECT_EQ(info.head_dim_v, 128);
  fa_bundle_free(b);
}

TEST(Manifest, WgmmaErrorsNameTheKernelAndField) {
  auto withMap = [](int i, auto edit) {
    std::vector<MapJson> maps = abiMaps();
    edit(maps[i]);
    return maps;
  };
  struct Case {
    std::string kernel, expect;
  } cases[] = {
      {kernelJson("k", "fwd", "bf16", 128, "none", "sm_90a", true,
                  R"(, "mma": "hgmma")"),
       "kernels[0] ('k'): unknown mma 'hgmma'"},
      {kernelJson("k", "fwd", "bf16", 128, "none", "sm_90a", true,
                  R"(, "tensor_maps": [])"),
       "only mma 'wgmma' kernels and sm_90a split-KV forwards take tensor "
       "maps"},
      {kernelJson("k", "fwd", "bf16", 128, "none", "sm_90a", true,
                  R"(, "mma": "wgmma")"),
       "kernels[0] ('k'): missing field 'tensor_maps'"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "target": "sm_90")"),
       "mma 'wgmma' needs target sm_90a, got 'sm_90'"},
      {wgmmaJson("k", "bf16", 80, "none", true),
       "mma 'wgmma' needs (head_dim, head_dim_v) in {(64, 64), (96, 96), "
       "(128, 128), (256, 256), (192, 128)}, got 80 and 80"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "head_dim_v": 96)"),
       "got 128 and 96"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "head_dim_v": 64)"),
       "got 128 and 64"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "tensor_maps": {})"),
       "field 'tensor_maps' must be an array"},
      {wgmmaJson("k", "bf16", 128, "none", true, {abiMaps()[0], abiMaps()[1]}),
       "field 'tensor_maps' has 2 maps, expected 3 (q, k, v)"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "tensor_maps": [1, 2, 3])"),
       "('k').tensor_maps[0]: must be an object"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.tensor = "o"; })),
       "('k').tensor_maps[0]: unknown tensor 'o' (expected q, k or v)"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 {abiMaps()[1], abiMaps()[0], abiMaps()[2]}),
       "tensor_maps[0]: tensor is 'k', expected 'q'"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(1, [](MapJson &m) { m.param = "11"; })),
       "tensor_maps[1]: field 'param' = 11, expected 12"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(2, [](MapJson &m) { m.param = "\"13\""; })),
       "tensor_maps[2]: field 'param' must be an integer"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(2,
                         [](MapJson &m) {
                           m.dims = R"(["head_dim", "nk", "batch*kv_heads"])";
                         })),
       R"(tensor_maps[2]: field 'dims' = ["head_dim","nk","batch*kv_heads"], )"
       R"(expected ["head_dim_v","nk","batch*kv_heads"])"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[64, 128]"; })),
       "tensor_maps[0]: field 'box' must be an array of 3 integers"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[0, 128, 1]"; })),
       "box[0] must be an integer in [1, 256]"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(1, [](MapJson &m) { m.box = "[64, 512, 1]"; })),
       "box[1] must be an integer in [1, 256]"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[128, 128, 1]"; })),
       "box[0] = 128 elements is 256 bytes; a 128-byte swizzle needs"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[4, 128, 1]"; })),
       "box[0] = 4 elements is 8 bytes"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[48, 128, 1]"; })),
       "box[0] = 48 does not divide the head dim 128"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.box = "[64, 64, 1]"; })),
       "tensor_maps[0]: box[1] = 64, expected block_q = 128"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(2, [](MapJson &m) { m.box = "[64, 64, 1]"; })),
       "tensor_maps[2]: box[1] = 64, expected block_kv = 128"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(1, [](MapJson &m) { m.box = "[64, 128, 2]"; })),
       "box[2] = 2, expected 1"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.swizzle = "64"; })),
       "field 'swizzle' = 64 is not supported (expected 128)"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.l2 = "512"; })),
       "field 'l2_promotion' = 512 is not one of 0, 64, 128, 256"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.fill = R"("nan")"; })),
       "field 'oob_fill' = 'nan' is not supported"},
      {wgmmaJson("k", "bf16", 128, "none", true,
                 withMap(0, [](MapJson &m) { m.fill = "0"; })),
       "field 'oob_fill' must be a string"},
  };
  for (const Case &c : cases)
    expectRejected("wgmma_fields", manifest({c.kernel}), c.expect);
}

/// A wgmma backward kernel object as fa-aot writes it: the mma.sync
/// backward's entries and parameters, no tensor maps.
std::string wgmmaBwdJson(const std::string &tag, const std::string &extra = "") {
  return kernelJson(tag, "bwd", "bf16", 128, "causal", "sm_90a", true,
                    R"(, "block_q": 64, "block_kv": 128, "warps": 8,
                       "mma": "wgmma")" + extra);
}

TEST(Manifest, WgmmaBackwardKernel) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("wgmma_bwd", manifest({wgmmaBwdJson("k")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  EXPECT_EQ(info.mma, FA_MMA_WGMMA);
  EXPECT_EQ(info.tensor_map_count, 0);
  EXPECT_EQ(info.block_kv, 128);
  fa_bundle_free(b);
}

TEST(Manifest, Version1) {
  // Version-1 bundles still load; what a version-1 reader would launch
  // wrongly (a split backward, a wgmma backward) needs version 2.
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("v1",
                     manifest({kernelJson("s", "fwd", "bf16", 64, "none",
                                          "sm_80", true)},
                              "1"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  expectRejected("v1_dsplit",
                 manifest({kernelJson("k", "bwd", "bf16", 64, "none", "sm_80",
                                      true, R"(, "dsplit": 2)")},
                          "1"),
                 "field 'dsplit' = 2 needs bundle version 2, the manifest "
                 "says 1");
  expectRejected("v1_wgmma_bwd", manifest({wgmmaBwdJson("k")}, "1"),
                 "mma 'wgmma' backward kernels need bundle version 2");
}

TEST(Manifest, WgmmaBackwardErrors) {
  struct Case {
    std::string kernel, expect;
  } cases[] = {
      {wgmmaBwdJson("k", R"(, "tensor_maps": )" + mapsJson(abiMaps())),
       "kernels[0] ('k'): field 'tensor_maps' is given, but mma 'wgmma' "
       "backward kernels take no tensor maps"},
      {wgmmaBwdJson("k", R"(, "target": "sm_90")"),
       "mma 'wgmma' needs target sm_90a, got 'sm_90'"},
      {wgmmaBwdJson("k", R"(, "head_dim": 256, "head_dim_v": 256)"),
       "mma 'wgmma' backward kernels above head_dim 128 are "
       "warp-specialised (bwd entry of 384 threads), this one has 256"},
      {wgmmaBwdJson("k", R"(, "head_dim": 192, "head_dim_v": 128)"),
       "above head_dim 128 are warp-specialised"},
      {wgmmaBwdJson("k", R"(, "head_dim": 80, "head_dim_v": 80)"),
       "(128, 128), (256, 256), (192, 128)}, got 80 and 80"},
  };
  for (const Case &c : cases)
    expectRejected("wgmma_bwd_err", manifest({c.kernel}), c.expect);
}

/// The maps of the warp-specialised wgmma backward (docs/ABI.md): q, k, v,
/// do after fa_bwd's 15 parameters, query boxes of block_q = 64 rows.
std::vector<MapJson> wsMaps() {
  return {
      {"q", "15", R"(["head_dim", "nq", "batch*heads"])", "[64, 64, 1]"},
      {"k", "16", R"(["head_dim", "nk", "batch*kv_heads"])", "[64, 128, 1]"},
      {"v", "17", R"(["head_dim_v", "nk", "batch*kv_heads"])", "[64, 128, 1]"},
      {"do", "18", R"(["head_dim_v", "nq", "batch*heads"])", "[64, 64, 1]"}};
}

/// The warp-specialised wgmma backward as fa-aot writes it: 12 warps, a bwd
/// entry of 384 threads, four tensor maps.
std::string wsBwdJson(const std::string &tag, int d = 128,
                      const std::vector<MapJson> &maps = wsMaps(),
                      const std::string &extra = "") {
  return kernelJson(tag, "bwd", "bf16", d, "causal", "sm_90a", true,
                    R"(, "block_q": 64, "block_kv": 128, "warps": 12,
                       "entries": {"bwd_pre": {"name": "a", "threads": 384, "shared_bytes": 0},
                                   "bwd": {"name": "b", "threads": 384, "shared_bytes": 230400},
                                   "bwd_post": {"name": "c", "threads": 384, "shared_bytes": 0}},
                       "mma": "wgmma", "tensor_maps": )" +
                        mapsJson(maps) + extra);
}

TEST(Manifest, WgmmaBackwardWarpSpecialized) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("wgmma_bwd_ws", manifest({wsBwdJson("k")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  EXPECT_EQ(info.mma, FA_MMA_WGMMA);
  EXPECT_EQ(info.warps, 12);
  EXPECT_EQ(info.tensor_map_count, 4);
  fa_bundle_free(b);
}

/// The warp-specialised backward at d96: its four maps' last 64-column box
/// ends past the head dim, as the forward's do.
TEST(Manifest, WgmmaBackwardD96) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("wgmma_bwd_d96", manifest({wsBwdJson("k", 96)}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  EXPECT_EQ(info.mma, FA_MMA_WGMMA);
  EXPECT_EQ(info.head_dim, 96);
  EXPECT_EQ(info.head_dim_v, 96);
  EXPECT_EQ(info.tensor_map_count, 4);
  fa_bundle_free(b);
}

TEST(Manifest, WgmmaBackwardWarpSpecializedErrors) {
  std::vector<MapJson> three = wsMaps();
  three.pop_back();
  std::vector<MapJson> doBox = wsMaps();
  doBox[3].box = "[64, 128, 1]";
  std::vector<MapJson> doParam = wsMaps();
  doParam[3].param = "14";
  std::vector<MapJson> order = wsMaps();
  std::swap(order[0], order[3]);
  std::vector<MapJson> forwardMaps = abiMaps();
  forwardMaps[2].tensor = "do";
  struct Case {
    std::string kernel, expect;
  } cases[] = {
      {kernelJson("k", "bwd", "bf16", 128, "causal", "sm_90a", true,
                  R"(, "block_q": 64, "block_kv": 128, "warps": 12,
                     "entries": {"bwd_pre": {"name": "a", "threads": 384, "shared_bytes": 0},
                                 "bwd": {"name": "b", "threads": 384, "shared_bytes": 230400},
                                 "bwd_post": {"name": "c", "threads": 384, "shared_bytes": 0}},
                     "mma": "wgmma")"),
       "kernels[0] ('k'): missing field 'tensor_maps' (the warp-specialised "
       "mma 'wgmma' backward of 384 threads takes q, k, v and do tensor maps)"},
      {wsBwdJson("k", 128, three),
       "field 'tensor_maps' has 3 maps, expected 4 (q, k, v, do)"},
      {wsBwdJson("k", 128, doBox),
       "tensor_maps[3]: box[1] = 128, expected block_q = 64"},
      {wsBwdJson("k", 128, doParam),
       "tensor_maps[3]: field 'param' = 14, expected 18 (the q, k, v, do maps "
       "follow fa_bwd's 15 parameters)"},
      {wsBwdJson("k", 128, order),
       "tensor_maps[0]: tensor is 'do', expected 'q' (the maps are q, k, v, do "
       "in parameter order)"},
      {wgmmaJson("k", "bf16", 128, "none", true, forwardMaps),
       "tensor_maps[2]: unknown tensor 'do' (expected q, k or v)"},
  };
  for (const Case &c : cases)
    expectRejected("wgmma_bwd_ws_err", manifest({c.kernel}), c.expect);
}

/// The deterministic warp-specialised backward as fa-aot writes it.
std::string detBwdJson(const std::string &tag,
                       const std::string &extra = R"(, "deterministic": true,
                                                     "semaphore_param": 19)") {
  return wsBwdJson(tag, 128, wsMaps(), extra);
}

TEST(Manifest, DeterministicBackward) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("det", manifest({wsBwdJson("ws"), detBwdJson("det")}, "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.deterministic, 0);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.deterministic, 1);
  EXPECT_EQ(info.tensor_map_count, 4);
  fa_bundle_free(b);
  // Without the field (or false), a kernel is not deterministic.
  ASSERT_EQ(loadText("det_false",
                     manifest({detBwdJson("k", R"(, "deterministic": false)")},
                              "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.deterministic, 0);
  fa_bundle_free(b);
}

TEST(Manifest, DeterministicBackwardErrors) {
  struct Case {
    std::string kernel, version, expect;
  } cases[] = {
      // A version-2 runtime ignores the field and would launch it without
      // the semaphore parameter.
      {detBwdJson("k"), "2",
       "kernels[0]: deterministic kernels need bundle version 3, the manifest "
       "says 2"},
      {detBwdJson("k", R"(, "deterministic": true)"), "3",
       "missing field 'semaphore_param' (a deterministic backward takes its "
       "semaphore workspace at parameter 19)"},
      {detBwdJson("k", R"(, "deterministic": true, "semaphore_param": 15)"),
       "3",
       "field 'semaphore_param' = 15, expected 19 (the semaphores follow "
       "fa_bwd's 15 parameters and its 4 tensor maps)"},
      {detBwdJson("k", R"(, "deterministic": 1, "semaphore_param": 19)"), "3",
       "field 'deterministic' must be true or false, got 1"},
      {wsBwdJson("k", 128, wsMaps(), R"(, "semaphore_param": 19)"), "3",
       "field 'semaphore_param' is given, but the kernel is not deterministic"},
      {wgmmaBwdJson("k", R"(, "deterministic": true, "semaphore_param": 15)"),
       "3",
       "only the warp-specialised mma 'wgmma' backward (bwd entry of 384 "
       "threads) has a deterministic variant"},
      {wgmmaJson("k", "bf16", 128, "none", true, abiMaps(),
                 R"(, "deterministic": true, "semaphore_param": 14)"),
       "3", "has a deterministic variant"},
  };
  for (const Case &c : cases)
    expectRejected("det_err", manifest({c.kernel}, c.version), c.expect);
}

TEST(FindDeterministic, OnlyOnRequest) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("find_det",
                     manifest({detBwdJson("det"), wsBwdJson("ws"),
                               kernelJson("sync", "bwd", "bf16", 128, "causal",
                                          "sm_90a", true)},
                              "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_BWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_CAUSAL;
  q.compute_capability = 90;
  auto tagOf = [](const fa_kernel *k) {
    fa_kernel_info info;
    fa_kernel_get_info(k, &info);
    return std::string(info.tag);
  };
  const fa_kernel *k = nullptr;
  // The ordinary searches never return it, even though it is listed first.
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(tagOf(k), "ws");
  ASSERT_EQ(fa_kernel_find_for_keys(b, &q, 4096, &k), FA_SUCCESS);
  EXPECT_EQ(tagOf(k), "ws");
  q.mma = FA_MMA_SYNC;
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS);
  EXPECT_EQ(tagOf(k), "sync");
  // The deterministic search returns only it.
  q.mma = FA_MMA_ANY;
  ASSERT_EQ(fa_kernel_find_deterministic(b, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(tagOf(k), "det");
  ASSERT_EQ(fa_kernel_find_deterministic(b, &q, 0, &k), FA_SUCCESS);
  EXPECT_EQ(tagOf(k), "det");
  q.mma = FA_MMA_SYNC;
  EXPECT_EQ(fa_kernel_find_deterministic(b, &q, 0, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("has no deterministic kernel for bwd bf16 d=128 "
                             "dv=128 mask=causal"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("(deterministic) (sm_90a)"), std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("'det' config field"), std::string::npos)
      << lastError();
  // Only sm_90a builds: nothing for sm_80.
  q.mma = FA_MMA_ANY;
  q.compute_capability = 80;
  EXPECT_EQ(fa_kernel_find_deterministic(b, &q, 0, &k), FA_ERROR_UNSUPPORTED);
  fa_bundle_free(b);
}

TEST(Manifest, WgmmaSmallKeyTiles) {
  // block_kv 64: the k and v boxes follow it.
  std::vector<MapJson> maps = abiMaps();
  maps[1].box = maps[2].box = "[64, 64, 1]";
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("wgmma_bkv64",
                     manifest({wgmmaJson("w", "f16", 64, "none", false, maps,
                                         R"(, "block_kv": 64)")}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
}

//===----------------------------------------------------------------------===//
// score_mod kernels
//===----------------------------------------------------------------------===//

/// A kernel with the score_mod `mod` compiled in, tagged as fa-aot tags it.
std::string modJson(const std::string &tag, const std::string &direction,
                    const std::string &mod, const std::string &mask = "causal",
                    int d = 128) {
  return kernelJson(tag, direction, "bf16", d, mask, "sm_90a", true,
                    R"(, "score_mod": ")" + mod + R"(")");
}

TEST(ScoreMod, ManifestNamesTheMod) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(
      loadText("mod_info",
               manifest({kernelJson("plain", "fwd", "bf16", 128, "causal",
                                    "sm_90a", true),
                         modJson("fwd_mod_softcap30", "fwd", "softcap30"),
                         modJson("bwd_mod_alibi_16", "bwd", "_alibi_16")}),
               &b),
      FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.score_mod, nullptr);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_STREQ(info.score_mod, "softcap30");
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 2), &info), FA_SUCCESS);
  EXPECT_STREQ(info.score_mod, "_alibi_16");
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  fa_bundle_free(b);
}

TEST(ScoreMod, BadNamesAreRejected) {
  for (const char *mod :
       {R"("")", R"("soft cap")", R"("9lives")", R"("a-b")", R"("a.b")",
        R"("mod/../x")", "5", "true", R"(["softcap30"])", R"({"name": "x"})"})
    expectRejected("mod_bad",
                   manifest({kernelJson("k", "fwd", "bf16", 64, "none",
                                        "sm_90a", true,
                                        std::string(R"(, "score_mod": )") +
                                            mod)}),
                   "kernels[0] ('k'): field 'score_mod' must be null or a "
                   "name of identifier characters");
}

/// A score_mod kernel whose mod_args are `modArgs` (JSON array text), as
/// fa-aot writes it in a version-8 bundle.
std::string modArgsJson(const std::string &tag, const std::string &direction,
                        const std::string &modArgs,
                        const std::string &param = "") {
  std::string p = !param.empty() ? param : direction == "fwd" ? "11" : "15";
  return kernelJson(tag, direction, "bf16", 64, "causal", "sm_90a", true,
                    R"(, "score_mod": "m", "mod_args": )" + modArgs +
                        R"(, "mod_arg_param": )" + p);
}

TEST(ScoreMod, ModArgsInTheManifest) {
  // What each mod_arg's extents must be: a problem size, a fixed size or
  // any; fa_kernel_get_mod_arg reports them.
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("mod_args_info",
                     manifest({modArgsJson("f", "fwd",
                                           R"([{"dtype": "f32", "rank": 1,
                                                "dims": ["heads"]},
                                               {"dtype": "i64", "rank": 2,
                                                "dims": [8191, "nq+nk-1"]}])"),
                               modArgsJson("b", "bwd",
                                           R"([{"dtype": "bf16", "rank": 2}])")},
                              "8"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.mod_arg_count, 2);
  fa_mod_arg_info m;
  ASSERT_EQ(fa_kernel_get_mod_arg(fa_bundle_kernel_at(b, 0), 1, &m),
            FA_SUCCESS);
  EXPECT_EQ(m.dtype, FA_DTYPE_I64);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.extent[0], FA_EXTENT_FIXED);
  EXPECT_EQ(m.size[0], 8191);
  EXPECT_EQ(m.extent[1], FA_EXTENT_NQ_NK);
  ASSERT_EQ(fa_kernel_get_mod_arg(fa_bundle_kernel_at(b, 1), 0, &m),
            FA_SUCCESS);
  EXPECT_EQ(m.dtype, FA_DTYPE_BF16);
  EXPECT_EQ(m.extent[0], FA_EXTENT_ANY); // no "dims": every extent free
  EXPECT_EQ(m.extent[1], FA_EXTENT_ANY);
  EXPECT_EQ(fa_kernel_get_mod_arg(fa_bundle_kernel_at(b, 1), 1, &m),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("index 1 is outside kernel 'b''s 1 mod_args"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_kernel_get_mod_arg(fa_bundle_kernel_at(b, 1), 0, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  fa_bundle_free(b);
  // An empty list is a kernel without mod_args, in any version.
  ASSERT_EQ(loadText("mod_args_empty",
                     manifest({modJson("m", "fwd", "x").insert(
                         1, R"("mod_args": [], )")}),
                     &b),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.mod_arg_count, 0);
  fa_bundle_free(b);
}

TEST(ScoreMod, ModArgManifestErrors) {
  auto reject = [](const std::string &modArgs, const std::string &expect,
                   const std::string &version = "8",
                   const std::string &param = "") {
    expectRejected("mod_args_bad",
                   manifest({modArgsJson("k", "fwd", modArgs, param)}, version),
                   expect);
  };
  const std::string slopes = R"([{"dtype": "f32", "rank": 1}])";
  // A version-7 reader would not pass them: the version must say 8.
  reject(slopes, "kernels with mod_args need bundle version 8, the manifest "
                 "says 7", "7");
  reject(slopes, "field 'mod_arg_param' = 12, expected 11 (the mod_args "
                 "follow every other parameter of the fwd entry)", "8", "12");
  reject(R"({"dtype": "f32"})", "field 'mod_args' must be an array");
  reject(R"([{"dtype": "f64", "rank": 1}])",
         "kernels[0] ('k').mod_args[0]: unknown dtype 'f64'");
  reject(R"([{"dtype": "f32", "rank": 5}])", "mod_args[0]");
  reject(R"([{"dtype": "f32", "rank": 2, "dims": ["heads"]}])",
         "field 'dims' must be an array of 2 extents");
  reject(R"([{"dtype": "f32", "rank": 1, "dims": ["seq"]}])",
         "dims[0] must be a size in [1, 2^31-1] or one of any, batch, heads");
  reject(R"([{"dtype": "f32", "rank": 1, "dims": [0]}])", "dims[0] must be");
  reject(R"([1])", "mod_args[0]: must be an object");
  std::string nine = "[";
  for (int i = 0; i < 9; ++i)
    nine += std::string(i ? "," : "") + R"({"dtype": "f32", "rank": 1})";
  reject(nine + "]", "field 'mod_args' lists 9 tensors; at most 8");
  expectRejected("mod_args_nomod",
                 manifest({kernelJson("p", "fwd", "bf16", 64, "causal",
                                      "sm_90a", true,
                                      R"(, "mod_args": )" + slopes +
                                          R"(, "mod_arg_param": 11)")},
                          "8"),
                 "field 'mod_args' is given, but the kernel has no score_mod");
  // A newer bundle than this runtime reads is refused as a whole.
  expectRejected("mod_args_newer",
                 manifest({modArgsJson("k", "fwd", slopes)}, newerVersion()),
                 newerVersionRejected());
}

TEST(ScoreMod, NeedsNoNewerVersion) {
  // Runtimes older than score_mod kernels reject them (a non-null
  // score_mod), so any version may carry one.
  for (const char *version : {"1", "2", "3", "4", "5"}) {
    fa_bundle *b = nullptr;
    EXPECT_EQ(loadText("mod_version", manifest({modJson("m", "fwd", "x")}, version),
                       &b),
              FA_SUCCESS)
        << version << ": " << lastError();
    fa_bundle_free(b);
  }
}

//===----------------------------------------------------------------------===//
// mask_mod kernels
//===----------------------------------------------------------------------===//

/// A causal bf16 d64 forward with the mask_mod `maskMod` reading doc ids
/// [B, N] (i32), as fa-aot writes it in a version-9 bundle.
std::string maskModJson(const std::string &tag, const std::string &maskMod,
                        const std::string &scoreMod = "") {
  std::string mods = R"(, "mask_mod": ")" + maskMod + R"(")";
  if (!scoreMod.empty())
    mods += R"(, "score_mod": ")" + scoreMod + R"(")";
  return kernelJson(tag, "fwd", "bf16", 64, "causal", "sm_90a", true,
                    mods + R"(, "mod_args": [{"dtype": "i32", "rank": 2}],
                               "mod_arg_param": 11)");
}

TEST(MaskMod, OnlyQueriesNamingItFindIt) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("mask_mod_find",
                     manifest({kernelJson("plain", "fwd", "bf16", 64, "causal",
                                          "sm_90a", true),
                               maskModJson("doc", "document"),
                               maskModJson("doc_softcap", "document",
                                           "softcap30")},
                              "9"),
                     &b),
            FA_SUCCESS)
      << lastError();
  auto find = [&](const char *scoreMod, const char *maskMod) -> std::string {
    fa_kernel_query q{};
    q.direction = FA_DIRECTION_FWD;
    q.dtype = FA_DTYPE_BF16;
    q.head_dim = 64;
    q.mask = FA_MASK_CAUSAL;
    q.compute_capability = 90;
    q.score_mod = scoreMod;
    q.mask_mod = maskMod;
    const fa_kernel *k = nullptr;
    if (fa_kernel_find(b, &q, &k) != FA_SUCCESS)
      return "error: " + lastError();
    fa_kernel_info info;
    EXPECT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
    EXPECT_EQ(info.mask_mod == nullptr, maskMod == nullptr);
    if (maskMod) {
      EXPECT_STREQ(info.mask_mod, maskMod);
      EXPECT_EQ(info.mod_arg_count, 1);
    }
    return info.tag;
  };
  // A query without a mask_mod never gets a kernel that masks more.
  EXPECT_EQ(find(nullptr, nullptr), "plain");
  EXPECT_EQ(find(nullptr, "document"), "doc");
  EXPECT_EQ(find("softcap30", "document"), "doc_softcap");
  std::string miss = find(nullptr, "prefix_lm");
  EXPECT_NE(miss.find("mask_mod=prefix_lm"), std::string::npos) << miss;
  EXPECT_NE(find("softcap30", nullptr).find("error: "), std::string::npos);
  EXPECT_NE(find(nullptr, "bad name").find("fa_kernel_find: mask_mod is 'bad "
                                           "name'"),
            std::string::npos);
  fa_bundle_free(b);
}

TEST(MaskMod, OlderBundleVersionsAndBadNamesAreRejected) {
  // A version-8 reader ignores "mask_mod" and would serve the kernel to
  // queries without the mask.
  expectRejected("mask_mod_v8", manifest({maskModJson("doc", "document")}, "8"),
                 "kernels[0]: mask_mod kernels need bundle version 9, the "
                 "manifest says 8");
  expectRejected("mask_mod_name",
                 manifest({maskModJson("doc", "doc ids")}, "9"),
                 "kernels[0] ('doc'): field 'mask_mod' must be null or a name "
                 "of identifier characters");
}

//===----------------------------------------------------------------------===//
// Block-sparse kernels
//===----------------------------------------------------------------------===//

/// The block-sparse document-mask forward as fa-aot writes it (bundle
/// version 23: with its block_order entry; `order` false: as before).
/// A block-sparse d128 forward (its fwd entry on a persistent grid with
/// `persistent`: the tile counter after the maps moves every later
/// parameter by one).
std::string blockSparseJson(bool order, bool persistent = false) {
  std::string tag = "bs";
  std::vector<MapJson> maps = {
      {"q", "11", R"(["head_dim", "nq", "heads", "batch"])", "[64, 128, 1, 1]"},
      {"k", "12", R"(["head_dim", "nk", "kv_heads", "batch"])",
       "[64, 128, 1, 1]"},
      {"v", "13", R"(["head_dim_v", "nk", "kv_heads", "batch"])",
       "[64, 128, 1, 1]"}};
  auto entry = [](const std::string &key, int threads) {
    return R"(")" + key + R"(": {"name": "fa_)" + key +
           R"(_bs", "threads": )" + std::to_string(threads) +
           R"(, "shared_bytes": 0})";
  };
  std::string entries =
      std::string(R"({"fwd": {"name": "fa_fwd_bs", "threads": 384,
      "shared_bytes": 163840)") +
      (persistent ? R"(, "grid": "persistent"}, )" : "}, ") +
      entry("block_mask", 32) + ", " + entry("block_lists", 32) +
      (order ? ", " + entry("block_order", 128) : "") + "}";
  const int shift = persistent ? 1 : 0;
  return wgmmaJson(tag, "bf16", 128, "none", true, maps,
                   R"(, "entries": )" + entries + R"(, "stride_param": )" +
                       std::to_string(14 + shift) +
                       R"(, "mask_mod": "document",
                          "mod_args": [{"dtype": "i32", "rank": 2}],
                          "mod_arg_param": )" +
                       std::to_string(28 + shift) +
                       R"(, "block_sparse": true, "block_mask_param": )" +
                       std::to_string(26 + shift));
}

TEST(BlockSparse, PersistentForwardLoads) {
  // A persistent block-sparse forward: its tile counter comes after the
  // maps, the strides, block mask and mod_args one parameter later.
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("block_sparse_persistent",
                     manifest({blockSparseJson(true, true)}, "23"), &b),
            FA_SUCCESS)
      << lastError();
  uint64_t bytes = 0;
  EXPECT_EQ(
      fa_block_mask_bytes(fa_bundle_kernel_at(b, 0), 2, 1, 300, 1000, &bytes),
      FA_SUCCESS)
      << lastError();
  EXPECT_EQ(bytes, 4u * 306);
  fa_bundle_free(b);
}

TEST(BlockSparse, OrderSizesTheMask) {
  // R = 2 rows, NQB = 3, NKB = 8: R·(3·(NQB + NKB) + 5·NQB·NKB) words with
  // the grid order (kv_order, q_order), R·(2·(NQB + NKB) + ...) without.
  for (auto [order, version, words] :
       {std::make_tuple(true, "23", 306), std::make_tuple(false, "22", 284)}) {
    fa_bundle *b = nullptr;
    ASSERT_EQ(loadText(std::string("block_order_") + version,
                       manifest({blockSparseJson(order)}, version), &b),
              FA_SUCCESS)
        << lastError();
    uint64_t bytes = 0;
    ASSERT_EQ(fa_block_mask_bytes(fa_bundle_kernel_at(b, 0), 2, 1, 300, 1000,
                                  &bytes),
              FA_SUCCESS)
        << lastError();
    EXPECT_EQ(bytes, 4u * words) << version;
    fa_bundle_free(b);
  }
  expectRejected("block_order_v22", manifest({blockSparseJson(true)}, "22"),
                 "kernels[0]: kernels with a block order need bundle version "
                 "23, the manifest says 22");
  expectRejected("block_order_missing",
                 manifest({blockSparseJson(false)}, "23"),
                 "kernels[0]: block-sparse kernels of bundle version 23 or "
                 "later have the entry 'block_order'");
}

/// A bundle with plain, softcap30 and alibi16 causal d128 forwards (alibi16
/// also as a wgmma kernel), a softcap30 backward and a softcap30-only d64
/// forward.
class FindScoreMod : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(
        loadText("find_mod",
                 manifest({kernelJson("plain", "fwd", "bf16", 128, "causal",
                                      "sm_90a", true),
                           modJson("softcap", "fwd", "softcap30"),
                           modJson("alibi", "fwd", "alibi16"),
                           wgmmaJson("alibi_wgmma", "bf16", 128, "causal",
                                     true, abiMaps(),
                                     R"(, "score_mod": "alibi16")"),
                           modJson("softcap_bwd", "bwd", "softcap30"),
                           modJson("softcap64", "fwd", "softcap30", "none",
                                   64)}),
                 &bundle),
        FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }

  /// The tag fa_kernel_find picks for a causal d128 query with `mod`.
  std::string find(const char *mod, fa_status expect = FA_SUCCESS,
                   fa_direction dir = FA_DIRECTION_FWD, int d = 128,
                   fa_mask mask = FA_MASK_CAUSAL, fa_mma mma = FA_MMA_ANY) {
    fa_kernel_query q{};
    q.direction = dir;
    q.dtype = FA_DTYPE_BF16;
    q.head_dim = d;
    q.mask = mask;
    q.compute_capability = 90;
    q.mma = mma;
    q.score_mod = mod;
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find(bundle, &q, &k), expect) << lastError();
    if (!k)
      return "";
    fa_kernel_info info;
    fa_kernel_get_info(k, &info);
    EXPECT_STREQ(info.score_mod, mod);
    return info.tag;
  }
  fa_bundle *bundle = nullptr;
};

TEST_F(FindScoreMod, MatchesTheNameExactly) {
  EXPECT_EQ(find(nullptr), "plain");
  EXPECT_EQ(find("softcap30"), "softcap");
  EXPECT_EQ(find("alibi16"), "alibi_wgmma"); // wgmma wins on sm_90
  EXPECT_EQ(find("alibi16", FA_SUCCESS, FA_DIRECTION_FWD, 128, FA_MASK_CAUSAL,
                 FA_MMA_SYNC),
            "alibi");
  EXPECT_EQ(find("softcap30", FA_SUCCESS, FA_DIRECTION_BWD), "softcap_bwd");
  EXPECT_EQ(find("softcap30", FA_SUCCESS, FA_DIRECTION_FWD, 64, FA_MASK_NONE),
            "softcap64");
  // Names are case-sensitive and whole.
  find("SOFTCAP30", FA_ERROR_NOT_FOUND);
  find("softcap3", FA_ERROR_NOT_FOUND);
}

TEST_F(FindScoreMod, MissingModNamesItAndListsTheBundlesMods) {
  find("relbias", FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("has no kernel for fwd bf16 d=128 dv=128 "
                             "mask=causal score_mod=relbias"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("score_mod relbias is not in the bundle for fwd "
                             "bf16 d=128 dv=128 mask=causal, which has "
                             "score_mod none, alibi16, softcap30"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("fwd bf16 d=128 dv=128 mask=causal mma=wgmma "
                             "score_mod=alibi16 (sm_90a)"),
            std::string::npos)
      << lastError();
}

TEST_F(FindScoreMod, PlainQueryDoesNotTakeAModKernel) {
  // The d64 forward and the backward exist with softcap30 only.
  find(nullptr, FA_ERROR_NOT_FOUND, FA_DIRECTION_FWD, 64, FA_MASK_NONE);
  EXPECT_NE(lastError().find("score_mod none is not in the bundle for fwd "
                             "bf16 d=64 dv=64 mask=none, which has score_mod "
                             "softcap30"),
            std::string::npos)
      << lastError();
  find(nullptr, FA_ERROR_NOT_FOUND, FA_DIRECTION_BWD);
  EXPECT_NE(lastError().find("which has score_mod softcap30"),
            std::string::npos)
      << lastError();
  // Without the attention problem at all, there is no score_mod list.
  find("softcap30", FA_ERROR_NOT_FOUND, FA_DIRECTION_FWD, 96, FA_MASK_NONE);
  EXPECT_EQ(lastError().find("is not in the bundle"), std::string::npos)
      << lastError();
}

TEST_F(FindScoreMod, ForcedMmaWithTheMod) {
  // softcap30 has no wgmma build: the mod is there, the instructions are not.
  find("softcap30", FA_ERROR_NOT_FOUND, FA_DIRECTION_FWD, 128, FA_MASK_CAUSAL,
       FA_MMA_WGMMA);
  EXPECT_NE(lastError().find("mma=wgmma score_mod=softcap30"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(lastError().find("is not in the bundle"), std::string::npos)
      << lastError();
}

TEST_F(FindScoreMod, BadQueryNames) {
  for (const char *mod : {"", "soft cap", "1x", "a-b", "alibi16 "}) {
    find(mod, FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find("fa_kernel_find: score_mod is '" +
                               std::string(mod) + "'; expected NULL"),
              std::string::npos)
        << lastError();
  }
}

TEST_F(FindScoreMod, DeterministicAndKeysTakeTheModToo) {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_CAUSAL;
  q.compute_capability = 90;
  q.score_mod = "softcap30";
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find_for_keys(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  fa_kernel_get_info(k, &info);
  EXPECT_STREQ(info.tag, "softcap");
  q.direction = FA_DIRECTION_BWD;
  EXPECT_EQ(fa_kernel_find_deterministic(bundle, &q, 0, &k),
            FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("no deterministic kernel for bwd bf16 d=128 "
                             "dv=128 mask=causal score_mod=softcap30"),
            std::string::npos)
      << lastError();
}

TEST(Manifest, DuplicateTag) {
  std::string k = kernelJson("k", "fwd", "bf16", 64, "none", "sm_90a", true);
  expectRejected("dup", manifest({k, k}), "duplicate tag 'k'");
}

TEST(Manifest, ValidBundleInfo) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("valid",
                     manifest({kernelJson("f", "fwd", "bf16", 128, "causal",
                                          "sm_90a", true),
                               kernelJson("w", "bwd", "f16", 64, "window",
                                          "sm_80", false)}),
                     &b),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_bundle_kernel_count(b), 2);
  EXPECT_EQ(fa_bundle_kernel_at(b, 2), nullptr);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "f");
  EXPECT_STREQ(info.target, "sm_90a");
  EXPECT_EQ(info.direction, FA_DIRECTION_FWD);
  EXPECT_EQ(info.dtype, FA_DTYPE_BF16);
  EXPECT_EQ(info.mask, FA_MASK_CAUSAL);
  EXPECT_EQ(info.head_dim, 128);
  EXPECT_EQ(info.block_q, 64);
  EXPECT_EQ(info.has_cubin, 1);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  EXPECT_EQ(info.mask, FA_MASK_WINDOW);
  EXPECT_EQ(info.window_left, 16);
  EXPECT_EQ(info.window_right, 0);
  EXPECT_EQ(info.has_cubin, 0);
  EXPECT_EQ(info.dsplit, 1); // absent: one CTA per key block
  fa_bundle_free(b);
}

//===----------------------------------------------------------------------===//
// Kernel selection
//===----------------------------------------------------------------------===//

class Find : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(loadText("find",
                       manifest({kernelJson("hopper", "fwd", "bf16", 128,
                                            "none", "sm_90a", true),
                                 kernelJson("ampere", "fwd", "bf16", 128,
                                            "none", "sm_80", true),
                                 kernelJson("win", "fwd", "bf16", 64, "window",
                                            "sm_80", false),
                                 kernelJson("only90a", "fwd", "f16", 64,
                                            "causal", "sm_90a", true)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }

  std::string find(fa_kernel_query q, fa_status expect = FA_SUCCESS) {
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find(bundle, &q, &k), expect) << lastError();
    if (!k)
      return "";
    fa_kernel_info info;
    fa_kernel_get_info(k, &info);
    return info.tag;
  }
  fa_bundle *bundle = nullptr;
};

fa_kernel_query query(fa_dtype dtype, int d, fa_mask mask, int cc) {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = dtype;
  q.head_dim = d;
  q.mask = mask;
  q.compute_capability = cc;
  return q;
}

TEST_F(Find, PrefersNativeCubin) {
  EXPECT_EQ(find(query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 90)), "hopper");
  EXPECT_EQ(find(query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 80)), "ampere");
  // sm_90a code runs on sm_90 only; sm_80 PTX runs on anything newer.
  EXPECT_EQ(find(query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 100)), "ampere");
  EXPECT_EQ(find(query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 86)), "ampere");
}

TEST_F(Find, ArchSpecificTargetIsNotPortable) {
  find(query(FA_DTYPE_F16, 64, FA_MASK_CAUSAL, 80), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("only for targets sm_90a"), std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("sm_80"), std::string::npos) << lastError();
  EXPECT_EQ(find(query(FA_DTYPE_F16, 64, FA_MASK_CAUSAL, 90)), "only90a");
}

TEST_F(Find, NoMatchListsTheBundle) {
  find(query(FA_DTYPE_BF16, 96, FA_MASK_NONE, 90), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("no kernel for fwd bf16 d=96 dv=96 mask=none"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("fwd bf16 d=128 dv=128 mask=none (sm_90a)"),
            std::string::npos)
      << lastError();
  fa_kernel_query bwd = query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 90);
  bwd.direction = FA_DIRECTION_BWD;
  find(bwd, FA_ERROR_NOT_FOUND);
}

TEST_F(Find, WindowMustMatch) {
  fa_kernel_query q = query(FA_DTYPE_BF16, 64, FA_MASK_WINDOW, 90);
  q.window_left = 16;
  q.window_right = 0;
  EXPECT_EQ(find(q), "win");
  q.window_left = 8;
  find(q, FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("mask=window(8,0)"), std::string::npos)
      << lastError();
}

/// mma.sync and wgmma builds of one config, as a bundle with both has them.
class FindMma : public Find {
protected:
  void SetUp() override {
    ASSERT_EQ(loadText("findmma",
                       manifest({kernelJson("sync90a", "fwd", "bf16", 128,
                                            "causal", "sm_90a", true),
                                 wgmmaJson("wgmma", "bf16", 128, "causal",
                                           /*cubin=*/false),
                                 kernelJson("sync80", "fwd", "bf16", 128,
                                            "causal", "sm_80", false),
                                 kernelJson("bwd", "bwd", "bf16", 128, "causal",
                                            "sm_90a", true),
                                 wgmmaBwdJson("bwd_wgmma"),
                                 kernelJson("only_sync", "fwd", "bf16", 64,
                                            "none", "sm_90a", true)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
  }
  static fa_kernel_query causal(int cc, fa_mma mma) {
    fa_kernel_query q = query(FA_DTYPE_BF16, 128, FA_MASK_CAUSAL, cc);
    q.mma = mma;
    return q;
  }
};

TEST_F(FindMma, PrefersWgmmaOnSm90) {
  // Even as PTX against a native mma.sync cubin.
  EXPECT_EQ(find(causal(90, FA_MMA_ANY)), "wgmma");
  // sm_90a code does not run elsewhere.
  EXPECT_EQ(find(causal(80, FA_MMA_ANY)), "sync80");
  EXPECT_EQ(find(causal(100, FA_MMA_ANY)), "sync80");
}

TEST_F(FindMma, PrefersWgmmaBackwardOnSm90) {
  fa_kernel_query q = causal(90, FA_MMA_ANY);
  q.direction = FA_DIRECTION_BWD;
  EXPECT_EQ(find(q), "bwd_wgmma");
  q.mma = FA_MMA_SYNC;
  EXPECT_EQ(find(q), "bwd");
  q.mma = FA_MMA_WGMMA;
  EXPECT_EQ(find(q), "bwd_wgmma");
  // Both are sm_90a builds.
  q.compute_capability = 80;
  q.mma = FA_MMA_ANY;
  find(q, FA_ERROR_UNSUPPORTED);
}

TEST_F(FindMma, CallerForcesTheInstructions) {
  EXPECT_EQ(find(causal(90, FA_MMA_SYNC)), "sync90a");
  EXPECT_EQ(find(causal(90, FA_MMA_WGMMA)), "wgmma");
  EXPECT_EQ(find(causal(80, FA_MMA_SYNC)), "sync80");
  find(causal(80, FA_MMA_WGMMA), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("mma=wgmma only for targets sm_90a, none of "
                             "which runs on sm_80"),
            std::string::npos)
      << lastError();
}

TEST_F(FindMma, ForcedWgmmaWithoutSuchKernel) {
  fa_kernel_query q = query(FA_DTYPE_BF16, 64, FA_MASK_NONE, 90);
  EXPECT_EQ(find(q), "only_sync");
  q.mma = FA_MMA_WGMMA;
  find(q, FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("no kernel for fwd bf16 d=64 dv=64 mask=none "
                             "mma=wgmma"),
            std::string::npos)
      << lastError();
  // The listing marks the wgmma kernels.
  EXPECT_NE(lastError().find("fwd bf16 d=128 dv=128 mask=causal mma=wgmma "
                             "(sm_90a)"),
            std::string::npos)
      << lastError();
}

TEST_F(FindMma, InvalidMma) {
  find(causal(90, static_cast<fa_mma>(7)), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("mma is 7"), std::string::npos) << lastError();
}

/// A d128 bf16 wgmma forward entry with key tile `bkv`, on a persistent grid
/// or one CTA per query tile.
static std::string gridKernel(const std::string &tag, int bkv, bool persistent,
                              const std::string &mask = "none") {
  std::vector<MapJson> maps = abiMaps();
  maps[1].box = maps[2].box = "[64, " + std::to_string(bkv) + ", 1]";
  std::string k = wgmmaJson(tag, "bf16", 128, mask, true, maps);
  const std::string field = "\"block_kv\": 128";
  k.replace(k.find(field), field.size(),
            "\"block_kv\": " + std::to_string(bkv));
  if (persistent) {
    const std::string entry = "\"shared_bytes\": 163840}";
    k.replace(k.find(entry), entry.size(),
              "\"shared_bytes\": 163856, \"grid\": \"persistent\"}");
  }
  return k;
}

/// The tag of the kernel fa_kernel_find_for_keys picks for nk keys.
static std::string tagForKeys(const fa_bundle *b, const fa_kernel_query &q,
                              int64_t nk) {
  const fa_kernel *k = nullptr;
  EXPECT_EQ(fa_kernel_find_for_keys(b, &q, nk, &k), FA_SUCCESS) << lastError();
  fa_kernel_info info;
  return k && fa_kernel_get_info(k, &info) == FA_SUCCESS ? info.tag : "";
}

/// A bundle of three `mask` d128 forwards: persistent block_kv 128 ("p128"),
/// one CTA per tile at 192 ("k192") and at 128 ("k128").
static void loadThreeTiles(const char *name, const std::string &mask,
                           fa_bundle **b) {
  ASSERT_EQ(loadText(name,
                     manifest({gridKernel("p128", 128, true, mask),
                               gridKernel("k192", 192, false, mask),
                               gridKernel("k128", 128, false, mask)},
                              "5"),
                     b),
            FA_SUCCESS)
      << lastError();
}

/// One config on both grids: a persistent kernel saves a CTA's prologue and
/// epilogue per query tile (64 key columns in the model) but runs each key
/// tile 3% slower, so it wins for short rows, and one CTA per tile wins for
/// long ones, at a wider tile or the same.
TEST(FindTiles, PicksThePersistentGridForShortRows) {
  fa_bundle *b = nullptr;
  loadThreeTiles("grids", "none", &b);
  ASSERT_NE(b, nullptr);
  fa_kernel_query q = query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 90);
  q.mma = FA_MMA_WGMMA;
  auto pick = [&](int64_t nk) { return tagForKeys(b, q, nk); };
  EXPECT_EQ(pick(0), "k192");    // unknown length: long rows
  EXPECT_EQ(pick(512), "p128");  // 4 x 164.8 < 3 x 224 + 64
  EXPECT_EQ(pick(1024), "p128"); // 8 x 164.8 = 1318 < 6 x 224 + 64 = 1408
  EXPECT_EQ(pick(2048), "k192"); // 16 x 164.8 = 2637 > 11 x 224 + 64 = 2528
  EXPECT_EQ(pick(4096), "k192");
  fa_bundle_free(b);
  ASSERT_EQ(loadText("grids_same_tile",
                     manifest({gridKernel("p128", 128, true),
                               gridKernel("k128", 128, false)},
                              "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(pick(0), "k128");
  EXPECT_EQ(pick(1664), "p128"); // 13 x 164.8 = 2142 < 13 x 160 + 64 = 2144
  EXPECT_EQ(pick(1792), "k128"); // 14 x 164.8 = 2307 > 14 x 160 + 64 = 2304
  fa_bundle_free(b);
}

/// Under a causal mask a query tile reads half the keys on average, plus a
/// ragged, masked diagonal tile (RowKeyBounds): block_kv 128 up to 2k keys,
/// 192 from 4k, and the persistent grid (6% per tile there) up to 1k.
TEST(FindTiles, CausalRowsHalveTheKeysAndPayTheDiagonal) {
  fa_bundle *b = nullptr;
  loadThreeTiles("causal", "causal", &b);
  ASSERT_NE(b, nullptr);
  fa_kernel_query q = query(FA_DTYPE_BF16, 128, FA_MASK_CAUSAL, 90);
  q.mma = FA_MMA_WGMMA;
  auto pick = [&](int64_t nk) { return tagForKeys(b, q, nk); };
  // Tiles (Nk + 128) / 2 / block_kv (+ 1/3 at 192) x (block_kv + 32),
  // x 1.06 persistent, + 64 one CTA per tile, + block_kv / 2.
  EXPECT_EQ(pick(0), "k192");
  EXPECT_EQ(pick(512), "p128");  // 2.5 x 169.6 + 64 = 488 < 528 < 608
  EXPECT_EQ(pick(1024), "p128"); // 4.5 x 169.6 + 64 = 827 < 848 < 907
  EXPECT_EQ(pick(2048), "k128"); // 8.5 x 160 + 128 = 1488 < 1504 (k192)
  EXPECT_EQ(pick(4096), "k192"); // 11.33 x 224 + 160 = 2699 < 2768 (k128)
  EXPECT_EQ(pick(16384), "k192");
  fa_bundle_free(b);
}

/// A d128 bf16 wgmma forward of 192-row query tiles (three consumer
/// warpgroups, 512 threads), key tile 128, one CTA per tile.
static std::string rows192Kernel(const std::string &tag,
                                 const std::string &mask) {
  std::vector<MapJson> maps = abiMaps();
  maps[0].box = "[64, 192, 1]";
  std::string k = wgmmaJson(tag, "bf16", 128, mask, true, maps);
  for (auto [from, to] : {std::pair<std::string, std::string>{
                              "\"block_q\": 128", "\"block_q\": 192"},
                          {"\"warps\": 12", "\"warps\": 16"},
                          {"\"threads\": 384", "\"threads\": 512"}})
    k.replace(k.find(from), from.size(), to);
  return k;
}

/// 192-row tiles run a key tile in 1.38 times a 128-row one's time (0.92 per
/// row) and leave a more ragged last tile (Nq taken as Nk): they win from
/// 2k keys on, against both grids, with and without a causal mask.
TEST(FindTiles, ThreeConsumerTilesWinLongRows) {
  for (const char *mask : {"none", "causal"}) {
    fa_bundle *b = nullptr;
    ASSERT_EQ(loadText(std::string("rows192_") + mask,
                       manifest({gridKernel("p128", 128, true, mask),
                                 gridKernel("k128", 128, false, mask),
                                 rows192Kernel("q192", mask)},
                                "5"),
                       &b),
              FA_SUCCESS)
        << lastError();
    bool causal = std::string(mask) == "causal";
    fa_kernel_query q =
        query(FA_DTYPE_BF16, 128, causal ? FA_MASK_CAUSAL : FA_MASK_NONE, 90);
    q.mma = FA_MMA_WGMMA;
    auto pick = [&](int64_t nk) { return tagForKeys(b, q, nk); };
    // Unknown length: per row and key, 160 x 0.96 x 1.38 / 192 < 160 x 0.96
    // / 128.
    EXPECT_EQ(pick(0), "q192") << mask;
    // 1k maskless: 8 tiles x 8 x 158.2 = 10125 (p128) < 6 x (8 x 153.6 +
    // 64) x 1.38 = 10704; causal: 8 x (4.5 x 162.8 + 64) = 6373 < 6 x (5 x
    // 153.6 + 128) x 1.38 = 7419.
    EXPECT_EQ(pick(1024), "p128") << mask;
    // 2k maskless: 11 x (16 x 153.6 + 64) x 1.38 = 38278 < 16 x 16 x 158.2
    // = 40500; causal: 11 x (9 x 153.6 + 128) x 1.38 = 22929 < 16 x (8.5 x
    // 153.6 + 128) = 22938 (k128).
    EXPECT_EQ(pick(2048), "q192") << mask;
    EXPECT_EQ(pick(16384), "q192") << mask;
    fa_bundle_free(b);
  }
}

/// One config at two key tiles: the sequence length picks the tile whose key
/// loop (tiles x (block_kv + 32)) costs least.
TEST(FindTiles, PicksTheKeyTileBySequenceLength) {
  auto tile = [](const std::string &tag, int bkv) {
    std::string k = kernelJson(tag, "fwd", "bf16", 128, "none", "sm_90a", true);
    const std::string field = "\"block_kv\": 64";
    k.replace(k.find(field), field.size(),
              "\"block_kv\": " + std::to_string(bkv));
    return k;
  };
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("tiles", manifest({tile("k128", 128), tile("k192", 192)}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = query(FA_DTYPE_BF16, 128, FA_MASK_NONE, 90);
  auto pick = [&](int64_t nk) { return tagForKeys(b, q, nk); };
  EXPECT_EQ(pick(0), "k192");    // unknown length: the widest tile
  EXPECT_EQ(pick(128), "k128");  // 1 x 160 < 1 x 224
  EXPECT_EQ(pick(192), "k192");  // 2 x 160 > 1 x 224
  EXPECT_EQ(pick(1024), "k128"); // 8 x 160 = 1280 < 6 x 224 = 1344
  EXPECT_EQ(pick(2048), "k192"); // 16 x 160 = 2560 > 11 x 224 = 2464
  EXPECT_EQ(pick(8192), "k192");
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
  fa_kernel_info info;
  fa_kernel_get_info(k, &info);
  EXPECT_STREQ(info.tag, "k192");
  EXPECT_EQ(fa_kernel_find_for_keys(b, &q, -5, &k), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("nk is -5"), std::string::npos) << lastError();
  fa_bundle_free(b);
}

//===----------------------------------------------------------------------===//
// Argument validation
//===----------------------------------------------------------------------===//

/// Well-formed contiguous bf16 arguments at the fake addresses 0-10 for
/// these shapes (scale 1/8): each test breaks one thing.
void wellFormedArgs(fa_attention_args &fwd, fa_attention_backward_args &bwd,
                    int64_t b, int64_t h, int64_t hkv, int64_t nq, int64_t nk,
                    int64_t d, int64_t dv) {
  fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
  fwd.q = tensor(addr(0), bf, {b, h, nq, d});
  fwd.k = tensor(addr(1), bf, {b, hkv, nk, d});
  fwd.v = tensor(addr(2), bf, {b, hkv, nk, dv});
  fwd.o = tensor(addr(3), bf, {b, h, nq, dv});
  fwd.lse = tensor(addr(4), f32, {b, h, nq});
  fwd.scale = 0.125f;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.o = fwd.o;
  bwd.lse = fwd.lse;
  bwd.d_o = tensor(addr(5), bf, {b, h, nq, dv});
  bwd.dq = tensor(addr(6), bf, {b, h, nq, d});
  bwd.dk = tensor(addr(7), bf, {b, hkv, nk, d});
  bwd.dv = tensor(addr(8), bf, {b, hkv, nk, dv});
  bwd.delta = tensor(addr(9), f32, {b, h, nq});
  bwd.dq_accum = tensor(addr(10), f32, {b, h, nq, d});
  bwd.scale = 0.125f;
}

class Validate : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300, D = 64;

  void SetUp() override {
    ASSERT_EQ(loadText("validate",
                       manifest({kernelJson("f", "fwd", "bf16", 64, "none",
                                            "sm_90a", true),
                                 kernelJson("b", "bwd", "bf16", 64, "none",
                                            "sm_90a", true)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fwdKernel = fa_bundle_kernel_at(bundle, 0);
    bwdKernel = fa_bundle_kernel_at(bundle, 1);
    wellFormedArgs(fwd, bwd, B, H, Hkv, Nq, Nk, D, D);
  }
  void TearDown() override { fa_bundle_free(bundle); }

  /// Expects the forward check to fail with `expect` in the message.
  void rejectFwd(const fa_attention_args &a, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }
  void rejectBwd(const fa_attention_backward_args &a,
                 const std::string &expect) {
    EXPECT_EQ(fa_attention_backward_check(bwdKernel, &a),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *fwdKernel = nullptr, *bwdKernel = nullptr;
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
};

TEST_F(Validate, ValidArgumentsPass) {
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &fwd), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(lastError(), "");
  EXPECT_EQ(fa_attention_backward_check(bwdKernel, &bwd), FA_SUCCESS)
      << lastError();
  // MQA and Nq = 1 are valid shapes.
  fa_attention_args a = fwd;
  a.k = tensor(addr(1), FA_DTYPE_BF16, {B, 1, Nk, D});
  a.v = tensor(addr(2), FA_DTYPE_BF16, {B, 1, Nk, D});
  a.q = tensor(addr(0), FA_DTYPE_BF16, {B, H, 1, D});
  a.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, 1, D});
  a.lse = tensor(addr(4), FA_DTYPE_F32, {B, H, 1});
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a), FA_SUCCESS)
      << lastError();
}

TEST_F(Validate, NullArguments) {
  EXPECT_EQ(fa_attention_forward_check(nullptr, &fwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  fa_attention_args a = fwd;
  a.v.data = 0;
  rejectFwd(a, "v.data is null");
}

TEST_F(Validate, WrongDirection) {
  EXPECT_EQ(fa_attention_forward_check(bwdKernel, &fwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is a backward kernel"), std::string::npos);
  EXPECT_EQ(fa_attention_backward_check(fwdKernel, &bwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is a forward kernel"), std::string::npos);
}

TEST_F(Validate, Dtypes) {
  fa_attention_args a = fwd;
  a.k.dtype = FA_DTYPE_F16;
  rejectFwd(a, "k.dtype is f16, expected bf16");
  a = fwd;
  a.lse.dtype = FA_DTYPE_BF16;
  rejectFwd(a, "lse.dtype is bf16, expected f32");
  a = fwd;
  a.q.dtype = static_cast<fa_dtype>(7);
  rejectFwd(a, "q.dtype is <invalid dtype 7>");
  fa_attention_backward_args b = bwd;
  b.dq_accum.dtype = FA_DTYPE_BF16;
  rejectBwd(b, "dq_accum.dtype is bf16, expected f32");
}

TEST_F(Validate, ShapesAgainstConfig) {
  fa_attention_args a = fwd;
  a.q = tensor(addr(0), FA_DTYPE_BF16, {B, H, Nq, 128});
  rejectFwd(a, "has head dim 128, but kernel 'f' was built for head dim 64");
  a = fwd;
  a.v = tensor(addr(2), FA_DTYPE_BF16, {B, Hkv, Nk, 128});
  a.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, Nq, 128});
  rejectFwd(a, "has value head dim 128, but kernel 'f' was built for 64");
  a = fwd;
  a.q.rank = 3;
  rejectFwd(a, "q.rank is 3, expected 4");
}

TEST_F(Validate, ShapesAgainstEachOther) {
  fa_attention_args a = fwd;
  a.k = tensor(addr(1), FA_DTYPE_BF16, {B, 3, Nk, D});
  a.v = tensor(addr(2), FA_DTYPE_BF16, {B, 3, Nk, D});
  rejectFwd(a, "q has 8 heads and k has 3");
  a = fwd;
  a.k = tensor(addr(1), FA_DTYPE_BF16, {B + 1, Hkv, Nk, D});
  rejectFwd(a, "k.shape is [3,2,300,64], expected [2,2,300,64]");
  a = fwd;
  a.v = tensor(addr(2), FA_DTYPE_BF16, {B, Hkv, Nk - 1, D});
  rejectFwd(a, "v.shape is [2,2,299,64], expected [2,2,300,64]");
  a = fwd;
  a.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, Nk, D});
  rejectFwd(a, "o.shape is [2,8,300,64], expected [2,8,100,64]");
  a = fwd;
  a.lse = tensor(addr(4), FA_DTYPE_F32, {B, Hkv, Nq});
  rejectFwd(a, "lse.shape is [2,2,100], expected [2,8,100]");
  fa_attention_backward_args b = bwd;
  b.dk = tensor(addr(7), FA_DTYPE_BF16, {B, H, Nk, D});
  rejectBwd(b, "dk.shape is [2,8,300,64], expected [2,2,300,64]");
  b = bwd;
  b.delta = tensor(addr(9), FA_DTYPE_F32, {B, H, Nk});
  rejectBwd(b, "delta.shape is [2,8,300], expected [2,8,100]");
  b = bwd;
  b.d_o = tensor(addr(5), FA_DTYPE_BF16, {B, H, Nq, 32});
  rejectBwd(b, "d_o.shape is [2,8,100,32], expected [2,8,100,64]");
}

TEST_F(Validate, SizesPositiveAndWithin32Bits) {
  fa_attention_args a = fwd;
  a.q = tensor(addr(0), FA_DTYPE_BF16, {B, H, 0, D});
  rejectFwd(a, "has size 0 in dimension 2");
  a = fwd;
  a.q.shape[0] = -1;
  rejectFwd(a, "has size -1 in dimension 0");
  a = fwd;
  a.k = tensor(addr(1), FA_DTYPE_BF16, {B, Hkv, int64_t(1) << 31, D});
  rejectFwd(a, "has size 2147483648 in dimension 2");
  a = fwd;
  a.k = tensor(addr(1), FA_DTYPE_BF16, {B, Hkv, int64_t(1) << 24, D});
  rejectFwd(a, "more than 2^31-1 elements");
  a = fwd;
  a.q = tensor(addr(0), FA_DTYPE_BF16, {70000, H, 1, D});
  a.k = tensor(addr(1), FA_DTYPE_BF16, {70000, Hkv, 1, D});
  a.v = tensor(addr(2), FA_DTYPE_BF16, {70000, Hkv, 1, D});
  rejectFwd(a, "exceeds the grid limit of 65535");
}

TEST_F(Validate, Contiguity) {
  fa_attention_args a = fwd;
  // A transposed [B,Nq,H,D] view of q.
  a.q.strides[1] = D;
  a.q.strides[2] = H * D;
  rejectFwd(a, "q.strides are [51200,64,512,1] for shape [2,8,100,64], "
               "expected [51200,6400,64,1] (contiguous row-major)");
  a = fwd;
  a.lse.strides[2] = 2;
  rejectFwd(a, "lse.strides are");
}

/// A [B,H,N,D] view of a [B,N,H,D] buffer (x.view(B,N,H,D).transpose(1,2)).
void transposeHeads(fa_tensor &t) {
  int64_t h = t.shape[1], n = t.shape[2], d = t.shape[3];
  t.strides[0] = n * h * d;
  t.strides[1] = d;
  t.strides[2] = h * d;
  t.strides[3] = 1;
}

/// A forward with "stride_param" (bundle version 7): q, k, v and o may be
/// any views with a unit last stride; the checks of docs/ABI.md.
TEST(StridedValidate, ViewsAndTheirLimits) {
  const int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300, D = 64;
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(loadText("strided",
                     manifest({kernelJson("f", "fwd", "bf16", 64, "none",
                                          "sm_90a", true,
                                          R"(, "stride_param": 11)")},
                              "7"),
                     &bundle),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(bundle, 0);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_EQ(info.strided, 1);
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
  wellFormedArgs(fwd, bwd, B, H, Hkv, Nq, Nk, D, D);
  EXPECT_EQ(fa_attention_forward_check(k, &fwd), FA_SUCCESS) << lastError();
  fa_attention_args a = fwd;
  for (fa_tensor *t : {&a.q, &a.k, &a.v, &a.o})
    transposeHeads(*t);
  EXPECT_EQ(fa_attention_forward_check(k, &a), FA_SUCCESS) << lastError();
  auto reject = [&](const fa_attention_args &bad, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_check(k, &bad), FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  };
  fa_attention_args bad = a;
  bad.k.strides[3] = 2;
  reject(bad, "k.strides are [38400,64,128,2]; the last dimension's stride "
              "must be 1");
  bad = a;
  bad.v.strides[2] = 68; // rows 136 bytes apart: not 16-byte aligned
  reject(bad, "v.strides are [38400,64,68,1]: stride 68 of dimension 2 must "
              "be positive and a multiple of 8 elements");
  bad = a;
  bad.q.strides[0] = 0; // a broadcast batch
  reject(bad, "stride 0 of dimension 0 must be positive");
  bad = a;
  bad.q.strides[0] = int64_t(1) << 62;
  reject(bad, "address more than 2^63 bytes");
  // Inputs may share memory (one K/V head for every batch); the output may
  // not: two of its elements at one address race.
  bad = a;
  bad.k.strides[0] = 8;
  EXPECT_EQ(fa_attention_forward_check(k, &bad), FA_SUCCESS) << lastError();
  bad = a;
  bad.o.strides[1] = 8;
  reject(bad, "o.strides [51200,8,512,1] for shape [2,8,100,64] put two "
              "elements of the output at one address");
  // The overlap check uses the extent the strides address.
  bad = a;
  bad.o.data = bad.q.data + 2 * 64;
  reject(bad, "output o");
  // LSE stays fa's, contiguous.
  bad = a;
  bad.lse.strides[1] = 2 * Nq;
  reject(bad, "lse.strides are");
  fa_bundle_free(bundle);
}

TEST(StridedValidate, ManifestField) {
  auto strided = [](const std::string &param) {
    return kernelJson("f", "fwd", "bf16", 64, "none", "sm_90a", true,
                      R"(, "stride_param": )" + param);
  };
  expectRejected("stride-v6", manifest({strided("11")}, "6"),
                 "strided kernels (field 'stride_param') need bundle version "
                 "7, the manifest says 6");
  expectRejected("stride-param", manifest({strided("12")}, "7"),
                 "field 'stride_param' = 12, expected 11");
  // A backward's strides follow fa_bwd's 15 parameters.
  expectRejected(
      "stride-bwd",
      manifest({kernelJson("b", "bwd", "bf16", 64, "none", "sm_90a", true,
                           R"(, "stride_param": 11)")},
               "7"),
      "field 'stride_param' = 11, expected 15 (the strides follow every "
      "other parameter of fa_bwd)");
}

/// A backward with "stride_param": q, k, v, o, d_o may be any views with a
/// unit last stride and dq, dk, dv any layout whose elements are distinct;
/// LSE and the workspaces stay contiguous.
TEST(StridedValidate, BackwardViews) {
  const int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300, D = 64;
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(loadText("strided-bwd",
                     manifest({kernelJson("b", "bwd", "bf16", 64, "none",
                                          "sm_90a", true,
                                          R"(, "stride_param": 15)")},
                              "7"),
                     &bundle),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(bundle, 0);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_EQ(info.strided, 1);
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
  wellFormedArgs(fwd, bwd, B, H, Hkv, Nq, Nk, D, D);
  EXPECT_EQ(fa_attention_backward_check(k, &bwd), FA_SUCCESS) << lastError();
  fa_attention_backward_args a = bwd;
  for (fa_tensor *t : {&a.q, &a.k, &a.v, &a.o, &a.d_o, &a.dq, &a.dk, &a.dv})
    transposeHeads(*t);
  EXPECT_EQ(fa_attention_backward_check(k, &a), FA_SUCCESS) << lastError();
  auto reject = [&](const fa_attention_backward_args &bad,
                    const std::string &expect) {
    EXPECT_EQ(fa_attention_backward_check(k, &bad), FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  };
  fa_attention_backward_args bad = a;
  bad.d_o.strides[3] = 2;
  reject(bad, "d_o.strides are [51200,64,512,2]; the last dimension's "
              "stride must be 1");
  bad = a;
  bad.o.strides[2] = 68;
  reject(bad, "o.strides are [51200,64,68,1]: stride 68 of dimension 2 must "
              "be positive and a multiple of 8 elements");
  // Inputs may share memory; the gradients may not put two elements at one
  // address, nor overlap another tensor.
  bad = a;
  bad.k.strides[0] = 8;
  EXPECT_EQ(fa_attention_backward_check(k, &bad), FA_SUCCESS) << lastError();
  bad = a;
  bad.dk.strides[1] = 8;
  reject(bad, "dk.strides [38400,8,128,1] for shape [2,2,300,64] put two "
              "elements of the output at one address");
  bad = a;
  bad.dv.strides[0] = 0;
  reject(bad, "stride 0 of dimension 0 must be positive");
  bad = a;
  bad.dq.data = bad.q.data + 2 * 64;
  reject(bad, "output dq");
  // LSE, Delta and dq_accum stay contiguous.
  bad = a;
  bad.dq_accum.strides[2] = 2 * D;
  reject(bad, "dq_accum.strides are");
  fa_bundle_free(bundle);
}

/// A backward without "stride_param" (bundles before strided backwards)
/// takes contiguous tensors only.
TEST(StridedValidate, BackwardWithoutStrides) {
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(loadText("contiguous-bwd",
                     manifest({kernelJson("b", "bwd", "bf16", 64, "none",
                                          "sm_90a", true)},
                              "7"),
                     &bundle),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(bundle, 0);
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
  wellFormedArgs(fwd, bwd, 2, 8, 2, 100, 300, 64, 64);
  transposeHeads(bwd.dq);
  EXPECT_EQ(fa_attention_backward_check(k, &bwd), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("dq.strides are"), std::string::npos)
      << lastError();
  fa_bundle_free(bundle);
}

TEST_F(Validate, Alignment) {
  fa_attention_args a = fwd;
  a.k.data += 8;
  rejectFwd(a, "k.data 0x7f0100000008 is not 16-byte aligned");
  fa_attention_backward_args b = bwd;
  b.dq_accum.data += 4;
  rejectBwd(b, "dq_accum.data");
}

/// Kernels for head dims that are not multiples of 8 access their rows only
/// as wide as the rows are aligned, so their tensors need only that alignment
/// (2·gcd(D, 8) bytes for bf16/f16, 4·gcd(D, 4) for the f32 dq_accum); every
/// other tensor, and every tensor of the other kernels, still needs 16.
class NarrowAlignment : public ::testing::Test {
protected:
  static constexpr int64_t B = 1, H = 2, Nq = 10, Nk = 12;

  void TearDown() override { fa_bundle_free(bundle); }

  /// A fwd and a bwd bf16 kernel for head dims d and dv.
  void load(int d, int dv) {
    auto kernel = [&](const char *tag, const char *dir) {
      std::string k = kernelJson(tag, dir, "bf16", dv, "none", "sm_90a", true);
      std::string from = R"("head_dim": )" + std::to_string(dv) + ",";
      k.replace(k.find(from), from.size(),
                R"("head_dim": )" + std::to_string(d) + ",");
      return k;
    };
    ASSERT_EQ(loadText("narrow",
                       manifest({kernel("f", "fwd"), kernel("b", "bwd")}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fwdKernel = fa_bundle_kernel_at(bundle, 0);
    bwdKernel = fa_bundle_kernel_at(bundle, 1);
    wellFormedArgs(fwd, bwd, B, H, H, Nq, Nk, d, dv);
  }

  /// The forward accepts `t` moved by `ok` bytes and rejects it moved by
  /// `bad` bytes with `expect` in the message.
  void fwdShift(fa_tensor fa_attention_args::*t, uint64_t ok, uint64_t bad,
                const std::string &expect) {
    fa_attention_args a = fwd;
    (a.*t).data += ok;
    EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a), FA_SUCCESS)
        << lastError();
    a = fwd;
    (a.*t).data += bad;
    EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos) << lastError();
  }
  void bwdShift(fa_tensor fa_attention_backward_args::*t, uint64_t ok,
                uint64_t bad, const std::string &expect) {
    fa_attention_backward_args a = bwd;
    (a.*t).data += ok;
    EXPECT_EQ(fa_attention_backward_check(bwdKernel, &a), FA_SUCCESS)
        << lastError();
    a = bwd;
    (a.*t).data += bad;
    EXPECT_EQ(fa_attention_backward_check(bwdKernel, &a),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos) << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *fwdKernel = nullptr, *bwdKernel = nullptr;
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
};

TEST_F(NarrowAlignment, D36Needs8Bytes) {
  load(36, 36);
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &fwd), FA_SUCCESS)
      << lastError();
  fwdShift(&fa_attention_args::q, 8, 4,
           "q.data 0x7f0000000004 is not 8-byte aligned (kernel 'f' reads and "
           "writes its rows of 36 bf16 elements 8 bytes at a time)");
  fwdShift(&fa_attention_args::k, 24, 2, "k.data 0x7f0100000002 is not 8-byte");
  fwdShift(&fa_attention_args::v, 8, 4, "v.data 0x7f0200000004 is not 8-byte");
  fwdShift(&fa_attention_args::o, 8, 4, "o.data 0x7f0300000004 is not 8-byte");
  // LSE rows are not head-dim rows: still 16 bytes.
  fwdShift(&fa_attention_args::lse, 16, 8,
           "lse.data 0x7f0400000008 is not 16-byte aligned");
  EXPECT_EQ(fa_attention_backward_check(bwdKernel, &bwd), FA_SUCCESS)
      << lastError();
  bwdShift(&fa_attention_backward_args::d_o, 8, 4, "d_o.data 0x7f0500000004");
  bwdShift(&fa_attention_backward_args::dq, 8, 4, "dq.data 0x7f0600000004");
  bwdShift(&fa_attention_backward_args::dk, 8, 4, "dk.data 0x7f0700000004");
  bwdShift(&fa_attention_backward_args::dv, 8, 4, "dv.data 0x7f0800000004");
  // dq_accum rows of 36 f32 stay 16-byte aligned.
  bwdShift(&fa_attention_backward_args::dq_accum, 16, 8,
           "dq_accum.data 0x7f0a00000008 is not 16-byte aligned");
  bwdShift(&fa_attention_backward_args::delta, 16, 8,
           "delta.data 0x7f0900000008 is not 16-byte aligned");
}

TEST_F(NarrowAlignment, D50Needs4BytesAndDqAccum8) {
  load(50, 50);
  fwdShift(&fa_attention_args::q, 4, 2, "q.data 0x7f0000000002 is not 4-byte");
  bwdShift(&fa_attention_backward_args::dq_accum, 8, 4,
           "dq_accum.data 0x7f0a00000004 is not 8-byte aligned (kernel 'b' "
           "reads and writes its rows of 50 f32 elements 8 bytes at a time)");
}

TEST_F(NarrowAlignment, OddDNeeds2BytesAndDqAccum4) {
  load(33, 33);
  fwdShift(&fa_attention_args::q, 2, 1, "q.data 0x7f0000000001 is not 2-byte");
  fwdShift(&fa_attention_args::o, 6, 3, "o.data 0x7f0300000003 is not 2-byte");
  bwdShift(&fa_attention_backward_args::dq_accum, 4, 2,
           "dq_accum.data 0x7f0a00000002 is not 4-byte");
}

TEST_F(NarrowAlignment, DAndDvApart) {
  // D = 64 keeps q/k/dq/dk/dq_accum at 16 bytes; Dv = 20 narrows v/o/d_o/dv.
  load(64, 20);
  fwdShift(&fa_attention_args::q, 16, 8,
           "q.data 0x7f0000000008 is not 16-byte aligned");
  fwdShift(&fa_attention_args::v, 8, 4, "v.data 0x7f0200000004 is not 8-byte");
  bwdShift(&fa_attention_backward_args::dk, 16, 8,
           "dk.data 0x7f0700000008 is not 16-byte aligned");
  bwdShift(&fa_attention_backward_args::dv, 8, 4, "dv.data 0x7f0800000004");
  bwdShift(&fa_attention_backward_args::dq_accum, 16, 8,
           "dq_accum.data 0x7f0a00000008 is not 16-byte aligned");
}

TEST_F(NarrowAlignment, MultiplesOf8Keep16Bytes) {
  // D = 40: rows are 80 bytes, so every contiguous row can be 16-byte
  // aligned and the kernel uses 16-byte accesses.
  load(40, 40);
  fwdShift(&fa_attention_args::q, 16, 8,
           "q.data 0x7f0000000008 is not 16-byte aligned");
  bwdShift(&fa_attention_backward_args::dv, 16, 8,
           "dv.data 0x7f0800000008 is not 16-byte aligned");
}

TEST_F(Validate, Scale) {
  for (float s : {0.0f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    fa_attention_args a = fwd;
    a.scale = s;
    rejectFwd(a, "must be finite and non-zero");
  }
  fa_attention_args a = fwd;
  a.scale = -0.5f; // negative scales are legal
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a), FA_SUCCESS);
}

TEST_F(Validate, OutputsMustNotOverlap) {
  fa_attention_args a = fwd;
  a.o.data = a.q.data + 64; // inside q
  rejectFwd(a, "output o");
  EXPECT_NE(lastError().find("overlaps q"), std::string::npos) << lastError();
  fa_attention_backward_args b = bwd;
  b.dk.data = b.dv.data;
  rejectBwd(b, "overlaps");
  // Inputs may share memory (e.g. K and V views of one buffer are separate
  // tensors here, but the same q passed twice is harmless).
  b = bwd;
  b.d_o.data = b.o.data;
  EXPECT_EQ(fa_attention_backward_check(bwdKernel, &b), FA_SUCCESS)
      << lastError();
}

TEST_F(Validate, OutputsMayTouchInputs) {
  // One buffer cut into q | o: adjacent ranges do not overlap.
  fa_attention_args a = fwd;
  a.o.data = a.q.data + uint64_t(B * H * Nq * D * 2);
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &a), FA_SUCCESS)
      << lastError();
}

TEST_F(Validate, ValueHeadDimOfTheKernel) {
  // A narrower v than the kernel's Dv would make it read past v's rows.
  fa_attention_args a = fwd;
  a.v = tensor(addr(2), FA_DTYPE_BF16, {B, Hkv, Nk, D / 2});
  a.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, Nq, D / 2});
  rejectFwd(a, "has value head dim 32");
  fa_attention_backward_args b = bwd;
  b.v = tensor(addr(2), FA_DTYPE_BF16, {B, Hkv, Nk, 2 * D});
  rejectBwd(b, "has value head dim 128");
}

TEST_F(Validate, BackwardGrids) {
  // docs/ABI.md: pre and post over query blocks, the main kernel over key
  // blocks times dsplit column slices.
  unsigned g[3][3];
  ASSERT_EQ(fa_attention_backward_grids(bwdKernel, &bwd, g), FA_SUCCESS)
      << lastError();
  unsigned one[3][3] = {{2, H, B}, {5, Hkv, B}, {2, H, B}};
  for (int e = 0; e < 3; ++e)
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(g[e][i], one[e][i]) << "entry " << e << " dim " << i;

  fa_bundle *split = nullptr;
  ASSERT_EQ(loadText("dsplit",
                     manifest({kernelJson("b2", "bwd", "bf16", 64, "none",
                                          "sm_90a", true,
                                          R"(, "dsplit": 2)")}),
                     &split),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(split, 0);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_EQ(info.dsplit, 2);
  ASSERT_EQ(fa_attention_backward_grids(k, &bwd, g), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(g[1][0], 10u); // ceil(300 / 64) key blocks × 2 slices
  EXPECT_EQ(g[1][1], unsigned(Hkv));
  EXPECT_EQ(g[0][0], 2u);
  EXPECT_EQ(g[2][0], 2u);
  // Arguments are validated first.
  fa_attention_backward_args bad = bwd;
  bad.dq.data = 0;
  EXPECT_EQ(fa_attention_backward_grids(k, &bad, g), FA_ERROR_INVALID_ARGUMENT);
  fa_bundle_free(split);
}

TEST_F(Validate, BackwardWorkspaces) {
  fa_attention_backward_args b = bwd;
  b.dq_accum = tensor(addr(10), FA_DTYPE_F32, {B, H, Nq});
  rejectBwd(b, "dq_accum.rank is 3, expected 4");
  b = bwd;
  b.delta.data = 0;
  rejectBwd(b, "delta.data is null");
}

//===----------------------------------------------------------------------===//
// Tensor maps of the wgmma forward
//===----------------------------------------------------------------------===//

class TensorMaps : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300;

  void load(const std::string &dtype, int d, const std::vector<MapJson> &maps,
            const std::string &extra = "") {
    ASSERT_EQ(
        loadText("maps",
                 manifest({wgmmaJson("w", dtype, d, "none", true, maps, extra),
                           kernelJson("s", "fwd", dtype, d, "none", "sm_90a",
                                      true)}),
                 &bundle),
        FA_SUCCESS)
        << lastError();
    wgmma = fa_bundle_kernel_at(bundle, 0);
    sync = fa_bundle_kernel_at(bundle, 1);
    fa_dtype dt = dtype == "bf16" ? FA_DTYPE_BF16 : FA_DTYPE_F16;
    args.q = tensor(addr(0), dt, {B, H, Nq, d});
    args.k = tensor(addr(1), dt, {B, Hkv, Nk, d});
    args.v = tensor(addr(2), dt, {B, Hkv, Nk, d});
    args.o = tensor(addr(3), dt, {B, H, Nq, d});
    args.lse = tensor(addr(4), FA_DTYPE_F32, {B, H, Nq});
    args.scale = 0.125f;
  }
  void TearDown() override { fa_bundle_free(bundle); }

  fa_bundle *bundle = nullptr;
  const fa_kernel *wgmma = nullptr, *sync = nullptr;
  fa_attention_args args{};
};

TEST_F(TensorMaps, AsTheAbiTableSays) {
  load("bf16", 128, abiMaps());
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  ASSERT_EQ(fa_attention_forward_tensor_maps(wgmma, &args, maps, &count),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 3);
  struct Want {
    const char *tensor;
    int param;
    uint64_t address, dims[3];
  } want[] = {{"q", 11, addr(0), {128, Nq, B * H}},
              {"k", 12, addr(1), {128, Nk, B * Hkv}},
              {"v", 13, addr(2), {128, Nk, B * Hkv}}};
  for (int i = 0; i < 3; ++i) {
    const fa_tensor_map_args &m = maps[i];
    const Want &w = want[i];
    SCOPED_TRACE(w.tensor);
    EXPECT_STREQ(m.tensor, w.tensor);
    EXPECT_EQ(m.param, w.param);
    EXPECT_EQ(m.data_type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    EXPECT_EQ(m.rank, 3u);
    EXPECT_EQ(m.global_address, w.address);
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(m.global_dim[j], w.dims[j]) << "dim " << j;
    EXPECT_EQ(m.global_strides[0], 2 * w.dims[0]);
    EXPECT_EQ(m.global_strides[1], 2 * w.dims[0] * w.dims[1]);
    EXPECT_EQ(m.box_dim[0], 64u);
    EXPECT_EQ(m.box_dim[1], 128u);
    EXPECT_EQ(m.box_dim[2], 1u);
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(m.element_strides[j], 1u);
    EXPECT_EQ(m.interleave, CU_TENSOR_MAP_INTERLEAVE_NONE);
    EXPECT_EQ(m.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    EXPECT_EQ(m.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    EXPECT_EQ(m.oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
}

TEST(BackwardTensorMaps, WarpSpecializedWgmma) {
  // q, k, v, do of docs/ABI.md for the warp-specialised wgmma backward; none
  // for the 256-thread one.
  constexpr int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300, D = 64;
  fa_bundle *bundle = nullptr;
  std::vector<MapJson> maps = wsMaps();
  ASSERT_EQ(loadText("bwd_maps",
                     manifest({wsBwdJson("ws", D, maps),
                               wgmmaBwdJson("w8", R"(, "head_dim": 64,
                                            "head_dim_v": 64)")}),
                     &bundle),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *ws = fa_bundle_kernel_at(bundle, 0);
  const fa_kernel *w8 = fa_bundle_kernel_at(bundle, 1);
  fa_attention_args unused{};
  fa_attention_backward_args a{};
  wellFormedArgs(unused, a, B, H, Hkv, Nq, Nk, D, D);

  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  ASSERT_EQ(fa_attention_backward_tensor_maps(ws, &a, out, &count), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 4);
  struct Want {
    const char *tensor;
    int param;
    uint64_t address, rows, planes, boxRows;
  } want[] = {{"q", 15, addr(0), Nq, B * H, 64},
              {"k", 16, addr(1), Nk, B * Hkv, 128},
              {"v", 17, addr(2), Nk, B * Hkv, 128},
              {"do", 18, addr(5), Nq, B * H, 64}};
  for (int i = 0; i < 4; ++i) {
    const fa_tensor_map_args &m = out[i];
    const Want &w = want[i];
    SCOPED_TRACE(w.tensor);
    EXPECT_STREQ(m.tensor, w.tensor);
    EXPECT_EQ(m.param, w.param);
    EXPECT_EQ(m.global_address, w.address);
    EXPECT_EQ(m.global_dim[0], uint64_t(D));
    EXPECT_EQ(m.global_dim[1], w.rows);
    EXPECT_EQ(m.global_dim[2], w.planes);
    EXPECT_EQ(m.global_strides[0], uint64_t(2 * D));
    EXPECT_EQ(m.global_strides[1], uint64_t(2 * D) * w.rows);
    EXPECT_EQ(m.box_dim[0], 64u);
    EXPECT_EQ(m.box_dim[1], w.boxRows);
    EXPECT_EQ(m.box_dim[2], 1u);
    EXPECT_EQ(m.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    EXPECT_EQ(m.oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  count = -1;
  ASSERT_EQ(fa_attention_backward_tensor_maps(w8, &a, out, &count), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(count, 0);
  // Arguments are validated first; a misaligned d_o fails the check (as
  // TMA would).
  fa_attention_backward_args bad = a;
  bad.d_o.data += 8;
  EXPECT_EQ(fa_attention_backward_tensor_maps(ws, &bad, out, &count),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(fa_attention_backward_tensor_maps(ws, &a, nullptr, &count),
            FA_ERROR_INVALID_ARGUMENT);
  fa_bundle_free(bundle);
}

TEST_F(TensorMaps, F16SmallKeyTiles) {
  std::vector<MapJson> maps = abiMaps();
  maps[1].box = maps[2].box = "[64, 64, 1]";
  maps[0].l2 = "128";
  load("f16", 64, maps, R"(, "block_kv": 64)");
  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS];
  int32_t count = 0;
  ASSERT_EQ(fa_attention_forward_tensor_maps(wgmma, &args, out, &count),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 3);
  EXPECT_EQ(out[0].data_type, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  EXPECT_EQ(out[0].l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  EXPECT_EQ(out[0].global_dim[0], 64u);
  EXPECT_EQ(out[0].global_strides[0], 128u);
  EXPECT_EQ(out[0].global_strides[1], 128u * Nq);
  EXPECT_EQ(out[0].box_dim[1], 128u);
  EXPECT_EQ(out[1].box_dim[1], 64u);
  EXPECT_EQ(out[2].box_dim[1], 64u);
  EXPECT_EQ(out[2].global_dim[2], uint64_t(B * Hkv));
}

TEST_F(TensorMaps, NoneForMmaSync) {
  load("bf16", 128, abiMaps());
  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  ASSERT_EQ(fa_attention_forward_tensor_maps(sync, &args, out, &count),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(count, 0);
}

TEST_F(TensorMaps, ArgumentsAreValidatedFirst) {
  load("bf16", 128, abiMaps());
  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  fa_attention_args a = args;
  a.v.data += 8;
  EXPECT_EQ(fa_attention_forward_tensor_maps(wgmma, &a, out, &count),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 0);
  EXPECT_NE(lastError().find("v.data 0x7f0200000008 is not 16-byte aligned"),
            std::string::npos)
      << lastError();
  a = args;
  a.q = tensor(addr(0), FA_DTYPE_BF16, {B, H, Nq, 64});
  EXPECT_EQ(fa_attention_forward_check(wgmma, &a), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("built for head dim 128"), std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_tensor_maps(wgmma, &args, nullptr, &count),
            FA_ERROR_INVALID_ARGUMENT);
  // Ragged lengths are fine: TMA zero-fills past Nq and Nk.
  a = args;
  a.q = tensor(addr(0), FA_DTYPE_BF16, {1, H, 5, 128});
  a.o = tensor(addr(3), FA_DTYPE_BF16, {1, H, 5, 128});
  a.lse = tensor(addr(4), FA_DTYPE_F32, {1, H, 5});
  a.k = tensor(addr(1), FA_DTYPE_BF16, {1, Hkv, 3, 128});
  a.v = tensor(addr(2), FA_DTYPE_BF16, {1, Hkv, 3, 128});
  ASSERT_EQ(fa_attention_forward_tensor_maps(wgmma, &a, out, &count),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(out[1].global_dim[1], 3u);
  EXPECT_EQ(out[0].global_dim[1], 5u);
}

//===----------------------------------------------------------------------===//
// The test fixture bundle built from test/Runtime/fixture (when nvcc exists)
//===----------------------------------------------------------------------===//

#ifdef FA_FIXTURE_BUNDLE
TEST(FixtureBundle, LoadsAndSelects) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(fa_bundle_load(FA_FIXTURE_BUNDLE, &b), FA_SUCCESS) << lastError();
  EXPECT_EQ(fa_bundle_kernel_count(b), 32);
  for (fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_F16})
    for (int d : {64, 128})
      for (fa_direction dir : {FA_DIRECTION_FWD, FA_DIRECTION_BWD}) {
        fa_kernel_query q = query(dt, d, FA_MASK_CAUSAL, 90);
        q.direction = dir;
        const fa_kernel *k = nullptr;
        ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
        fa_kernel_info info;
        fa_kernel_get_info(k, &info);
        EXPECT_EQ(std::string(info.tag).rfind("fixture_", 0), 0u);
      }
  fa_bundle_free(b);
}
#endif

} // namespace

TEST(Manifest, TensorMapsByValueNeedVersion5) {
  // Before version 5 the kernels read their maps from device memory the
  // runtime owned; this runtime passes them by value, so it rejects those
  // kernels instead of launching them with the wrong parameters.
  for (const char *version : {"1", "2", "3", "4"}) {
    expectRejected("maps_v4",
                   manifest({wgmmaJson("k", "bf16", 128, "none", true,
                                       abiMaps())},
                            version),
                   std::string("kernels[0]: kernels with tensor maps take "
                               "them by value since bundle version 5; this "
                               "manifest says ") +
                       version);
    expectRejected("ws_maps_v4", manifest({wsBwdJson("k", 128, wsMaps())}, "4"),
                   "rebuild the bundle with this release's fa-aot");
  }
  // Kernels without maps still load from any version.
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("sync_v4",
                     manifest({kernelJson("s", "fwd", "bf16", 64, "none",
                                          "sm_80", true)},
                              "4"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  ASSERT_EQ(loadText("maps_v5",
                     manifest({wgmmaJson("k", "bf16", 128, "none", true,
                                         abiMaps())},
                              "5"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
}

//===----------------------------------------------------------------------===//
// Split-KV decode kernels
//===----------------------------------------------------------------------===//

namespace {

/// A split-KV forward as fa-aot writes it: "split_kv" and a merge entry,
/// with `extra` members appended.
std::string splitKvJson(const std::string &tag, const std::string &extra = "") {
  return kernelJson(tag, "fwd", "bf16", 128, "none", "sm_90a", true,
                    R"(, "split_kv": true, "entries": {
                      "fwd": {"name": "fa_fwd_)" +
                        tag + R"(", "threads": 128, "shared_bytes": 49152},
                      "merge": {"name": "fa_merge_)" +
                        tag + R"(", "threads": 128, "shared_bytes": 0}})" +
                        extra);
}

TEST(SplitKv, ManifestNeedsVersion6AndAMergeEntry) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("splitkv", manifest({splitKvJson("s")}, "6"), &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  // A version-5 runtime would launch the split forward as a plain one.
  expectRejected("splitkv_v5", manifest({splitKvJson("s")}, "5"),
                 "kernels[0]: split-KV kernels need bundle version 6, the "
                 "manifest says 5");
  expectRejected("splitkv_nomerge",
                 manifest({kernelJson("s", "fwd", "bf16", 128, "none",
                                      "sm_90a", true, R"(, "split_kv": true)")},
                          "6"),
                 "kernels[0] ('s').entries: missing field 'merge'");
  expectRejected("splitkv_type",
                 manifest({splitKvJson("s", R"(, "split_kv": 1)")}, "6"),
                 "field 'split_kv' must be true or false, got 1");
  expectRejected(
      "splitkv_merge_type",
      manifest({splitKvJson("s", R"(, "entries": {
          "fwd": {"name": "f", "threads": 128, "shared_bytes": 0},
          "merge": {"name": "m", "threads": "128", "shared_bytes": 0}})")},
               "6"),
      "kernels[0] ('s').entries.merge: field 'threads' must be an integer");
  expectRejected("splitkv_wgmma",
                 manifest({wgmmaJson("w", "bf16", 128, "none", true, abiMaps(),
                                     R"(, "split_kv": true, "entries": {
          "fwd": {"name": "f", "threads": 384, "shared_bytes": 0},
          "merge": {"name": "m", "threads": 384, "shared_bytes": 0}})")},
                          "6"),
                 "only mma.sync forwards have split-KV kernels");
}

/// A merge entry's "launch": "dependent" (docs/ABI.md) or "plain" loads; any
/// other value, or one that is not a string, is rejected with the entry named.
TEST(SplitKv, MergeLaunchField) {
  auto withLaunch = [](const std::string &launch) {
    return splitKvJson("s", R"(, "entries": {
          "fwd": {"name": "f", "threads": 128, "shared_bytes": 0},
          "merge": {"name": "m", "threads": 128, "shared_bytes": 0,
                    "launch": )" + launch + "}}");
  };
  for (const char *ok : {R"("dependent")", R"("plain")"}) {
    fa_bundle *b = nullptr;
    EXPECT_EQ(loadText("launch", manifest({withLaunch(ok)}, "7"), &b),
              FA_SUCCESS)
        << ok << ": " << lastError();
    fa_bundle_free(b);
  }
  expectRejected("launch_bad", manifest({withLaunch(R"("eager")")}, "7"),
                 "kernels[0] ('s').entries.merge: unknown launch 'eager' "
                 "(expected plain or dependent)");
  expectRejected("launch_type", manifest({withLaunch("true")}, "7"),
                 "kernels[0] ('s').entries.merge: field 'launch' must be a "
                 "string");
}

/// The k and v maps of a split-KV forward whose producer warp loads by TMA
/// (4-D over the caller's strides, boxes of 64 x block_kv).
std::vector<MapJson> splitTmaMaps() {
  return {{"k", "12", R"(["head_dim", "nk", "kv_heads", "batch"])",
           "[64, 64, 1, 1]"},
          {"v", "13", R"(["head_dim_v", "nk", "kv_heads", "batch"])",
           "[64, 64, 1, 1]"}};
}

std::string splitTmaJson(const std::vector<MapJson> &maps = splitTmaMaps(),
                         const std::string &extra = "") {
  return splitKvJson("t", R"(, "pack_gqa": true, "stride_param": 14,
                      "tensor_maps": )" + mapsJson(maps) + extra);
}

TEST(SplitKv, TmaKernelTakesKAndVMaps) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("splitkv_tma", manifest({splitTmaJson()}, "19"), &b),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(b, 0);
  fa_attention_args fwd{};
  fa_attention_backward_args unused{};
  wellFormedArgs(fwd, unused, 1, 32, 8, 1, 8192, 128, 128);
  const CUdeviceptr ws = addr(20);
  uint64_t bytes = 0;
  ASSERT_EQ(fa_splitkv_workspace_bytes(k, 1, 32, 1, 4, &bytes), FA_SUCCESS);
  EXPECT_EQ(fa_attention_forward_splitkv_check(k, &fwd, ws, bytes, 4),
            FA_SUCCESS)
      << lastError();
  // Strided k and v (rows 16-byte aligned, as every launch needs) are
  // maps' strides too.
  fwd.k.strides[1] += 8;
  fwd.v.strides[0] *= 2;
  EXPECT_EQ(fa_attention_forward_splitkv_check(k, &fwd, ws, bytes, 4),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);

  expectRejected("splitkv_tma_v18", manifest({splitTmaJson()}, "18"),
                 "split-KV kernels with tensor maps need bundle version 19");
  std::vector<MapJson> wrongParam = splitTmaMaps();
  wrongParam[0].param = "11";
  expectRejected("splitkv_tma_param",
                 manifest({splitTmaJson(wrongParam)}, "19"),
                 "field 'param' = 11, expected 12 (the k, v maps follow "
                 "fa_fwd's 11 parameters and the split count)");
  std::vector<MapJson> threeMaps = splitTmaMaps();
  threeMaps.push_back(threeMaps[1]);
  expectRejected("splitkv_tma_count", manifest({splitTmaJson(threeMaps)}, "19"),
                 "must be an array of 2 maps (k, v)");
  expectRejected("splitkv_tma_sm80",
                 manifest({splitTmaJson(splitTmaMaps(),
                                        R"(, "target": "sm_80")")},
                          "19"),
                 "only mma 'wgmma' kernels and sm_90a split-KV forwards take "
                 "tensor maps");
  expectRejected("splitkv_tma_paged",
                 manifest({splitTmaJson(splitTmaMaps(),
                                        R"(, "paged": true,
                                           "page_table_param": 23)")},
                          "19"),
                 "field 'dims' = [\"head_dim\",\"nk\",\"kv_heads\",\"batch\"], "
                 "expected [\"head_dim\",\"page_size\",\"kv_heads\","
                 "\"num_pages\"]");
}

TEST(SplitKv, PlainQueriesAndLaunchesNeverTakeIt) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("splitkv_find",
                     manifest({splitKvJson("s"),
                               kernelJson("p", "fwd", "bf16", 128, "none",
                                          "sm_90a", true)},
                              "6"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_NONE;
  q.compute_capability = 90;
  const fa_kernel *k = nullptr;
  fa_kernel_info info;
  // Listed first, but the plain searches skip it.
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "p");
  EXPECT_EQ(info.split_kv, 0);
  ASSERT_EQ(fa_kernel_find_for_keys(b, &q, 65536, &k), FA_SUCCESS);
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "p");
  // Only the split-KV search returns it.
  ASSERT_EQ(fa_kernel_find_splitkv(b, &q, 65536, &k), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "s");
  EXPECT_EQ(info.split_kv, 1);
  q.dtype = FA_DTYPE_F16;
  EXPECT_EQ(fa_kernel_find_splitkv(b, &q, 65536, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("has no kernel for fwd f16 d=128 dv=128 "
                             "mask=none (split-KV)"),
            std::string::npos)
      << lastError();
  q.dtype = FA_DTYPE_BF16;
  // Reached by index, fa_attention_forward refuses it.
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
  wellFormedArgs(fwd, bwd, 1, 32, 8, 1, 8192, 128, 128);
  EXPECT_EQ(fa_attention_forward_check(fa_bundle_kernel_at(b, 1), &fwd),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_forward_check(fa_bundle_kernel_at(b, 0), &fwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 's' is a split-KV kernel"),
            std::string::npos)
      << lastError();
  fa_bundle_free(b);

  // A bundle with only the split kernel has no plain one to give.
  ASSERT_EQ(loadText("splitkv_only", manifest({splitKvJson("s")}, "6"), &b),
            FA_SUCCESS);
  EXPECT_EQ(fa_kernel_find(b, &q, &k), FA_ERROR_NOT_FOUND);
  fa_bundle_free(b);
}

/// A bundle with one split-KV kernel (bf16 d128, 64 x 64 tiles, 4 warps)
/// and one plain forward, for the split-KV API's GPU-free parts.
class SplitKvApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 1, H = 32, Hkv = 8, Nq = 1, Nk = 8192, D = 128;

  void SetUp() override {
    ASSERT_EQ(loadText("splitkv_api",
                       manifest({splitKvJson("s"),
                                 kernelJson("p", "fwd", "bf16", 128, "none",
                                            "sm_90a", true)},
                                "6"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    split = fa_bundle_kernel_at(bundle, 0);
    plain = fa_bundle_kernel_at(bundle, 1);
    fa_attention_backward_args unused{};
    wellFormedArgs(fwd, unused, B, H, Hkv, Nq, Nk, D, D);
  }
  void TearDown() override { fa_bundle_free(bundle); }

  int32_t choose(int64_t b, int64_t h, int64_t nq, int64_t nk, int32_t sms) {
    int32_t splits = -1;
    EXPECT_EQ(fa_splitkv_choose(split, b, h, nq, nk, sms, &splits), FA_SUCCESS)
        << lastError();
    return splits;
  }
  /// Expects the split-KV check to fail with `expect` in the message.
  void reject(const fa_attention_args &a, CUdeviceptr ws, uint64_t bytes,
              int32_t splits, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_splitkv_check(split, &a, ws, bytes, splits),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }
  uint64_t bytesFor(int32_t splits) {
    uint64_t bytes = 0;
    EXPECT_EQ(fa_splitkv_workspace_bytes(split, B, H, Nq, splits, &bytes),
              FA_SUCCESS)
        << lastError();
    return bytes;
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *split = nullptr, *plain = nullptr;
  fa_attention_args fwd{};
  /// A fake 16-byte aligned device address past the tensors'.
  const CUdeviceptr ws = addr(20);
};

TEST_F(SplitKvApi, WorkspaceBytes) {
  // o_part [S,B,H,Nq,Dv] and lse_part [S,B,H,Nq], f32.
  EXPECT_EQ(bytesFor(1), 4u * (32 * 128 + 32));
  EXPECT_EQ(bytesFor(16), 16u * 4 * (32 * 128 + 32));
  uint64_t bytes = 0;
  EXPECT_EQ(fa_splitkv_workspace_bytes(split, 8, 32, 3, 5, &bytes), FA_SUCCESS);
  EXPECT_EQ(bytes, 4u * 5 * 8 * 32 * 3 * (128 + 1));
  EXPECT_EQ(fa_splitkv_workspace_bytes(split, 1, 32, 1, 0, &bytes),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("splits 0: each must be at least 1"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_splitkv_workspace_bytes(split, 1 << 16, 1 << 16, 1, 1, &bytes),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_splitkv_workspace_bytes(split, 1, 32, 1, 2, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_splitkv_workspace_bytes(plain, 1, 32, 1, 2, &bytes),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'p' is not a split-KV kernel"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_splitkv_workspace_bytes(nullptr, 1, 32, 1, 2, &bytes),
            FA_ERROR_INVALID_ARGUMENT);
}

/// A grid that fills the GPU is split only to even out its last wave, by
/// the CTAs per SM the kernel's shared memory and threads allow.
TEST(SplitKv, ChooseSplitsEvensOutTheLastWave) {
  // 64 threads and 72 KB: three CTAs per SM on sm_90a (the bq32 packed
  // decode kernel); 128 threads and 48 KB: two (the registers).
  std::string three = kernelJson("t", "fwd", "bf16", 128, "none", "sm_90a",
                                 true, R"(, "split_kv": true, "entries": {
      "fwd": {"name": "fa_fwd_t", "threads": 64, "shared_bytes": 73728},
      "merge": {"name": "fa_merge_t", "threads": 128, "shared_bytes": 0}})");
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("splitkv_waves", manifest({three, splitKvJson("s")}, "6"),
                     &b),
            FA_SUCCESS)
      << lastError();
  auto choose = [&](int index, int64_t batch) {
    int32_t splits = -1;
    EXPECT_EQ(fa_splitkv_choose(fa_bundle_kernel_at(b, index), batch, 32, 1,
                                4096, 132, &splits),
              FA_SUCCESS)
        << lastError();
    return splits;
  };
  // 16 x 32 heads = 512 CTAs: 396 slots leave the second wave 65% full,
  // two splits fill 86% of their third; 264 slots (two per SM) 97%.
  EXPECT_EQ(choose(0, 16), 2);
  EXPECT_EQ(choose(1, 16), 1);
  // 13 x 32 = 416 CTAs: 416 / 792 = 53%, 832 / 1188 = 70%, 1248 / 1584
  // = 79%, 1664 / 1980 = 84%: no count up to 4 reaches 85%, so one.
  EXPECT_EQ(choose(0, 13), 1);
  fa_bundle_free(b);
}

TEST(SplitKv, ChooseSplitsReadsTheKernelsRegisters) {
  // 96 threads (two warps and a producer warp) and 72 KB: three CTAs per SM
  // by shared memory; at 168 registers (5376 per warp, three warps in each
  // sub-partition's 16K) the registers allow four, where a manifest without
  // them assumes 256 (two warps a sub-partition: two CTAs), and so do 213
  // (6912 per warp; 64K / (3 x 6912) would say three, Nsight Compute says
  // two).
  auto kernel = [](const char *tag, const char *registers) {
    return kernelJson(tag, "fwd", "bf16", 128, "none", "sm_90a", true,
                      std::string(R"(, "split_kv": true)") + registers +
                          R"(, "entries": {
      "fwd": {"name": "fa_fwd_)" + std::string(tag) +
                          R"(", "threads": 96, "shared_bytes": 73792},
      "merge": {"name": "fa_merge_)" + std::string(tag) +
                          R"(", "threads": 64, "shared_bytes": 0}})");
  };
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("splitkv_registers",
                     manifest({kernel("r", R"(, "registers": 168)"),
                               kernel("u", ""),
                               kernel("w", R"(, "registers": 213)"),
                               splitKvJson("s")},
                              "6"),
                     &b),
            FA_SUCCESS)
      << lastError();
  auto choose = [&](int index) {
    int32_t splits = -1;
    EXPECT_EQ(fa_splitkv_choose(fa_bundle_kernel_at(b, index), 16, 32, 1,
                                4096, 132, &splits),
              FA_SUCCESS)
        << lastError();
    return splits;
  };
  // 512 CTAs: 396 slots call for two splits, 264 for one (as above).
  EXPECT_EQ(choose(0), 2);
  EXPECT_EQ(choose(1), 1);
  EXPECT_EQ(choose(2), 1);
  fa_bundle_free(b);
}

TEST_F(SplitKvApi, ChooseSplits) {
  // 1 x 8k, 32 heads, 1 query: 32 CTAs; two per SM on 132 SMs is 264, so 8
  // splits (256 CTAs) of 128 key blocks.
  EXPECT_EQ(choose(1, 32, 1, 8192, 132), 8);
  EXPECT_EQ(choose(1, 32, 1, 65536, 132), 8);
  // 8 x 16k: 256 CTAs already fill 132 SMs.
  EXPECT_EQ(choose(8, 32, 1, 16384, 132), 1);
  EXPECT_EQ(choose(64, 32, 1, 4096, 132), 1);
  // 2 x 32 = 64 CTAs: 4 splits, 256 of the 264 slots.
  EXPECT_EQ(choose(2, 32, 1, 4096, 132), 4);
  // Each split at least 4 key blocks: 512 keys are 8 blocks, so 2 splits;
  // 448 keys are 7 blocks, so 1; 64 keys, 1.
  // A single (batch, head) row of 64k keys: one wave would take 264
  // splits of under 4 key blocks; at most 128.
  EXPECT_EQ(choose(1, 1, 1, 65536, 132), 128);
  EXPECT_EQ(choose(1, 1, 1, 512, 132), 2);
  EXPECT_EQ(choose(1, 1, 1, 448, 132), 1);
  EXPECT_EQ(choose(1, 1, 1, 64, 132), 1);
  // batch x splits at most 65535.
  EXPECT_EQ(choose(30000, 1, 1, 1 << 24, 1000000), 2);
  EXPECT_EQ(choose(40000, 1, 1, 1 << 24, 1000000), 1);
  // The query tiles count: 128 queries are 2 tiles of 64.
  EXPECT_EQ(choose(1, 32, 128, 8192, 132), 4);
  int32_t splits = 0;
  EXPECT_EQ(fa_splitkv_choose(split, 1, 32, 1, 8192, 0, &splits),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("sm_count 0: each must be in [1, 2^31 - 1]"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_splitkv_choose(split, 1, 32, 1, 0, 132, &splits),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_splitkv_choose(split, 1, 32, 1, 8192, 132, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_splitkv_choose(plain, 1, 32, 1, 8192, 132, &splits),
            FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(SplitKvApi, ValidArgumentsPass) {
  EXPECT_EQ(fa_attention_forward_splitkv_check(split, &fwd, ws, bytesFor(9), 9),
            FA_SUCCESS)
      << lastError();
  // A larger workspace is fine.
  EXPECT_EQ(fa_attention_forward_splitkv_check(split, &fwd, ws, 1 << 30, 1),
            FA_SUCCESS)
      << lastError();
}

TEST_F(SplitKvApi, BadArgumentsAreRejected) {
  uint64_t bytes = bytesFor(9);
  reject(fwd, ws, bytes - 4, 9,
         "workspace_bytes is " + std::to_string(bytes - 4) + ", but 9 splits "
         "of [1,32,1,128] need " + std::to_string(bytes));
  reject(fwd, ws + 8, bytes, 9, "must be a non-null, 16-byte aligned");
  reject(fwd, 0, bytes, 9, "workspace 0x0 must be a non-null");
  reject(fwd, ws, bytes, 0, "splits is 0 for batch 1; it must be at least 1");
  reject(fwd, ws, 1ull << 40, 65536, "splits is 65536 for batch 1");
  // The workspace must not overlap q, k, v, o or lse.
  reject(fwd, fwd.k.data, bytes, 9, "overlaps");
  // The forward's own checks.
  fa_attention_args a = fwd;
  a.scale = 0.0f;
  reject(a, ws, bytes, 9, "scale is 0");
  a = fwd;
  a.o.shape[3] = 64;
  reject(a, ws, bytes, 9, "o");
  // Only split-KV kernels, and the plain launch refuses them.
  EXPECT_EQ(fa_attention_forward_splitkv_check(plain, &fwd, ws, bytes, 9),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'p' is not a split-KV kernel"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_splitkv_check(split, nullptr, ws, bytes, 9),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_attention_forward_splitkv_check(nullptr, &fwd, ws, bytes, 9),
            FA_ERROR_INVALID_ARGUMENT);
  // The launch runs the same checks before it touches the driver.
  EXPECT_EQ(fa_attention_forward_splitkv(split, &fwd, ws, bytes - 4, 9, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("fa_attention_forward_splitkv: workspace_bytes"),
            std::string::npos)
      << lastError();
}

//===----------------------------------------------------------------------===//
// Packed-GQA forwards
//===----------------------------------------------------------------------===//

/// A packed-GQA forward as fa-aot writes it, split-KV or not.
std::string packedJson(const std::string &tag, bool split,
                       const std::string &extra = "") {
  if (split)
    return splitKvJson(tag, R"(, "pack_gqa": true)" + extra);
  return kernelJson(tag, "fwd", "bf16", 128, "none", "sm_90a", true,
                    R"(, "pack_gqa": true)" + extra);
}

TEST(PackGqa, ManifestNeedsVersion7) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("packgqa",
                     manifest({packedJson("ps", true), packedJson("pp", false)},
                              "7"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  // A version-6 runtime would launch one CTA per query head.
  expectRejected("packgqa_v6", manifest({packedJson("pp", false)}, "6"),
                 "kernels[0]: packed-GQA kernels need bundle version 7, the "
                 "manifest says 6");
  expectRejected("packgqa_type",
                 manifest({kernelJson("pp", "fwd", "bf16", 128, "none",
                                      "sm_90a", true, R"(, "pack_gqa": "yes")")},
                          "7"),
                 "field 'pack_gqa' must be true or false, got \"yes\"");
  expectRejected("packgqa_bwd",
                 manifest({kernelJson("pb", "bwd", "bf16", 128, "none",
                                      "sm_90a", true, R"(, "pack_gqa": true)")},
                          "7"),
                 "only mma.sync forwards pack GQA heads");
  expectRejected("packgqa_wgmma",
                 manifest({wgmmaJson("w", "bf16", 128, "none", true, abiMaps(),
                                     R"(, "pack_gqa": true)")},
                          "7"),
                 "only mma.sync forwards pack GQA heads");
}

/// A bundle with a packed split-KV kernel, a packed plain one, an unpacked
/// split-KV one and a plain forward (bf16 d128, 64-row tiles).
class PackGqaApi : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(loadText("packgqa_api",
                       manifest({packedJson("ps", true), packedJson("pp", false),
                                 splitKvJson("s"),
                                 kernelJson("p", "fwd", "bf16", 128, "none",
                                            "sm_90a", true)},
                                "7"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    q.direction = FA_DIRECTION_FWD;
    q.dtype = FA_DTYPE_BF16;
    q.head_dim = 128;
    q.mask = FA_MASK_NONE;
    q.compute_capability = 90;
  }
  void TearDown() override { fa_bundle_free(bundle); }
  std::string tagOf(const fa_kernel *k) {
    fa_kernel_info info;
    EXPECT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
    return info.tag;
  }
  int32_t choose(const fa_kernel *k, int64_t b, int64_t h, int64_t hkv,
                 int64_t nq, int64_t nk) {
    int32_t splits = -1;
    EXPECT_EQ(fa_splitkv_choose_gqa(k, b, h, hkv, nq, nk, 132, &splits),
              FA_SUCCESS)
        << lastError();
    return splits;
  }

  fa_bundle *bundle = nullptr;
  fa_kernel_query q{};
};

TEST_F(PackGqaApi, OnlyThePackedSearchReturnsThem) {
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(tagOf(k), "p");
  ASSERT_EQ(fa_kernel_find_splitkv(bundle, &q, 8192, &k), FA_SUCCESS);
  EXPECT_EQ(tagOf(k), "s");
  ASSERT_EQ(fa_kernel_find_packed_gqa(bundle, &q, 8192, 1, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(tagOf(k), "ps");
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_EQ(info.pack_gqa, 1);
  EXPECT_EQ(info.split_kv, 1);
  ASSERT_EQ(fa_kernel_find_packed_gqa(bundle, &q, 8192, 0, &k), FA_SUCCESS);
  EXPECT_EQ(tagOf(k), "pp");
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_EQ(info.pack_gqa, 1);
  EXPECT_EQ(info.split_kv, 0);
  EXPECT_EQ(fa_kernel_find_packed_gqa(bundle, &q, 8192, 2, &k),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("split_kv is 2; expected 0 or 1"),
            std::string::npos)
      << lastError();
  q.mask = FA_MASK_CAUSAL;
  EXPECT_EQ(fa_kernel_find_packed_gqa(bundle, &q, 8192, 1, &k),
            FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("(split-KV) (packed GQA)"), std::string::npos)
      << lastError();
}

// Decode tiles: one query row of 4 heads per key head fills a quarter of a
// 16-row tile and an eighth of a 32-row one; the smaller tile wins while it
// holds the rows, the larger one past them (one 32-row tile over two of 16).
TEST(PackGqaRows, SmallestTileHoldingTheRows) {
  fa_bundle *bundle = nullptr;
  auto tile = [](int bq) {
    return R"(, "pack_gqa": true, "block_q": )" + std::to_string(bq) +
           R"(, "warps": )" + std::to_string(bq / 16);
  };
  ASSERT_EQ(loadText("packgqa_rows",
                     manifest({splitKvJson("p32", tile(32)),
                               splitKvJson("p16", tile(16))},
                              "7"),
                     &bundle),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = forwardQuery();
  auto pick = [&](int64_t group, int64_t nq) {
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find_packed_gqa_rows(bundle, &q, group, nq, 65536, 1,
                                             &k),
              FA_SUCCESS)
        << lastError();
    return kernelTag(k);
  };
  EXPECT_EQ(pick(4, 1), "p16");
  EXPECT_EQ(pick(4, 4), "p16");  // 16 rows: one small tile
  EXPECT_EQ(pick(8, 4), "p32");  // 32 rows: one tile of 32, not two of 16
  EXPECT_EQ(pick(4, 16), "p32"); // 64 rows: two tiles of 32, not four
  EXPECT_EQ(pick(32, 1), "p32"); // a group of 32 heads needs block_q >= 32
  // Without the rows, the largest tile (it holds any group it can).
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find_packed_gqa(bundle, &q, 65536, 1, &k), FA_SUCCESS);
  EXPECT_EQ(kernelTag(k), "p32");
  EXPECT_EQ(fa_kernel_find_packed_gqa_rows(bundle, &q, 64, 1, 65536, 1, &k),
            FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("holding 64 query heads per key head"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_kernel_find_packed_gqa_rows(bundle, &q, 0, 1, 65536, 1, &k),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("group 0, nq 1: each must be in [1, 2^31 - 1]"),
            std::string::npos)
      << lastError();
  fa_bundle_free(bundle);
}

TEST_F(PackGqaApi, SplitsCountCtasPerKeyHead) {
  const fa_kernel *packed = fa_bundle_kernel_at(bundle, 0);
  const fa_kernel *unpacked = fa_bundle_kernel_at(bundle, 2);
  // 1 x 8k, 32 heads on 8, one query: unpacked 32 CTAs, 8 splits; packed,
  // one tile of the 4 heads of each key head, 8 CTAs: 264 / 8 = 33 splits,
  // but 128 key blocks give at most 32 splits of 4.
  EXPECT_EQ(choose(unpacked, 1, 32, 8, 1, 8192), 8);
  EXPECT_EQ(choose(packed, 1, 32, 8, 1, 8192), 32);
  // 17 queries of 4 heads: 16 queries a tile, 2 tiles, 16 CTAs: 16 splits.
  EXPECT_EQ(choose(packed, 1, 32, 8, 17, 8192), 16);
  // 8 x 16k: 64 packed CTAs leave room for 4 splits; unpacked 256 fill it.
  EXPECT_EQ(choose(packed, 8, 32, 8, 1, 16384), 4);
  EXPECT_EQ(choose(unpacked, 8, 32, 8, 1, 16384), 1);
  // Without the key heads a packed kernel's grid is unknown.
  int32_t splits = 0;
  EXPECT_EQ(fa_splitkv_choose(packed, 1, 32, 1, 8192, 132, &splits),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("use fa_splitkv_choose_gqa"), std::string::npos)
      << lastError();
  EXPECT_EQ(fa_splitkv_choose_gqa(packed, 1, 32, 5, 1, 8192, 132, &splits),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kv_heads 5 must be >= 1 and divide heads 32"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_splitkv_choose_gqa(fa_bundle_kernel_at(bundle, 3), 1, 32, 8, 1,
                                  8192, 132, &splits),
            FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(PackGqaApi, GroupMustFitTheTile) {
  fa_attention_args fwd{};
  fa_attention_backward_args unused{};
  const fa_kernel *pp = fa_bundle_kernel_at(bundle, 1);
  wellFormedArgs(fwd, unused, 1, 64, 1, 1, 4096, 128, 128);
  EXPECT_EQ(fa_attention_forward_check(pp, &fwd), FA_SUCCESS) << lastError();
  wellFormedArgs(fwd, unused, 1, 128, 1, 1, 4096, 128, 128);
  EXPECT_EQ(fa_attention_forward_check(pp, &fwd), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'pp' packs the query heads of a key head "
                             "into 64 rows, but q has 128 heads on 1 key heads"),
            std::string::npos)
      << lastError();
  // The plain forward takes it.
  EXPECT_EQ(fa_attention_forward_check(fa_bundle_kernel_at(bundle, 3), &fwd),
            FA_SUCCESS)
      << lastError();
}

//===----------------------------------------------------------------------===//
// mod_args: the tensors a score_mod reads, checked and passed per launch
//===----------------------------------------------------------------------===//

/// Causal d64 forward, backward and split-KV kernels whose score_mod reads
/// slopes [H] (f32) and a key bias [B, Nk] (bf16), and well-formed
/// arguments for them (B 2, H 8, Hkv 2, Nq 100, Nk 300).
class ModArgs : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, Nq = 100, Nk = 300, D = 64;
  void SetUp() override {
    const std::string modArgs = R"([{"dtype": "f32", "rank": 1, "dims": ["heads"]},
                                 {"dtype": "bf16", "rank": 2,
                                  "dims": ["batch", "nk"]}])";
    std::string split = kernelJson(
        "s", "fwd", "bf16", 64, "causal", "sm_90a", true,
        R"(, "score_mod": "m", "split_kv": true, "stride_param": 12,
           "mod_args": )" + modArgs + R"(, "mod_arg_param": 21,
           "entries": {"fwd": {"name": "a", "threads": 128, "shared_bytes": 0},
                       "merge": {"name": "b", "threads": 128, "shared_bytes": 0}})");
    ASSERT_EQ(loadText("mod_args_validate",
                       manifest({modArgsJson("f", "fwd", modArgs),
                                 modArgsJson("b", "bwd", modArgs), split},
                                "8"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fwdKernel = fa_bundle_kernel_at(bundle, 0);
    bwdKernel = fa_bundle_kernel_at(bundle, 1);
    splitKernel = fa_bundle_kernel_at(bundle, 2);
    wellFormedArgs(fwd, bwd, B, H, Hkv, Nq, Nk, D, D);
    mods[0] = tensor(addr(20), FA_DTYPE_F32, {H});
    mods[1] = tensor(addr(21), FA_DTYPE_BF16, {B, Nk});
  }
  void TearDown() override { fa_bundle_free(bundle); }

  /// Expects every check (forward, backward, split-KV) of `m` to fail with
  /// `expect` in the message.
  void reject(const fa_tensor *m, int32_t count, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, m, count),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
    EXPECT_EQ(fa_attention_backward_check_ex(bwdKernel, &bwd, m, count),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
    uint64_t bytes = 0;
    ASSERT_EQ(fa_splitkv_workspace_bytes(splitKernel, B, H, Nq, 2, &bytes),
              FA_SUCCESS);
    EXPECT_EQ(fa_attention_forward_splitkv_check_ex(splitKernel, &fwd,
                                                    addr(30), bytes, 2, m,
                                                    count),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }
  /// reject() with mods[i] replaced by `t`.
  void rejectArg(int i, const fa_tensor &t, const std::string &expect) {
    fa_tensor m[2] = {mods[0], mods[1]};
    m[i] = t;
    reject(m, 2, expect);
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *fwdKernel = nullptr, *bwdKernel = nullptr,
                  *splitKernel = nullptr;
  fa_attention_args fwd{};
  fa_attention_backward_args bwd{};
  fa_tensor mods[2];
};

TEST_F(ModArgs, ValidModArgsPass) {
  EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, mods, 2),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_backward_check_ex(bwdKernel, &bwd, mods, 2),
            FA_SUCCESS)
      << lastError();
  uint64_t bytes = 0;
  ASSERT_EQ(fa_splitkv_workspace_bytes(splitKernel, B, H, Nq, 2, &bytes),
            FA_SUCCESS);
  EXPECT_EQ(fa_attention_forward_splitkv_check_ex(splitKernel, &fwd, addr(30),
                                                  bytes, 2, mods, 2),
            FA_SUCCESS)
      << lastError();
  // Elements are read one at a time: their size is the alignment needed.
  fa_tensor m[2] = {mods[0], mods[1]};
  m[0].data += 4;
  m[1].data += 2;
  EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, m, 2), FA_SUCCESS)
      << lastError();
  // Tensor maps and grids do not depend on them.
  unsigned grids[3][3];
  EXPECT_EQ(fa_attention_backward_grids(bwdKernel, &bwd, grids), FA_SUCCESS)
      << lastError();
}

TEST_F(ModArgs, PlainCallsAndWrongCountsNameWhatTheKernelReads) {
  const std::string reads =
      "kernel 'f' reads 2 (f32 [heads], bf16 [batch, nk]) score_mod tensors "
      "(mod_args), but the call passes ";
  EXPECT_EQ(fa_attention_forward_check(fwdKernel, &fwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find(reads + "0; pass them to the _ex launch "
                                     "functions"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, mods, 1),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find(reads + "1"), std::string::npos) << lastError();
  EXPECT_EQ(fa_attention_backward_check(bwdKernel, &bwd),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'b' reads 2"), std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_splitkv_check(splitKernel, &fwd, addr(30),
                                               1 << 30, 2),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 's' reads 2"), std::string::npos)
      << lastError();
  // A launch validates the same way before it touches the GPU.
  EXPECT_EQ(fa_attention_forward(fwdKernel, &fwd, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find(reads + "0"), std::string::npos) << lastError();
  EXPECT_EQ(fa_attention_backward_ex(bwdKernel, &bwd, mods, 3, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("the call passes 3"), std::string::npos)
      << lastError();
  reject(mods, -1, "but the call passes -1");
  reject(nullptr, 2, "mod_args is null, but kernel");
}

TEST_F(ModArgs, PlainKernelsTakeNone) {
  fa_bundle *plain = nullptr;
  ASSERT_EQ(loadText("mod_args_plain",
                     manifest({kernelJson("p", "fwd", "bf16", 64, "causal",
                                          "sm_90a", true)}),
                     &plain),
            FA_SUCCESS);
  const fa_kernel *k = fa_bundle_kernel_at(plain, 0);
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, nullptr, 0), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, mods, 1),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'p' reads none score_mod tensors "
                             "(mod_args), but the call passes 1"),
            std::string::npos)
      << lastError();
  fa_bundle_free(plain);
}

TEST_F(ModArgs, EachTensorIsChecked) {
  fa_tensor t = mods[0];
  t.data = 0;
  rejectArg(0, t, "mod_args[0].data is null");
  rejectArg(0, tensor(addr(20), FA_DTYPE_BF16, {H}),
            "mod_args[0].dtype is bf16, expected f32");
  rejectArg(1, tensor(addr(21), FA_DTYPE_I32, {B, Nk}),
            "mod_args[1].dtype is i32, expected bf16");
  t = mods[1];
  t.dtype = static_cast<fa_dtype>(42);
  rejectArg(1, t, "mod_args[1].dtype is <invalid dtype 42>, expected bf16");
  rejectArg(0, tensor(addr(20), FA_DTYPE_F32, {1, H}),
            "mod_args[0].rank is 2, expected 1");
  t = mods[0];
  t.data += 2;
  rejectArg(0, t, "mod_args[0].data 0x7f1400000002 is not 4-byte aligned "
                  "(its elements are read one at a time)");
  t = mods[1];
  t.strides[0] = Nk + 8;
  rejectArg(1, t, "mod_args[1].strides are [308,1] for shape [2,300], "
                  "expected [300,1] (contiguous row-major)");
  rejectArg(0, tensor(addr(20), FA_DTYPE_F32, {0}),
            "mod_args[0].shape [0] has size 0 in dimension 0; sizes must be "
            "in [1, 2^31-1]");
}

TEST_F(ModArgs, ExtentsFollowTheCallsSizes) {
  rejectArg(0, tensor(addr(20), FA_DTYPE_F32, {Hkv}),
            "mod_args[0].shape is [2], but kernel '");
  rejectArg(0, tensor(addr(20), FA_DTYPE_F32, {Hkv}),
            "' reads it as [heads] = dimension 0 of 8 (q.shape "
            "[2,8,100,64], k.shape [2,2,300,64])");
  rejectArg(1, tensor(addr(21), FA_DTYPE_BF16, {B, Nq}),
            "reads it as [batch, nk] = dimension 1 of 300");
  rejectArg(1, tensor(addr(21), FA_DTYPE_BF16, {1, Nk}),
            "reads it as [batch, nk] = dimension 0 of 2");
}

TEST_F(ModArgs, FixedAnyAndRelativeExtents) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("mod_args_extents",
                     manifest({modArgsJson("r", "fwd",
                                           R"([{"dtype": "i32", "rank": 3,
                                                "dims": [4, "nq+nk-1", "any"]},
                                               {"dtype": "i64", "rank": 1,
                                                "dims": ["kv_heads"]},
                                               {"dtype": "f16", "rank": 1,
                                                "dims": ["nq"]}])")},
                              "8"),
                     &b),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(b, 0);
  fa_tensor m[3] = {tensor(addr(20), FA_DTYPE_I32, {4, Nq + Nk - 1, 7}),
                    tensor(addr(21), FA_DTYPE_I64, {Hkv}),
                    tensor(addr(22), FA_DTYPE_F16, {Nq})};
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, m, 3), FA_SUCCESS)
      << lastError();
  m[0].shape[2] = 1; // "any" takes every size >= 1
  m[0].strides[0] = Nq + Nk - 1;
  m[0].strides[1] = 1;
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, m, 3), FA_SUCCESS)
      << lastError();
  m[0] = tensor(addr(20), FA_DTYPE_I32, {5, Nq + Nk - 1, 7});
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, m, 3),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("reads it as [4, nq+nk-1, any] = dimension 0 "
                             "of 4"),
            std::string::npos)
      << lastError();
  m[0] = tensor(addr(20), FA_DTYPE_I32, {4, Nq + Nk, 7});
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, m, 3),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("dimension 1 of 399"), std::string::npos)
      << lastError();
  m[0] = tensor(addr(20), FA_DTYPE_I32, {4, Nq + Nk - 1, 7});
  m[1] = tensor(addr(21), FA_DTYPE_I64, {H});
  EXPECT_EQ(fa_attention_forward_check_ex(k, &fwd, m, 3),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("[kv_heads] = dimension 0 of 2"),
            std::string::npos)
      << lastError();
  fa_bundle_free(b);
}

TEST_F(ModArgs, MayNotOverlapAnOutput) {
  // The kernels read them while writing o (forward) or dq, dk, dv
  // (backward); reading beside an input is fine.
  fa_tensor bad[2] = {tensor(fwd.o.data + 64, FA_DTYPE_F32, {H}), mods[1]};
  EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, bad, 2),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("output o [0x7f0300000000, 0x7f0300032000) "
                             "overlaps mod_args[0] [0x7f0300000040, "
                             "0x7f0300000060)"),
            std::string::npos)
      << lastError();
  fa_tensor m[2] = {tensor(fwd.q.data + 64, FA_DTYPE_F32, {H}), mods[1]};
  EXPECT_EQ(fa_attention_forward_check_ex(fwdKernel, &fwd, m, 2), FA_SUCCESS)
      << lastError();
  fa_tensor mb[2] = {mods[0], tensor(bwd.dk.data, FA_DTYPE_BF16, {B, Nk})};
  EXPECT_EQ(fa_attention_backward_check_ex(bwdKernel, &bwd, mb, 2),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("overlaps mod_args[1]"), std::string::npos)
      << lastError();
}

//===----------------------------------------------------------------------===//
// fp8 forwards (dtype f8e4m3, bundle version 12)
//===----------------------------------------------------------------------===//

/// The fp8 forward (d128, or `d`) as fa-aot writes it: 128-column
/// (128-byte) boxes, descale tensors at 14, strides from 17.
std::string fp8Json(const std::string &extra = R"(, "descale_param": 14)",
                    int d = 128, const std::string &tag = "f8") {
  std::vector<MapJson> maps = abiMaps();
  for (MapJson &m : maps)
    m.box = "[128, 128, 1]";
  return wgmmaJson(tag, "f8e4m3", d, "causal", true, maps, extra);
}

/// The block-scaled fp8 forward (bundle version 21): fp8Json's kernel with
/// Q and K descales per `block` rows, tagged f8bs.
std::string fp8BlockJson(const std::string &block = "64") {
  return fp8Json(R"(, "descale_param": 14, "descale_block": )" + block, 128,
                 "f8bs");
}

TEST(Fp8, Manifest) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("fp8", manifest({fp8Json()}, "12"), &b), FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.dtype, FA_DTYPE_F8E4M3);
  EXPECT_STREQ(fa_dtype_name(info.dtype), "f8e4m3");
  fa_bundle_free(b);
  // d256, the other head dim the compiler builds.
  ASSERT_EQ(loadText("fp8_d256",
                     manifest({fp8Json(R"(, "descale_param": 14)", 256)}, "12"),
                     &b),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.head_dim, 256);
  fa_bundle_free(b);
  // An older bundle version, a missing or misplaced descale parameter, or
  // one on another dtype is refused with the field named.
  expectRejected("fp8_v11", manifest({fp8Json()}, "11"),
                 "f8e4m3 kernels need bundle version 12, the manifest says 11");
  expectRejected("fp8_noparam", manifest({fp8Json("")}, "12"),
                 "missing field 'descale_param'");
  expectRejected("fp8_param", manifest({fp8Json(R"(, "descale_param": 15)")}, "12"),
                 "field 'descale_param' = 15, expected 14");
  expectRejected("fp8_bf16",
                 manifest({wgmmaJson("w", "bf16", 128, "causal", true, abiMaps(),
                                     R"(, "descale_param": 14)")},
                          "12"),
                 "field 'descale_param' is given, but only f8e4m3 kernels");
  expectRejected("fp8_d64",
                 manifest({wgmmaJson("w", "f8e4m3", 64, "causal", true,
                                     abiMaps(), R"(, "descale_param": 14)")},
                          "12"),
                 "dtype 'f8e4m3' needs the mma 'wgmma' forward with head_dim "
                 "= head_dim_v in {128, 256}");
}

/// An fp8 forward's arguments at placeholder addresses — q, k, v, o, lse and
/// per-head descales [B, Hkv] — and the refusal check of both fp8 fixtures.
class Fp8ArgsTest : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, D = 128;

  void setArgs(int64_t nq, int64_t nk) {
    fa_dtype e4m3 = FA_DTYPE_F8E4M3, f32 = FA_DTYPE_F32;
    args.q = tensor(addr(0), e4m3, {B, H, nq, D});
    args.k = tensor(addr(1), e4m3, {B, Hkv, nk, D});
    args.v = tensor(addr(2), e4m3, {B, Hkv, nk, D});
    args.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, nq, D});
    args.lse = tensor(addr(4), f32, {B, H, nq});
    args.scale = 0.125f;
    for (int i = 0; i < 3; ++i)
      descales[i] = tensor(addr(5 + i), f32, {B, Hkv});
  }
  void TearDown() override { fa_bundle_free(bundle); }

  void expectRefusedBy(const fa_kernel *kernel, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_fp8_check(kernel, &args, descales),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  fa_attention_args args{};
  fa_tensor descales[3];
};

class Fp8Validate : public Fp8ArgsTest {
protected:
  static constexpr int64_t N = 300;

  void SetUp() override {
    ASSERT_EQ(loadText("fp8v",
                       manifest({fp8Json(),
                                 wgmmaJson("w", "bf16", 128, "causal", true)},
                                "12"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fp8 = fa_bundle_kernel_at(bundle, 0);
    bf16 = fa_bundle_kernel_at(bundle, 1);
    setArgs(N, N);
  }

  void expectRefused(const std::string &expect) {
    expectRefusedBy(fp8, expect);
  }

  const fa_kernel *fp8 = nullptr, *bf16 = nullptr;
};

TEST_F(Fp8Validate, WellFormed) {
  EXPECT_EQ(fa_attention_forward_fp8_check(fp8, &args, descales), FA_SUCCESS)
      << lastError();
  // The plain forward's entry points refuse the kernel, its maps included.
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = 0;
  EXPECT_EQ(fa_attention_forward_tensor_maps(fp8, &args, maps, &count),
            FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(Fp8Validate, EntryPoints) {
  EXPECT_EQ(fa_attention_forward_check(fp8, &args), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is an fp8 forward, which takes descale tensors; "
                             "use fa_attention_forward_fp8"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_fp8_check(bf16, &args, descales),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is a bf16 kernel, not an fp8 forward"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_fp8_check(fp8, &args, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("descales is null"), std::string::npos)
      << lastError();
}

TEST_F(Fp8Validate, Descales) {
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, H});
  expectRefused("descale_q.shape is [2,8], expected [2,2] ([B,Hkv] from q and k)");
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, Hkv});
  descales[1] = tensor(addr(6), FA_DTYPE_BF16, {B, Hkv});
  expectRefused("descale_k.dtype is bf16, expected f32");
  descales[1] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv});
  descales[2] = tensor(addr(7) + 2, FA_DTYPE_F32, {B, Hkv});
  expectRefused("descale_v.data 0x7f0700000002 is not 4-byte aligned");
  descales[2] = tensor(addr(3), FA_DTYPE_F32, {B, Hkv});
  expectRefused("overlaps");
  descales[2] = tensor(0, FA_DTYPE_F32, {B, Hkv});
  expectRefused("descale_v.data is null");
}

TEST_F(Fp8Validate, Tensors) {
  args.o.dtype = FA_DTYPE_F8E4M3;
  expectRefused("o.dtype is f8e4m3, expected bf16");
  args.o.dtype = FA_DTYPE_BF16;
  args.k.dtype = FA_DTYPE_BF16;
  expectRefused("k.dtype is bf16, expected f8e4m3");
}

/// The fp8 backward (bundle version 22) as fa-aot writes it: the
/// warp-specialised kernel's four maps with 128-byte boxes, descale_q, _k,
/// _v, _do at 19.
std::string fp8BwdJson(const std::string &descaleParam = "19") {
  std::vector<MapJson> maps = wsMaps();
  for (MapJson &m : maps)
    m.box =
        m.tensor == "q" || m.tensor == "do" ? "[128, 64, 1]" : "[128, 128, 1]";
  return wsBwdJson("f8b", 128, maps,
                   R"(, "dtype": "f8e4m3", "descale_param": )" + descaleParam);
}

TEST(Fp8Backward, Manifest) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("fp8_bwd", manifest({fp8BwdJson()}, "22"), &b), FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.dtype, FA_DTYPE_F8E4M3);
  EXPECT_EQ(info.direction, FA_DIRECTION_BWD);
  fa_bundle_free(b);
  expectRejected("fp8_bwd_v21", manifest({fp8BwdJson()}, "21"),
                 "fp8 backwards need bundle version 22, the manifest says 21");
  expectRejected("fp8_bwd_param", manifest({fp8BwdJson("14")}, "22"),
                 "field 'descale_param' = 14, expected 19");
}

/// An fp8 backward's arguments at placeholder addresses.
class Fp8BackwardValidate : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, N = 300, D = 128;

  void SetUp() override {
    ASSERT_EQ(loadText("fp8_bwd_v",
                       manifest({fp8BwdJson(), wsBwdJson("w")}, "22"), &bundle),
              FA_SUCCESS)
        << lastError();
    fp8 = fa_bundle_kernel_at(bundle, 0);
    bf16 = fa_bundle_kernel_at(bundle, 1);
    fa_dtype e4m3 = FA_DTYPE_F8E4M3, bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    args.q = tensor(addr(0), e4m3, {B, H, N, D});
    args.k = tensor(addr(1), e4m3, {B, Hkv, N, D});
    args.v = tensor(addr(2), e4m3, {B, Hkv, N, D});
    args.o = tensor(addr(3), bf, {B, H, N, D});
    args.d_o = tensor(addr(4), e4m3, {B, H, N, D});
    args.lse = tensor(addr(5), f32, {B, H, N});
    args.dq = tensor(addr(6), bf, {B, H, N, D});
    args.dk = tensor(addr(7), bf, {B, Hkv, N, D});
    args.dv = tensor(addr(8), bf, {B, Hkv, N, D});
    args.delta = tensor(addr(9), f32, {B, H, N});
    args.dq_accum = tensor(addr(10), f32, {B, H, N, D});
    args.scale = 0.125f;
    for (int i = 0; i < 4; ++i)
      descales[i] = tensor(addr(11 + i), f32, {B, Hkv});
  }
  void TearDown() override { fa_bundle_free(bundle); }

  void expectRefused(const std::string &expect) {
    EXPECT_EQ(fa_attention_backward_fp8_check(fp8, &args, descales),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *fp8 = nullptr, *bf16 = nullptr;
  fa_attention_backward_args args{};
  fa_tensor descales[4];
};

TEST_F(Fp8BackwardValidate, WellFormed) {
  EXPECT_EQ(fa_attention_backward_fp8_check(fp8, &args, descales), FA_SUCCESS)
      << lastError();
}

TEST_F(Fp8BackwardValidate, EntryPoints) {
  EXPECT_EQ(fa_attention_backward_check(fp8, &args), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is an fp8 backward, which takes descale "
                             "tensors; use fa_attention_backward_fp8"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_backward_fp8_check(bf16, &args, descales),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is a bf16 kernel, not an fp8 backward"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_backward_fp8_check(fp8, &args, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel, args or descales is null"),
            std::string::npos)
      << lastError();
}

TEST_F(Fp8BackwardValidate, Tensors) {
  descales[3] = tensor(addr(14), FA_DTYPE_F32, {B, H});
  expectRefused(
      "descale_do.shape is [2,8], expected [2,2] ([B,Hkv] from q and k)");
  descales[3] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv});
  expectRefused("overlaps");
  descales[3] = tensor(addr(14), FA_DTYPE_F32, {B, Hkv});
  args.dq.dtype = FA_DTYPE_F8E4M3;
  expectRefused("dq.dtype is f8e4m3, expected bf16");
  args.dq.dtype = FA_DTYPE_BF16;
  args.d_o.dtype = FA_DTYPE_BF16;
  expectRefused("d_o.dtype is bf16, expected f8e4m3");
}

TEST(Fp8, BlockDescaleManifest) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("fp8_bs", manifest({fp8Json(), fp8BlockJson()}, "21"), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.descale_block, 0);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.descale_block, 64);
  fa_bundle_free(b);
  // Only 64-row blocks, only on fp8 kernels, only from bundle version 21:
  // an older runtime would check per-head descales against the kernel.
  expectRejected("fp8_bs32", manifest({fp8BlockJson("32")}, "21"),
                 "field 'descale_block' = 32, expected 64");
  expectRejected("fp8_bs_null", manifest({fp8BlockJson("null")}, "21"),
                 "field 'descale_block' must be an integer, got null");
  expectRejected("fp8_bs_bf16",
                 manifest({wgmmaJson("w", "bf16", 128, "causal", true,
                                     abiMaps(), R"(, "descale_block": 64)")},
                          "21"),
                 "field 'descale_block' is given, but only f8e4m3 kernels "
                 "take descale tensors");
  expectRejected("fp8_bs_v20", manifest({fp8BlockJson()}, "20"),
                 "block-scaled fp8 kernels need bundle version 21, the "
                 "manifest says 20");
}

TEST(Fp8, KernelChoiceMatchesDescaleBlock) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("fp8_bs_find",
                     manifest({fp8Json(), fp8BlockJson(),
                               wgmmaJson("w", "bf16", 128, "causal", true)},
                              "21"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = forwardQuery();
  q.dtype = FA_DTYPE_F8E4M3;
  q.mask = FA_MASK_CAUSAL;
  const fa_kernel *k = nullptr;
  // A zero-initialised query asks for per-head descales.
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(kernelTag(k), "f8");
  q.descale_block = 64;
  ASSERT_EQ(fa_kernel_find_for_keys(b, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(kernelTag(k), "f8bs");
  q.descale_block = 32;
  EXPECT_EQ(fa_kernel_find(b, &q, &k), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("descale_block is 32; expected 0"),
            std::string::npos)
      << lastError();
  // Other dtypes ignore the field, as they ignore allow_tf32.
  q.dtype = FA_DTYPE_BF16;
  ASSERT_EQ(fa_kernel_find(b, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(kernelTag(k), "w");
  fa_bundle_free(b);

  // A bundle with one form only: the other is not found, and the message
  // says what the bundle has.
  ASSERT_EQ(loadText("fp8_bs_only", manifest({fp8BlockJson()}, "21"), &b),
            FA_SUCCESS)
      << lastError();
  q.dtype = FA_DTYPE_F8E4M3;
  q.descale_block = 0;
  EXPECT_EQ(fa_kernel_find(b, &q, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("the bundle has an fp8 kernel for it with "
                             "descale_block 64, but the query's "
                             "descale_block is 0"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("(descale_block 64) (sm_90a)"), std::string::npos)
      << lastError();
  fa_bundle_free(b);
  ASSERT_EQ(loadText("fp8_ph_only", manifest({fp8Json()}, "21"), &b),
            FA_SUCCESS)
      << lastError();
  q.descale_block = 64;
  EXPECT_EQ(fa_kernel_find(b, &q, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("kernel for fwd f8e4m3 d=128 dv=128 "
                             "mask=causal (descale_block 64)"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("descale_block 0, but the query's "
                             "descale_block is 64"),
            std::string::npos)
      << lastError();
  fa_bundle_free(b);
}

//===----------------------------------------------------------------------===//
// The quantiser beside an fp8 forward (manifest "quantize", fa_quantize)
//===----------------------------------------------------------------------===//

/// fp8Json's kernel (tag `tag`) whose module also holds the quantiser of
/// `dtype` inputs, as fa-aot writes `...:quant=<dtype>`.
std::string quantizerJson(const std::string &dtype, const std::string &tag,
                          bool entries = true, int d = 128) {
  std::string json = fp8Json(
      R"(, "descale_param": 14, "quantize": ")" + dtype + R"(")", d, tag);
  std::string fwdEnd = R"("shared_bytes": 163840}})";
  size_t at = json.find(fwdEnd);
  if (entries && at != std::string::npos)
    json.replace(at, fwdEnd.size(),
                 R"("shared_bytes": 163840}, "quantize_amax": {"name":
                    "fa_quantize_amax_)" +
                     tag +
                     R"(", "threads": 256, "shared_bytes": 64}, "quantize":
                    {"name": "fa_quantize_)" +
                     tag + R"(", "threads": 256, "shared_bytes": 64}})");
  return json;
}

/// A valid quantisation of x [2, 8, 100, 128] bf16: per group of 4 heads
/// (descale [2, 2], workspace [2, 8, 2]) or, with `block`, per 64 rows.
fa_quantize_args quantizeArgs(bool block) {
  fa_quantize_args a{};
  a.x = tensor(addr(1), FA_DTYPE_BF16, {2, 8, 100, 128});
  a.x8 = tensor(addr(2), FA_DTYPE_F8E4M3, {2, 8, 100, 128});
  if (block) {
    a.descale = tensor(addr(3), FA_DTYPE_F32, {2, 8, 2});
  } else {
    a.descale = tensor(addr(3), FA_DTYPE_F32, {2, 2});
    a.workspace = tensor(addr(4), FA_DTYPE_F32, {2, 8, 2});
  }
  return a;
}

class Quantize : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(
        loadText("quantize",
                 manifest({fp8Json(), quantizerJson("bf16", "q16")}, "12"),
                 &bundle),
        FA_SUCCESS)
        << lastError();
    plain = fa_bundle_kernel_at(bundle, 0);
    quantizer = fa_bundle_kernel_at(bundle, 1);
  }
  void TearDown() override { fa_bundle_free(bundle); }
  void expectError(const fa_quantize_args &a, const std::string &part) {
    EXPECT_EQ(fa_quantize_check(quantizer, &a), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(part), std::string::npos) << lastError();
  }
  fa_bundle *bundle = nullptr;
  const fa_kernel *plain = nullptr, *quantizer = nullptr;
};

TEST_F(Quantize, Search) {
  const fa_kernel *found = nullptr;
  ASSERT_EQ(fa_kernel_find_quantize(bundle, FA_DTYPE_BF16, 128, &found),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(found, quantizer);
  EXPECT_EQ(fa_kernel_find_quantize(bundle, FA_DTYPE_F16, 128, &found),
            FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("quantises f16 inputs at head dim 128"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(found, nullptr);
  EXPECT_EQ(fa_kernel_find_quantize(bundle, FA_DTYPE_BF16, 256, &found),
            FA_ERROR_NOT_FOUND);
  EXPECT_EQ(fa_kernel_find_quantize(nullptr, FA_DTYPE_BF16, 128, &found),
            FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(Quantize, ValidCalls) {
  for (bool block : {false, true}) {
    fa_quantize_args a = quantizeArgs(block);
    EXPECT_EQ(fa_quantize_check(quantizer, &a), FA_SUCCESS) << lastError();
    a.rotate = 1;
    EXPECT_EQ(fa_quantize_check(quantizer, &a), FA_SUCCESS) << lastError();
  }
  // One factor per head (G = H) and for the whole batch entry (G = 1).
  for (int64_t groups : {1, 8}) {
    fa_quantize_args a = quantizeArgs(false);
    a.descale = tensor(addr(3), FA_DTYPE_F32, {2, groups});
    EXPECT_EQ(fa_quantize_check(quantizer, &a), FA_SUCCESS) << lastError();
  }
}

TEST_F(Quantize, RefusesKernelsWithoutQuantiser) {
  fa_quantize_args a = quantizeArgs(false);
  EXPECT_EQ(fa_quantize_check(plain, &a), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("has no quantiser (build an fp8 forward with "
                             "the config field 'quant=<bf16|f16|f32>')"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_quantize_check(quantizer, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_quantize_check(nullptr, &a), FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(Quantize, RefusesBadArguments) {
  fa_quantize_args a = quantizeArgs(false);
  a.x.dtype = FA_DTYPE_F16;
  expectError(a, "x.dtype is f16, expected bf16");
  a = quantizeArgs(false);
  a.x = tensor(addr(1), FA_DTYPE_BF16, {2, 8, 100, 64});
  expectError(a, "x.shape[3] is 64, expected the kernel's head dim 128");
  a = quantizeArgs(false);
  a.x8 = tensor(addr(2), FA_DTYPE_F8E4M3, {2, 8, 99, 128});
  expectError(a, "x8.shape is [2,8,99,128], expected [2,8,100,128]");
  a = quantizeArgs(false);
  a.x8.dtype = FA_DTYPE_BF16;
  expectError(a, "x8.dtype is bf16, expected f8e4m3");
  a = quantizeArgs(false);
  a.descale = tensor(addr(3), FA_DTYPE_F32, {2});
  expectError(a, "descale.rank is 1, expected 2 ([B, G]");
  a = quantizeArgs(false);
  a.descale = tensor(addr(3), FA_DTYPE_F32, {2, 3});
  expectError(a, "expected [2, G] with G dividing H = 8");
  a = quantizeArgs(false);
  a.workspace = fa_tensor{};
  expectError(a, "workspace.data is null");
  a = quantizeArgs(false);
  a.workspace = tensor(addr(4), FA_DTYPE_F32, {2, 8, 1});
  expectError(a, "workspace.shape is [2,8,1], expected [2,8,2]");
  a = quantizeArgs(true);
  a.descale = tensor(addr(3), FA_DTYPE_F32, {2, 8, 1});
  expectError(a, "descale.shape is [2,8,1], expected [2,8,2] ([B, H, "
                 "ceil(N/64)] from x)");
  a = quantizeArgs(true);
  a.workspace = tensor(addr(4), FA_DTYPE_F32, {2, 8, 2});
  expectError(a, "workspace is given for block descales");
  a = quantizeArgs(false);
  a.rotate = 2;
  expectError(a, "rotate is 2, expected 0 or 1");
  a = quantizeArgs(false);
  a.x8.data = a.x.data;
  expectError(a, "overlaps");
  a = quantizeArgs(false);
  a.x.data += 2; // 2 bytes past 16-byte alignment
  expectError(a, "is not 16-byte aligned");
}

TEST(QuantizeManifest, Refusals) {
  expectRejected("quantize_f64", manifest({quantizerJson("f64", "q64")}, "12"),
                 "field 'quantize' = 'f64', expected bf16, f16 or f32");
  expectRejected("quantize_no_entries",
                 manifest({quantizerJson("bf16", "qne", false)}, "12"),
                 "quantize_amax");
  std::string bf16 = wgmmaJson("b", "bf16", 128, "causal", true, abiMaps(),
                               R"(, "quantize": "bf16")");
  expectRejected("quantize_on_bf16", manifest({bf16}, "12"),
                 "field 'quantize' is given, but only f8e4m3 kernels hold "
                 "a quantiser");
}

/// Validation of a block-scaled fp8 forward: Nq 300 (5 query blocks) and Nk
/// 200 (4 key blocks), so the two block counts differ.
class Fp8BlockValidate : public Fp8ArgsTest {
protected:
  static constexpr int64_t Nq = 300, Nk = 200;

  void SetUp() override {
    ASSERT_EQ(
        loadText("fp8bv", manifest({fp8BlockJson(), fp8Json()}, "21"), &bundle),
        FA_SUCCESS)
        << lastError();
    block = fa_bundle_kernel_at(bundle, 0);
    perHead = fa_bundle_kernel_at(bundle, 1);
    setArgs(Nq, Nk);
    descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, H, 5});
    descales[1] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv, 4});
  }

  void expectRefused(const fa_kernel *kernel, const std::string &expect) {
    expectRefusedBy(kernel, expect);
  }

  const fa_kernel *block = nullptr, *perHead = nullptr;
};

TEST_F(Fp8BlockValidate, WellFormed) {
  EXPECT_EQ(fa_attention_forward_fp8_check(block, &args, descales), FA_SUCCESS)
      << lastError();
  // A last block of one row counts; 256 rows are 4 whole blocks.
  for (int64_t nq : {257, 256}) {
    args.q = tensor(addr(0), FA_DTYPE_F8E4M3, {B, H, nq, D});
    args.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, nq, D});
    args.lse = tensor(addr(4), FA_DTYPE_F32, {B, H, nq});
    if (nq == 257)
      EXPECT_EQ(fa_attention_forward_fp8_check(block, &args, descales),
                FA_SUCCESS)
          << lastError();
    else
      expectRefused(block, "descale_q.shape is [2,8,5], expected [2,8,4]");
  }
}

TEST_F(Fp8BlockValidate, BlockCounts) {
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, H, 4});
  expectRefused(block, "descale_q.shape is [2,8,4], expected [2,8,5] "
                       "([B,H,ceil(Nq/64)] from q)");
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, Hkv, 5});
  expectRefused(block, "descale_q.shape is [2,2,5], expected [2,8,5]");
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, H, 5});
  descales[1] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv, 5});
  expectRefused(block, "descale_k.shape is [2,2,5], expected [2,2,4] "
                       "([B,Hkv,ceil(Nk/64)] from k)");
  descales[1] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv, 4});
  descales[2] = tensor(addr(7), FA_DTYPE_F32, {B, Hkv, 4});
  expectRefused(block, "descale_v.rank is 3, expected 2");
  descales[2] = tensor(addr(7), FA_DTYPE_F32, {B, Hkv});
  descales[1].strides[2] = 2;
  expectRefused(block, "descale_k.strides are [8,4,2]");
  descales[1] = tensor(addr(3), FA_DTYPE_F32, {B, Hkv, 4});
  expectRefused(block, "overlaps");
}

TEST_F(Fp8BlockValidate, EachKernelItsOwnForm) {
  // Per-head descales to a block kernel, block ones to a per-head kernel:
  // refused, with the form the kernel reads.
  fa_tensor blockScales[3] = {descales[0], descales[1], descales[2]};
  descales[0] = tensor(addr(5), FA_DTYPE_F32, {B, Hkv});
  descales[1] = tensor(addr(6), FA_DTYPE_F32, {B, Hkv});
  expectRefused(block, "descale_q.rank is 2, expected 3; kernel 'f8bs' reads "
                       "Q and K descales per 64-row block");
  EXPECT_EQ(fa_attention_forward_fp8_check(perHead, &args, descales),
            FA_SUCCESS)
      << lastError();
  for (int i = 0; i < 3; ++i)
    descales[i] = blockScales[i];
  expectRefused(perHead, "descale_q.rank is 3, expected 2; kernel 'f8' reads "
                         "descales per batch and key head");
}

} // namespace
