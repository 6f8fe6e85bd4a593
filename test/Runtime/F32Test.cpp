//===- F32Test.cpp - GPU-free tests of f32 and TF32 kernels ---------------===//
//
// f32 forwards (dtype "f32"; "tf32": true for the TF32 ones): the manifest
// fields, fa_kernel_get_info, the search by fa_kernel_query.allow_tf32 and
// the argument checks of 4-byte q, k, v and o (dtypes, alignment in bytes,
// strides, overlap), with fake device addresses: nothing calls the driver.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace fa_test;

namespace {

/// The strided mma.sync forward fa-aot writes for `fwd:<dtype>:d<d>:<mask>`
/// on `target` (`_tf32` and "tf32": true with tf32), `extra` appended.
std::string forwardKernel(const std::string &dtype, int d,
                          const std::string &mask, bool tf32,
                          const std::string &target = "sm_90a",
                          const std::string &extra = "") {
  std::string arch = target.substr(3);
  std::string tag = "fwd_" + dtype + "_d" + std::to_string(d) +
                    "_bq64_bkv64_w4_s2_" + mask + "_sm" + arch +
                    (tf32 ? "_tf32" : "");
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": ")" + dtype +
         R"(", "head_dim": )" + std::to_string(d) + R"(, "head_dim_v": )" +
         std::to_string(d) +
         R"(, "block_q": 64, "block_kv": 64, "warps": 4, "stages": 2,
      "mask": ")" +
         mask + R"(", "window_left": -1, "window_right": -1,
      "score_mod": null, "target": ")" +
         target + R"(", "entries": {"fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 128, "shared_bytes": 65536}}, "ptx": ")" + tag +
         R"(.ptx", "stride_param": 11, "tf32": )" + (tf32 ? "true" : "false") +
         extra + "}";
}

std::string manifest(const std::vector<std::string> &kernels) {
  return manifestOf(kernels, "7");
}

fa_kernel_query f32Query(fa_mask mask, int allowTf32, int cc = 90) {
  fa_kernel_query q = forwardQuery(64);
  q.dtype = FA_DTYPE_F32;
  q.mask = mask;
  q.compute_capability = cc;
  q.allow_tf32 = allowTf32;
  return q;
}

TEST(F32Manifest, DtypeAndTf32) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("f32_ok",
                     manifest({forwardKernel("f32", 64, "none", false),
                               forwardKernel("f32", 64, "none", true),
                               forwardKernel("bf16", 64, "none", false)}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.dtype, FA_DTYPE_F32);
  EXPECT_EQ(info.tf32, 0);
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 1), &info), FA_SUCCESS);
  EXPECT_EQ(info.dtype, FA_DTYPE_F32);
  EXPECT_EQ(info.tf32, 1);
  EXPECT_STREQ(info.tag, "fwd_f32_d64_bq64_bkv64_w4_s2_none_sm90a_tf32");
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 2), &info), FA_SUCCESS);
  EXPECT_EQ(info.tf32, 0);
  fa_bundle_free(b);

  expectRejected("tf32_bf16",
                 manifest({forwardKernel("bf16", 64, "none", true)}),
                 "kernels[0] ('fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_tf32'"
                 "): field 'tf32' is true, but dtype is 'bf16'; only f32 "
                 "kernels multiply in TF32");
  expectRejected("tf32_f16", manifest({forwardKernel("f16", 64, "none", true)}),
                 "dtype is 'f16'");
  // Absent or null: not TF32; anything but a boolean is refused.
  std::string plain = forwardKernel("f32", 64, "none", false);
  plain.erase(plain.find(R"(, "tf32": false)"), 15);
  ASSERT_EQ(loadText("tf32_absent", manifest({plain}), &b), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.tf32, 0);
  fa_bundle_free(b);
  ASSERT_EQ(loadText("tf32_null",
                     manifest({forwardKernel("f32", 64, "none", false, "sm_90a",
                                             R"(, "tf32": null)")}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_bundle_free(b);
  expectRejected("tf32_int",
                 manifest({forwardKernel("f32", 64, "none", false, "sm_90a",
                                         R"(, "tf32": 1)")}),
                 "field 'tf32' must be true or false, got 1");
}

/// A bundle with TF32 and f32-accurate kernels: both for no mask (and an
/// accurate sm_80 one), only the accurate one causal, only a TF32 one
/// causal_bottom_right, and for a window TF32 sm_80 PTX beside an accurate
/// sm_90a cubin.
class F32Find : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string window = R"(, "window_left": 16, "window_right": 0)";
    ASSERT_EQ(
        loadText(
            "f32_find",
            manifest({forwardKernel("f32", 64, "none", false),
                      forwardKernel("f32", 64, "none", true),
                      forwardKernel("f32", 64, "none", false, "sm_80"),
                      forwardKernel("f32", 64, "causal", false),
                      forwardKernel("f32", 64, "causal_bottom_right", true),
                      forwardKernel("f32", 64, "window", true, "sm_80", window),
                      forwardKernel("f32", 64, "window", false, "sm_90a",
                                    window + R"(, "cubin": "w.cubin")"),
                      forwardKernel("bf16", 64, "none", false)}),
            &bundle),
        FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }

  std::string find(const fa_kernel_query &q, fa_status expect = FA_SUCCESS) {
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find(bundle, &q, &k), expect) << lastError();
    return k ? kernelTag(k) : "";
  }
  fa_bundle *bundle = nullptr;
};

TEST_F(F32Find, Tf32OnlyWhenAllowedAndThenPreferred) {
  EXPECT_EQ(find(f32Query(FA_MASK_NONE, 1)),
            "fwd_f32_d64_bq64_bkv64_w4_s2_none_sm90a_tf32");
  EXPECT_EQ(find(f32Query(FA_MASK_NONE, 0)),
            "fwd_f32_d64_bq64_bkv64_w4_s2_none_sm90a");
  // Allowed, not required: the accurate kernel where there is no TF32 one.
  EXPECT_EQ(find(f32Query(FA_MASK_CAUSAL, 1)),
            "fwd_f32_d64_bq64_bkv64_w4_s2_causal_sm90a");
  // The ranking and its tie-breaks hold for the other searches too.
  const fa_kernel *k = nullptr;
  fa_kernel_query q = f32Query(FA_MASK_NONE, 1);
  ASSERT_EQ(fa_kernel_find_for_keys(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(kernelTag(k), "fwd_f32_d64_bq64_bkv64_w4_s2_none_sm90a_tf32");
}

TEST_F(F32Find, Tf32WinsOverNativeCodeButOnlyWhereItRuns) {
  fa_kernel_query q = f32Query(FA_MASK_WINDOW, 1);
  q.window_left = 16;
  q.window_right = 0;
  // TF32 PTX for sm_80 over the accurate sm_90a cubin on sm_90 ...
  EXPECT_EQ(find(q), "fwd_f32_d64_bq64_bkv64_w4_s2_window_sm80_tf32");
  q.allow_tf32 = 0;
  EXPECT_EQ(find(q), "fwd_f32_d64_bq64_bkv64_w4_s2_window_sm90a");
  // ... but sm_90a TF32 code is no choice on sm_80.
  EXPECT_EQ(find(f32Query(FA_MASK_NONE, 1, 80)),
            "fwd_f32_d64_bq64_bkv64_w4_s2_none_sm80");
}

TEST_F(F32Find, OnlyTf32KernelsNeedAllowTf32) {
  find(f32Query(FA_MASK_CAUSAL_BOTTOM_RIGHT, 0), FA_ERROR_NOT_FOUND);
  std::string err = lastError();
  EXPECT_NE(err.find("has no kernel for fwd f32 d=64 dv=64 "
                     "mask=causal_bottom_right; the bundle has a TF32 kernel "
                     "for it (fa_kernel_info.tf32), but the query's "
                     "allow_tf32 is 0"),
            std::string::npos)
      << err;
  // The bundle's list marks the TF32 kernels.
  EXPECT_NE(err.find("fwd f32 d=64 dv=64 mask=causal_bottom_right (tf32) "
                     "(sm_90a)"),
            std::string::npos)
      << err;
  EXPECT_EQ(find(f32Query(FA_MASK_CAUSAL_BOTTOM_RIGHT, 1)),
            "fwd_f32_d64_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_tf32");
  // A miss with TF32 allowed says so, and has no TF32 hint.
  fa_kernel_query d128 = f32Query(FA_MASK_NONE, 1);
  d128.head_dim = 128;
  find(d128, FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("no kernel for fwd f32 d=128 dv=128 mask=none "
                             "(tf32 allowed); it has:"),
            std::string::npos)
      << lastError();
}

TEST_F(F32Find, OtherDtypesIgnoreAllowTf32) {
  fa_kernel_query q = f32Query(FA_MASK_NONE, 1);
  q.dtype = FA_DTYPE_BF16;
  EXPECT_EQ(find(q), "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a");
  q.allow_tf32 = 0;
  EXPECT_EQ(find(q), "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a");
  // Nor does a bf16 query take an f32 kernel.
  q.mask = FA_MASK_CAUSAL;
  find(q, FA_ERROR_NOT_FOUND);
  EXPECT_EQ(lastError().find("TF32 kernel for it"), std::string::npos)
      << lastError();
}

/// Forward arguments of `dtype` for [B,H,Nq,D] / [B,Hkv,Nk,D] at fake,
/// well-separated addresses.
fa_attention_args forwardArgs(fa_dtype dtype, int64_t d = 64) {
  const int64_t B = 2, H = 4, Hkv = 2, Nq = 100, Nk = 300;
  fa_attention_args a{};
  a.q = tensor(addr(0), dtype, {B, H, Nq, d});
  a.k = tensor(addr(1), dtype, {B, Hkv, Nk, d});
  a.v = tensor(addr(2), dtype, {B, Hkv, Nk, d});
  a.o = tensor(addr(3), dtype, {B, H, Nq, d});
  a.lse = tensor(addr(4), FA_DTYPE_F32, {B, H, Nq});
  a.scale = 0.125f;
  return a;
}

/// An f32 forward (kernel 0), its TF32 twin (1) and a bf16 one (2), d64,
/// strided like fa-aot's; d34 f32 ones (3) for narrow rows.
class F32Validate : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(loadText("f32_validate",
                       manifest({forwardKernel("f32", 64, "none", false),
                                 forwardKernel("f32", 64, "none", true),
                                 forwardKernel("bf16", 64, "none", false),
                                 forwardKernel("f32", 34, "none", false)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    f32 = fa_bundle_kernel_at(bundle, 0);
    tf32 = fa_bundle_kernel_at(bundle, 1);
    bf16 = fa_bundle_kernel_at(bundle, 2);
    narrow = fa_bundle_kernel_at(bundle, 3);
  }
  void TearDown() override { fa_bundle_free(bundle); }

  /// Expects `k` to reject `a` with `expect` in the message.
  void reject(const fa_kernel *k, const fa_attention_args &a,
              const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_check(k, &a), FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *f32 = nullptr, *tf32 = nullptr, *bf16 = nullptr,
                  *narrow = nullptr;
};

TEST_F(F32Validate, DtypesOfTheKernel) {
  fa_attention_args a = forwardArgs(FA_DTYPE_F32);
  for (const fa_kernel *k : {f32, tf32})
    EXPECT_EQ(fa_attention_forward_check(k, &a), FA_SUCCESS) << lastError();
  reject(bf16, a, "q.dtype is f32, expected bf16");
  fa_attention_args b = forwardArgs(FA_DTYPE_BF16);
  EXPECT_EQ(fa_attention_forward_check(bf16, &b), FA_SUCCESS) << lastError();
  reject(f32, b, "q.dtype is bf16, expected f32");
  reject(tf32, b, "q.dtype is bf16, expected f32");
  // One tensor of another dtype is named; lse stays f32 (not the dtype).
  fa_attention_args mixed = a;
  mixed.v.dtype = FA_DTYPE_BF16;
  reject(f32, mixed, "v.dtype is bf16, expected f32");
  mixed = a;
  mixed.o.dtype = FA_DTYPE_F16;
  reject(f32, mixed, "o.dtype is f16, expected f32");
  mixed = a;
  mixed.lse.dtype = FA_DTYPE_BF16;
  reject(f32, mixed, "lse.dtype is bf16, expected f32");
}

TEST_F(F32Validate, SixteenBytesAreFourElements) {
  fa_attention_args a = forwardArgs(FA_DTYPE_F32);
  a.k.data += 8;
  reject(f32, a, "k.data 0x7f0100000008 is not 16-byte aligned");
  // A row stride of 68 elements (a padded [.., 64] buffer): 272 bytes, a
  // multiple of 16 for f32, not for bf16 (136 bytes).
  for (fa_dtype dtype : {FA_DTYPE_F32, FA_DTYPE_BF16}) {
    fa_attention_args p = forwardArgs(dtype);
    const int64_t H = p.q.shape[1], N = p.q.shape[2];
    p.q.strides[2] = 68;
    p.q.strides[1] = 68 * N;
    p.q.strides[0] = 68 * N * H;
    if (dtype == FA_DTYPE_F32)
      EXPECT_EQ(fa_attention_forward_check(f32, &p), FA_SUCCESS) << lastError();
    else
      reject(bf16, p,
             "q.strides are [27200,6800,68,1]: stride 68 of "
             "dimension 2 must be positive and a multiple of 8 "
             "elements (rows 16-byte aligned)");
  }
  fa_attention_args p = forwardArgs(FA_DTYPE_F32);
  p.o.strides[2] = 66;
  p.o.strides[1] = 66 * 100;
  p.o.strides[0] = 66 * 100 * 4;
  reject(f32, p,
         "stride 66 of dimension 2 must be positive and a "
         "multiple of 4 elements (rows 16-byte aligned)");
}

TEST_F(F32Validate, NarrowRowsInBytes) {
  // Rows of 34 f32 are 136 bytes: 8-byte aligned at best, 2 elements.
  fa_attention_args a = forwardArgs(FA_DTYPE_F32, 34);
  a.q.data += 8;
  EXPECT_EQ(fa_attention_forward_check(narrow, &a), FA_SUCCESS) << lastError();
  a.q.data += 4;
  reject(narrow, a,
         "q.data 0x7f000000000c is not 8-byte aligned (kernel "
         "'fwd_f32_d34_bq64_bkv64_w4_s2_none_sm90a' reads and writes its rows "
         "of 34 f32 elements 8 bytes at a time)");
  fa_attention_args s = forwardArgs(FA_DTYPE_F32, 34);
  s.v.strides[2] = 36; // 144 bytes
  s.v.strides[1] = 36 * 300;
  s.v.strides[0] = 36 * 300 * 2;
  EXPECT_EQ(fa_attention_forward_check(narrow, &s), FA_SUCCESS) << lastError();
  s.v.strides[2] = 35;
  reject(narrow, s,
         "stride 35 of dimension 2 must be positive and a "
         "multiple of 2 elements (rows 8-byte aligned");
}

TEST_F(F32Validate, OverlapCountsFourBytes) {
  fa_attention_args a = forwardArgs(FA_DTYPE_F32);
  // q is 2*4*100*64 elements: 204800 bytes of f32 (half that of bf16).
  a.o.data = a.q.data + 102400;
  reject(f32, a,
         "output o [0x7f0000019000, 0x7f000004b000) overlaps q "
         "[0x7f0000000000, 0x7f0000032000)");
  a.o.data = a.q.data + 204800;
  EXPECT_EQ(fa_attention_forward_check(f32, &a), FA_SUCCESS) << lastError();
}

TEST_F(F32Validate, MmaSyncKernelsTakeNoTensorMaps) {
  fa_attention_args a = forwardArgs(FA_DTYPE_F32);
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  ASSERT_EQ(fa_attention_forward_tensor_maps(tf32, &a, maps, &count),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(count, 0);
}

TEST(F32TensorMaps, FourByteElements) {
  // No compiler builds f32 wgmma kernels yet; were it to, its maps would
  // count 4-byte elements (box rows of 32 f32 are the 128-byte swizzle's).
  std::string maps;
  const char *const kMaps[][3] = {
      {"q", "11", R"(["head_dim", "nq", "batch*heads"])"},
      {"k", "12", R"(["head_dim", "nk", "batch*kv_heads"])"},
      {"v", "13", R"(["head_dim_v", "nk", "batch*kv_heads"])"}};
  for (const auto &m : kMaps)
    maps += std::string(maps.empty() ? "" : ", ") + R"({"tensor": ")" + m[0] +
            R"(", "param": )" + m[1] + R"(, "dims": )" + m[2] +
            R"(, "box": [32, 128, 1], "swizzle": 128, "l2_promotion": 256,
               "oob_fill": "zero"})";
  std::string kernel = R"({"tag": "w", "direction": "fwd", "dtype": "f32",
      "head_dim": 64, "head_dim_v": 64, "block_q": 128, "block_kv": 128,
      "warps": 12, "stages": 2, "mask": "none", "target": "sm_90a",
      "mma": "wgmma", "entries": {"fwd": {"name": "fa_fwd_w", "threads": 384,
      "shared_bytes": 200000}}, "ptx": "w.ptx", "tensor_maps": [)" +
                       maps + "]}";
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("f32_maps", manifestOf({kernel}, "5"), &b), FA_SUCCESS)
      << lastError();
  fa_attention_args a = forwardArgs(FA_DTYPE_F32);
  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS];
  int32_t count = 0;
  ASSERT_EQ(fa_attention_forward_tensor_maps(fa_bundle_kernel_at(b, 0), &a, out,
                                             &count),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 3);
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(out[i].data_type, CU_TENSOR_MAP_DATA_TYPE_FLOAT32) << i;
    EXPECT_EQ(out[i].global_strides[0], 64u * 4) << i; // a row's bytes
  }
  fa_bundle_free(b);
}

} // namespace
