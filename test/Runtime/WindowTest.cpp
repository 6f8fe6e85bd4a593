//===- WindowTest.cpp - GPU-free tests of run-time window kernels ---------===//
//
// The manifest fields of run-time window kernels (bundle version 17) and
// their search: fa_kernel_find binds the query's window to a view of the
// kernel (one per window, reporting its sizes), prefers a kernel compiled
// for the exact window, and refuses sizes below -1. Nothing calls the
// driver.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace fa_test;

namespace {

/// The wgmma forward fa-aot writes for `fwd:bf16:d128:window:wgmma` (its 11
/// parameters and 3 maps, strides from 14, the window sizes at 26), with
/// `window` the manifest's window fields.
std::string windowKernel(const std::string &tag,
                         const std::string &window = R"("window_left": -1,
                             "window_right": -1, "window_runtime": true,
                             "window_param": 26)",
                         const std::string &mask = "window") {
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 128, "block_kv": 128,
      "warps": 12, "stages": 2, "mask": ")" + mask + R"(", )" + window +
         R"(, "score_mod": null, "target": "sm_90a", "mma": "wgmma",
      "entries": {"fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 384, "shared_bytes": 163840}},
      "tensor_maps": [
        {"param": 11, "tensor": "q", "dims": ["head_dim", "nq", "heads", "batch"],
         "box": [64, 128, 1, 1], "swizzle": 128, "l2_promotion": 256,
         "oob_fill": "zero"},
        {"param": 12, "tensor": "k", "dims": ["head_dim", "nk", "kv_heads", "batch"],
         "box": [64, 128, 1, 1], "swizzle": 128, "l2_promotion": 256,
         "oob_fill": "zero"},
        {"param": 13, "tensor": "v", "dims": ["head_dim_v", "nk", "kv_heads", "batch"],
         "box": [64, 128, 1, 1], "swizzle": 128, "l2_promotion": 256,
         "oob_fill": "zero"}],
      "ptx": ")" + tag + R"(.ptx", "stride_param": 14})";
}

std::string manifest(const std::vector<std::string> &kernels,
                     const std::string &version = "17") {
  return manifestOf(kernels, version);
}

fa_kernel_query windowQuery(int left, int right) {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_WINDOW;
  q.window_left = left;
  q.window_right = right;
  q.compute_capability = 90;
  return q;
}

TEST(WindowManifest, FieldsAndVersion) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("window_ok", manifest({windowKernel("w")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  // A version-16 runtime would launch fa_fwd without its window sizes.
  expectRejected("window_v17", manifest({windowKernel("w")}, "16"),
                 "kernels[0]: run-time window kernels need bundle version 17, "
                 "the manifest says 16");
  expectRejected("window_param",
                 manifest({windowKernel("w", R"("window_left": -1,
                     "window_right": -1, "window_runtime": true,
                     "window_param": 25)")}),
                 "field 'window_param' = 25, expected 26 (the window sizes "
                 "are the last two parameters)");
  expectRejected("window_sizes",
                 manifest({windowKernel("w", R"("window_left": 128,
                     "window_right": 0, "window_runtime": true,
                     "window_param": 26)")}),
                 "fields 'window_left' and 'window_right' must be -1 for a "
                 "run-time window kernel");
  expectRejected("window_mask",
                 manifest({windowKernel("w", R"("window_left": -1,
                     "window_right": -1, "window_runtime": true,
                     "window_param": 26)", "causal")}),
                 "field 'window_runtime' is true, but only window kernels");
  expectRejected("window_type",
                 manifest({windowKernel("w", R"("window_left": -1,
                     "window_right": -1, "window_runtime": 1)")}),
                 "field 'window_runtime' must be true or false, got 1");
}

class WindowSearch : public ::testing::Test {
protected:
  void SetUp() override {
    // The run-time kernel, and one compiled for the window (128, 0).
    ASSERT_EQ(loadText("window_search",
                       manifest({windowKernel("rt"),
                                 windowKernel("exact", R"("window_left": 128,
                                     "window_right": 0)")}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }

  const fa_kernel *find(int left, int right) {
    fa_kernel_query q = windowQuery(left, right);
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
    return k;
  }
  static fa_kernel_info info(const fa_kernel *k) {
    fa_kernel_info i{};
    EXPECT_EQ(fa_kernel_get_info(k, &i), FA_SUCCESS) << lastError();
    return i;
  }

  fa_bundle *bundle = nullptr;
};

TEST_F(WindowSearch, ExactKernelFirst) {
  fa_kernel_info exact = info(find(128, 0));
  EXPECT_STREQ(exact.tag, "exact");
}

TEST_F(WindowSearch, OneViewPerWindow) {
  const fa_kernel *a = find(77, -1);
  ASSERT_NE(a, nullptr);
  fa_kernel_info i = info(a);
  EXPECT_STREQ(i.tag, "rt");
  EXPECT_EQ(i.window_left, 77);
  EXPECT_EQ(i.window_right, -1);
  EXPECT_EQ(find(77, -1), a);
  const fa_kernel *b = find(-1, -1);
  EXPECT_NE(b, a);
  EXPECT_EQ(info(b).window_left, -1);
  EXPECT_EQ(info(find(2147483647, 0)).window_left, 2147483647);
  // The bundle's own entry keeps the unbound sizes.
  EXPECT_EQ(info(fa_bundle_kernel_at(bundle, 0)).window_left, -1);
}

TEST_F(WindowSearch, RejectsSizesBelowMinusOne) {
  fa_kernel_query q = windowQuery(-2, 0);
  const fa_kernel *k = nullptr;
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("window (-2, 0); expected sizes >= 0, or -1 "
                             "for an unbounded side"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(k, nullptr);
}

TEST(WindowSearchExactOnly, UnboundedSideFindsNoCompiledKernel) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("window_exact_only",
                     manifest({windowKernel("exact", R"("window_left": 128,
                         "window_right": 0)")}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = windowQuery(-1, 0);
  const fa_kernel *k = nullptr;
  EXPECT_EQ(fa_kernel_find(b, &q, &k), FA_ERROR_NOT_FOUND);
  fa_bundle_free(b);
}

} // namespace
