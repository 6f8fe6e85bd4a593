//===- SinksTest.cpp - GPU-free tests of the attention sinks' runtime -----===//
//
// The manifest fields of kernels with sinks (bundle version 13), their
// search, and the checks of fa_attention_{forward,backward}_sinks: the
// kernel/launch pairing both ways, every rejection of sinks and d_sinks, and
// the accepted calls, with fake device addresses: nothing calls the driver.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace fa_test;

namespace {

/// The mma.sync forward fa-aot writes for `fwd:bf16:d128:causal:sinks`
/// (strides from 11, sinks at 23), with `extra` members appended.
std::string forwardKernel(const std::string &tag,
                          const std::string &extra = R"(, "sinks": true,
                              "sinks_param": 23)") {
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 64, "block_kv": 64,
      "warps": 4, "stages": 2, "mask": "causal", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a",
      "entries": {"fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 128, "shared_bytes": 87040}},
      "ptx": ")" + tag + R"(.ptx", "stride_param": 11)" + extra + "}";
}

/// The mma.sync backward of `bwd:bf16:d128:causal:sinks`: the plain
/// kernel's three entries and bwd_sink (`extra` appended; `sinkEntry`
/// false leaves bwd_sink out).
std::string backwardKernel(const std::string &tag,
                           const std::string &extra = R"(, "sinks": true)",
                           bool sinkEntry = true) {
  auto entry = [&](const char *key, const char *prefix, int shared) {
    return std::string("\"") + key + R"(": {"name": ")" + prefix + tag +
           R"(", "threads": 256, "shared_bytes": )" + std::to_string(shared) +
           "}";
  };
  std::string entries = entry("bwd_pre", "fa_bwd_pre_", 0) + ", " +
                        entry("bwd", "fa_bwd_", 73728) + ", " +
                        entry("bwd_post", "fa_bwd_post_", 0);
  if (sinkEntry)
    entries += ", " + entry("bwd_sink", "fa_bwd_sink_", 32);
  return R"({"tag": ")" + tag + R"(", "direction": "bwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 64, "block_kv": 128,
      "warps": 8, "stages": 1, "dsplit": 1, "mask": "causal",
      "window_left": -1, "window_right": -1, "score_mod": null,
      "target": "sm_90a", "entries": {)" +
         entries + R"(}, "ptx": ")" + tag + R"(.ptx", "stride_param": 15)" +
         extra + "}";
}

std::string manifest(const std::vector<std::string> &kernels,
                     const std::string &version = "13") {
  return manifestOf(kernels, version);
}

TEST(SinksManifest, FieldsAndVersion) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("sinks_ok",
                     manifest({forwardKernel("f"), backwardKernel("b")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.sinks, 1);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.sinks, 1);
  fa_bundle_free(b);
  // A version-12 runtime would launch fa_fwd without its last parameter.
  expectRejected("sinks_v13", manifest({forwardKernel("f")}, "12"),
                 "kernels[0]: kernels with sinks need bundle version 13, the "
                 "manifest says 12");
  expectRejected("sinks_newer", manifest({forwardKernel("f")}, newerVersion()),
                 newerVersionRejected());
  expectRejected("sinks_param",
                 manifest({forwardKernel("f", R"(, "sinks": true,
                                                 "sinks_param": 22)")}),
                 "field 'sinks_param' = 22, expected 23 (the sinks follow "
                 "every other parameter of fa_fwd, the mod_args included)");
  expectRejected("sinks_noparam",
                 manifest({forwardKernel("f", R"(, "sinks": true)")}),
                 "sinks_param");
  expectRejected("sinks_type", manifest({forwardKernel("f", R"(, "sinks": 1)")}),
                 "field 'sinks' must be true or false, got 1");
  expectRejected("sinks_bwd_param",
                 manifest({backwardKernel("b", R"(, "sinks": true,
                                                  "sinks_param": 30)")}),
                 "field 'sinks_param' is for forward kernels");
  expectRejected("sinks_bwd_entry",
                 manifest({backwardKernel("b", R"(, "sinks": true)", false)}),
                 "bwd_sink");
  expectRejected("sinks_packed",
                 manifest({forwardKernel("f", R"(, "sinks": true,
                     "sinks_param": 23, "pack_gqa": true)")}),
                 "field 'sinks' is true, but block-sparse, fp8 and unsplit "
                 "packed-GQA kernels have no sinks");
}

/// The split-KV forward fa-aot writes for `fwd:bf16:d128:none:splitkv`
/// (strides from 12), `extra` appended: by default the sinks of its merge
/// (after o_part, lse_part, o, lse, rows, splits, heads, nq and o's
/// strides: 11).
std::string splitKernel(const std::string &tag,
                        const std::string &extra = R"(, "sinks": true,
                            "sinks_param": 11)") {
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 64, "block_kv": 64,
      "warps": 4, "stages": 2, "mask": "none", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a",
      "split_kv": true, "entries": {
        "fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 128, "shared_bytes": 49152},
        "merge": {"name": "fa_merge_)" + tag +
         R"(", "threads": 128, "shared_bytes": 0}},
      "ptx": ")" + tag + R"(.ptx", "stride_param": 12)" + extra + "}";
}

TEST(SinksManifest, SplitKvMergeTakesTheSinks) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("sinks_split", manifest({splitKernel("s")}, "15"), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.sinks, 1);
  EXPECT_EQ(info.split_kv, 1);
  fa_bundle_free(b);
  // A version-14 runtime refuses sinks on a split kernel; the version says
  // so up front.
  expectRejected("sinks_split_v14", manifest({splitKernel("s")}, "14"),
                 "kernels[0]: split-KV kernels with sinks need bundle version "
                 "15, the manifest says 14");
  expectRejected("sinks_split_param",
                 manifest({splitKernel("s", R"(, "sinks": true,
                                                "sinks_param": 24)")},
                          "15"),
                 "field 'sinks_param' = 24, expected 11 (a split-KV kernel's "
                 "merge takes the sinks after its 8 parameters and o's "
                 "strides)");
}


/// A bundle with a forward and a backward with sinks and the same two
/// without, all bf16 d128 causal mma.sync.
class SinksApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 8, Hkv = 2, Nq = 300, Nk = 500, D = 128;
  void SetUp() override {
    ASSERT_EQ(loadText("sinks_api",
                       manifest({forwardKernel("fs"), backwardKernel("bs"),
                                 forwardKernel("fp", ""),
                                 backwardKernel("bp", "", false)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fwdSinks = fa_bundle_kernel_at(bundle, 0);
    bwdSinks = fa_bundle_kernel_at(bundle, 1);
    fwdPlain = fa_bundle_kernel_at(bundle, 2);
    bwdPlain = fa_bundle_kernel_at(bundle, 3);
    fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    f.q = tensor(addr(0), bf, {B, H, Nq, D});
    f.k = tensor(addr(1), bf, {B, Hkv, Nk, D});
    f.v = tensor(addr(2), bf, {B, Hkv, Nk, D});
    f.o = tensor(addr(3), bf, {B, H, Nq, D});
    f.lse = tensor(addr(4), f32, {B, H, Nq});
    f.scale = 1.0f / std::sqrt(float(D));
    g.q = f.q, g.k = f.k, g.v = f.v, g.o = f.o, g.lse = f.lse;
    g.d_o = tensor(addr(5), bf, {B, H, Nq, D});
    g.dq = tensor(addr(6), bf, {B, H, Nq, D});
    g.dk = tensor(addr(7), bf, {B, Hkv, Nk, D});
    g.dv = tensor(addr(8), bf, {B, Hkv, Nk, D});
    g.delta = tensor(addr(9), f32, {B, H, Nq});
    g.dq_accum = tensor(addr(10), f32, {B, H, Nq, D});
    g.scale = f.scale;
    sinks = tensor(addr(11), f32, {H});
    dSinks = tensor(addr(12), f32, {H});
  }
  void TearDown() override { fa_bundle_free(bundle); }

  fa_status forward(const fa_tensor *s) {
    return fa_attention_forward_sinks_check(fwdSinks, &f, nullptr, 0, s);
  }
  fa_status backward(const fa_tensor *s, const fa_tensor *ds) {
    return fa_attention_backward_sinks_check(bwdSinks, &g, nullptr, 0, s, ds);
  }
public:
  /// Expects `status` to be FA_ERROR_INVALID_ARGUMENT with `expect` in the
  /// message.
  static void expectInvalid(fa_status status, const std::string &expect) {
    EXPECT_EQ(status, FA_ERROR_INVALID_ARGUMENT) << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

protected:
  fa_bundle *bundle = nullptr;
  const fa_kernel *fwdSinks = nullptr, *bwdSinks = nullptr,
                  *fwdPlain = nullptr, *bwdPlain = nullptr;
  fa_attention_args f{};
  fa_attention_backward_args g{};
  fa_tensor sinks{}, dSinks{};
};

TEST_F(SinksApi, SearchMatchesTheQuerysSinks) {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_CAUSAL;
  q.compute_capability = 90;
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, fwdPlain);
  q.sinks = 1;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, fwdSinks);
  q.direction = FA_DIRECTION_BWD;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, bwdSinks);
  q.sinks = 0;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, bwdPlain);
  // No window kernel with sinks: the message says what was asked.
  q.sinks = 1;
  q.mask = FA_MASK_NONE;
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("(sinks)"), std::string::npos) << lastError();
}

TEST_F(SinksApi, AcceptsValidCalls) {
  EXPECT_EQ(forward(&sinks), FA_SUCCESS) << lastError();
  EXPECT_EQ(backward(&sinks, &dSinks), FA_SUCCESS) << lastError();
  // The plain kernels with the plain checks, as before.
  EXPECT_EQ(fa_attention_forward_check(fwdPlain, &f), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_backward_check(bwdPlain, &g), FA_SUCCESS)
      << lastError();
  // Queries that launch nothing need no sinks.
  unsigned grids[3][3];
  EXPECT_EQ(fa_attention_backward_grids(bwdSinks, &g, grids), FA_SUCCESS)
      << lastError();
}

TEST_F(SinksApi, KernelAndLaunchMustAgree) {
  // A sink kernel through the plain and _ex launches would run without its
  // last parameter or never run bwd_sink.
  expectInvalid(fa_attention_forward_check(fwdSinks, &f),
                "kernel 'fs' has attention sinks; launch it with "
                "fa_attention_forward_sinks and a sinks tensor f32 [H]");
  expectInvalid(fa_attention_forward_check_ex(fwdSinks, &f, nullptr, 0),
                "has attention sinks");
  expectInvalid(fa_attention_backward_check(bwdSinks, &g),
                "kernel 'bs' has attention sinks; launch it with "
                "fa_attention_backward_sinks");
  // The _sinks launches of a kernel without sinks.
  expectInvalid(fa_attention_forward_sinks_check(fwdPlain, &f, nullptr, 0,
                                                 &sinks),
                "kernel 'fp' has no attention sinks; launch it with "
                "fa_attention_forward (or _ex)");
  expectInvalid(fa_attention_backward_sinks_check(bwdPlain, &g, nullptr, 0,
                                                  &sinks, &dSinks),
                "kernel 'bp' has no attention sinks");
  // The launches refuse before touching the driver.
  expectInvalid(fa_attention_forward(fwdSinks, &f, nullptr),
                "has attention sinks");
  expectInvalid(fa_attention_backward(bwdSinks, &g, nullptr),
                "has attention sinks");
  expectInvalid(fa_attention_forward_sinks(fwdPlain, &f, nullptr, 0, &sinks,
                                           nullptr),
                "has no attention sinks");
  expectInvalid(fa_attention_backward_sinks(bwdPlain, &g, nullptr, 0, &sinks,
                                            &dSinks, nullptr),
                "has no attention sinks");
}

TEST_F(SinksApi, RejectsBadSinks) {
  expectInvalid(forward(nullptr),
                "sinks is null; a kernel with sinks takes them as f32 [H]");
  expectInvalid(backward(nullptr, &dSinks), "sinks is null");
  fa_tensor t = sinks;
  t.data = 0;
  expectInvalid(forward(&t), "sinks.data is null");
  t = tensor(addr(11), FA_DTYPE_BF16, {H});
  expectInvalid(forward(&t), "sinks.dtype is bf16, expected f32");
  t = tensor(addr(11), FA_DTYPE_F32, {1, H});
  expectInvalid(forward(&t), "sinks.rank is 2, expected 1");
  t = tensor(addr(11), FA_DTYPE_F32, {Hkv});
  expectInvalid(forward(&t), "sinks.shape is [2], expected [8] ([H], one "
                             "logit per query head of q)");
  t = sinks;
  t.strides[0] = 2;
  expectInvalid(forward(&t), "sinks.strides are [2]");
  t = sinks;
  t.data += 4;
  expectInvalid(forward(&t), "is not 16-byte aligned");
  // Sinks inside an output.
  t = sinks;
  t.data = f.o.data + 64;
  expectInvalid(forward(&t), "output o");
  // The same rules in the backward.
  t = tensor(addr(11), FA_DTYPE_F32, {H + 1});
  expectInvalid(backward(&t, &dSinks), "sinks.shape is [9], expected [8]");
}

TEST_F(SinksApi, RejectsBadSinkGradients) {
  expectInvalid(backward(&sinks, nullptr),
                "d_sinks is null; a backward with sinks writes d_sinks f32 "
                "[H]");
  fa_tensor t = tensor(addr(12), FA_DTYPE_F16, {H});
  expectInvalid(backward(&sinks, &t), "d_sinks.dtype is f16, expected f32");
  t = tensor(addr(12), FA_DTYPE_F32, {H * 2});
  expectInvalid(backward(&sinks, &t),
                "d_sinks.shape is [16], expected [8] ([H], the gradient of "
                "sinks)");
  t = dSinks;
  t.data += 8;
  expectInvalid(backward(&sinks, &t), "is not 16-byte aligned");
  // d_sinks is an output: over the sinks, over an input, over dq.
  expectInvalid(backward(&sinks, &sinks), "output d_sinks");
  t = dSinks;
  t.data = g.lse.data;
  expectInvalid(backward(&sinks, &t), "output d_sinks");
  t = dSinks;
  t.data = g.dq.data;
  expectInvalid(backward(&sinks, &t), "overlaps");
}

/// A split-KV kernel with sinks and its plain twin: the split launches'
/// pairing and the sinks' checks (GPU-free).
class SplitSinksApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 1, H = 32, Hkv = 8, Nq = 1, Nk = 4096, D = 128;
  void SetUp() override {
    ASSERT_EQ(loadText("sinks_split_api",
                       manifest({splitKernel("ss"), splitKernel("sp", "")},
                                "15"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    withSinks = fa_bundle_kernel_at(bundle, 0);
    plain = fa_bundle_kernel_at(bundle, 1);
    fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    f.q = tensor(addr(0), bf, {B, H, Nq, D});
    f.k = tensor(addr(1), bf, {B, Hkv, Nk, D});
    f.v = tensor(addr(2), bf, {B, Hkv, Nk, D});
    f.o = tensor(addr(3), bf, {B, H, Nq, D});
    f.lse = tensor(addr(4), f32, {B, H, Nq});
    f.scale = 1.0f / std::sqrt(float(D));
    sinks = tensor(addr(5), f32, {H});
    ASSERT_EQ(fa_splitkv_workspace_bytes(withSinks, B, H, Nq, splits, &bytes),
              FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }
  fa_status check(const fa_kernel *k, const fa_tensor *s) {
    return fa_attention_forward_splitkv_sinks_check(k, &f, workspace, bytes,
                                                    splits, nullptr, 0, s);
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *withSinks = nullptr, *plain = nullptr;
  fa_attention_args f{};
  fa_tensor sinks{};
  static constexpr int32_t splits = 8;
  CUdeviceptr workspace = addr(6);
  uint64_t bytes = 0;
};

TEST_F(SplitSinksApi, PairsKernelAndLaunch) {
  EXPECT_EQ(check(withSinks, &sinks), FA_SUCCESS) << lastError();
  EXPECT_EQ(fa_attention_forward_splitkv_check(plain, &f, workspace, bytes,
                                               splits),
            FA_SUCCESS)
      << lastError();
  SinksApi::expectInvalid(
      fa_attention_forward_splitkv_check(withSinks, &f, workspace, bytes,
                                         splits),
      "kernel 'ss' has attention sinks; launch it with "
      "fa_attention_forward_splitkv_sinks and a sinks tensor f32 [H]");
  SinksApi::expectInvalid(check(plain, &sinks),
                          "kernel 'sp' has no attention sinks; launch it with "
                          "fa_attention_forward_splitkv (or _ex)");
  SinksApi::expectInvalid(
      fa_attention_forward_splitkv_sinks(plain, &f, workspace, bytes, splits,
                                         nullptr, 0, &sinks, nullptr),
      "has no attention sinks");
  // The search: query.sinks picks the kernel with sinks.
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_NONE;
  q.compute_capability = 90;
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find_splitkv(bundle, &q, Nk, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, plain);
  q.sinks = 1;
  ASSERT_EQ(fa_kernel_find_splitkv(bundle, &q, Nk, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, withSinks);
}

TEST_F(SplitSinksApi, RejectsBadSinks) {
  SinksApi::expectInvalid(check(withSinks, nullptr), "sinks is null");
  fa_tensor t = tensor(addr(5), FA_DTYPE_F32, {Hkv});
  SinksApi::expectInvalid(check(withSinks, &t),
                          "sinks.shape is [8], expected [32]");
  t = sinks;
  t.data += 4;
  SinksApi::expectInvalid(check(withSinks, &t), "is not 16-byte aligned");
  // Sinks inside the workspace, which the split forward writes.
  t = sinks;
  t.data = workspace + 256;
  SinksApi::expectInvalid(check(withSinks, &t), "workspace");
}

} // namespace
