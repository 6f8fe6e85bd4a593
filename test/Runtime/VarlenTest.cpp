//===- VarlenTest.cpp - GPU-free tests of the varlen forward's runtime ----===//
//
// The manifest fields of a varlen wgmma forward (bundle version 10), its
// search, the checks of fa_attention_forward_varlen's arguments (each
// rejection and the accepted shapes), and the tensor maps and grid a launch
// would use, with fake device addresses: nothing here calls the driver.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace fa_test;

namespace {

/// A wgmma forward as fa-aot writes it for `fwd:bf16:d<D>:<mask>:wgmma:varlen`
/// (strides from 14, cu_seqlens at 26), with `extra` members appended.
std::string varlenKernel(const std::string &tag, int d,
                         const std::string &mask = "causal",
                         const std::string &extra = R"(, "varlen": true,
                             "cu_seqlens_param": 26)") {
  auto map = [](const char *t, int param, const char *dims) {
    return std::string(R"({"tensor": ")") + t + R"(", "param": )" +
           std::to_string(param) + R"(, "dims": )" + dims +
           R"(, "box": [64, 128, 1, 1], "swizzle": 128, "l2_promotion": 256,
              "oob_fill": "zero"})";
  };
  std::string maps =
      "[" + map("q", 11, R"(["head_dim", "nq", "heads", "batch"])") + ", " +
      map("k", 12, R"(["head_dim", "nk", "kv_heads", "batch"])") + ", " +
      map("v", 13, R"(["head_dim_v", "nk", "kv_heads", "batch"])") + "]";
  std::string ds = std::to_string(d);
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": "bf16",
      "head_dim": )" + ds + R"(, "head_dim_v": )" + ds + R"(,
      "block_q": 128, "block_kv": 128, "warps": 12, "stages": 2,
      "mask": ")" + mask + R"(", "window_left": -1, "window_right": -1,
      "score_mod": null, "target": "sm_90a", "mma": "wgmma",
      "entries": {"fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 384, "shared_bytes": 163840}},
      "ptx": ")" + tag + R"(.ptx", "cubin": ")" + tag + R"(.cubin",
      "stride_param": 14, "tensor_maps": )" + maps + extra + "}";
}

std::string manifest(const std::vector<std::string> &kernels,
                     const std::string &version = "10") {
  return manifestOf(kernels, version);
}

/// A query for a bf16 causal kernel of head dim `d` on sm_90.
fa_kernel_query causalQuery(fa_direction direction, int32_t d) {
  fa_kernel_query q{};
  q.direction = direction;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = d;
  q.mask = FA_MASK_CAUSAL;
  q.compute_capability = 90;
  return q;
}


TEST(VarlenManifest, FieldsAndVersion) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("ok", manifest({varlenKernel("v", 128)}), &b), FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.varlen, 1);
  EXPECT_EQ(info.strided, 1);
  fa_bundle_free(b);
  // A version-9 runtime would launch it as a dense forward.
  expectRejected("v9", manifest({varlenKernel("v", 128)}, "9"),
                 "kernels[0]: varlen kernels need bundle version 10, the "
                 "manifest says 9");
  expectRejected("v_newer", manifest({varlenKernel("v", 128)}, newerVersion()),
                 newerVersionRejected());
  expectRejected("param",
                 manifest({varlenKernel("v", 128, "causal",
                                        R"(, "varlen": true,
                                           "cu_seqlens_param": 25)")}),
                 "field 'cu_seqlens_param' = 25, expected 26 (cu_seqlens_q and "
                 "cu_seqlens_k follow the strides of q, k, v and o)");
  expectRejected("noparam",
                 manifest({varlenKernel("v", 128, "causal",
                                        R"(, "varlen": true)")}),
                 "cu_seqlens_param");
  expectRejected("type",
                 manifest({varlenKernel("v", 128, "causal",
                                        R"(, "varlen": 1)")}),
                 "field 'varlen' must be true or false, got 1");
  // The plans refuse a score_mod with varlen.
  std::string modded = varlenKernel("v", 128);
  modded.replace(modded.find(R"("score_mod": null)"),
                 std::string(R"("score_mod": null)").size(),
                 R"("score_mod": "softcap30")");
  expectRejected("mod", manifest({modded}),
                 "field 'varlen' is true, but varlen kernels have no "
                 "score_mod, mask_mod or mod_args");
}

/// A bundle with a varlen and a dense causal forward of the same problem.
class VarlenApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 3, H = 8, Hkv = 2, Tq = 500, Tk = 700, D = 128;
  void SetUp() override {
    std::string dense = varlenKernel("dense", 128, "causal", "");
    ASSERT_EQ(loadText("api",
                       manifest({varlenKernel("v128", 128), dense,
                                 varlenKernel("v64", 64, "none")}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    varlen = fa_bundle_kernel_at(bundle, 0);
    dense_ = fa_bundle_kernel_at(bundle, 1);
    fa_dtype bf = FA_DTYPE_BF16;
    a.q = tensor(addr(0), bf, {Tq, H, D});
    a.k = tensor(addr(1), bf, {Tk, Hkv, D});
    a.v = tensor(addr(2), bf, {Tk, Hkv, D});
    a.o = tensor(addr(3), bf, {Tq, H, D});
    a.lse = tensor(addr(4), FA_DTYPE_F32, {H, Tq});
    a.cu_seqlens_q = addr(5);
    a.cu_seqlens_k = addr(6);
    a.batch = B;
    a.max_seqlen_q = 300;
    a.scale = 0.125f;
  }
  void TearDown() override { fa_bundle_free(bundle); }
  void reject(const fa_attention_varlen_args &bad, const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_varlen_check(varlen, &bad),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
    // The launch runs the same checks first and launches nothing.
    EXPECT_EQ(fa_attention_forward_varlen(varlen, &bad, nullptr),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos) << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *varlen = nullptr, *dense_ = nullptr;
  fa_attention_varlen_args a{};
};

TEST_F(VarlenApi, OnlyTheVarlenSearchReturnsThem) {
  fa_kernel_query q = causalQuery(FA_DIRECTION_FWD, 128);
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << lastError();
  EXPECT_EQ(k, dense_);
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(k, varlen);
  q.mask = FA_MASK_NONE;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 0, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("fwd bf16 d=128 dv=128 mask=none (varlen)"),
            std::string::npos)
      << lastError();
  // The bundle's list marks its varlen kernels.
  EXPECT_NE(lastError().find("mask=causal mma=wgmma (varlen) (sm_90a)"),
            std::string::npos)
      << lastError();
  q.head_dim = 64;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 0, &k), FA_SUCCESS);
  EXPECT_EQ(k, fa_bundle_kernel_at(bundle, 2));
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_NOT_FOUND);
}

TEST_F(VarlenApi, DenseLaunchesRefuseVarlenKernels) {
  fa_attention_args d{};
  d.q = tensor(addr(0), FA_DTYPE_BF16, {1, H, Tq, D});
  d.k = tensor(addr(1), FA_DTYPE_BF16, {1, Hkv, Tk, D});
  d.v = tensor(addr(2), FA_DTYPE_BF16, {1, Hkv, Tk, D});
  d.o = tensor(addr(3), FA_DTYPE_BF16, {1, H, Tq, D});
  d.lse = tensor(addr(4), FA_DTYPE_F32, {1, H, Tq});
  d.scale = 0.125f;
  EXPECT_EQ(fa_attention_forward_check(dense_, &d), FA_SUCCESS) << lastError();
  EXPECT_EQ(fa_attention_forward_check(varlen, &d), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'v128' is a varlen forward (packed "
                             "sequences); use fa_attention_forward_varlen"),
            std::string::npos)
      << lastError();
  // And the varlen launch refuses a dense kernel.
  EXPECT_EQ(fa_attention_forward_varlen_check(dense_, &a),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'dense' is not a varlen forward"),
            std::string::npos)
      << lastError();
}

TEST_F(VarlenApi, AcceptsPackedTensorsAndBuildsTheirMaps) {
  ASSERT_EQ(fa_attention_forward_varlen_check(varlen, &a), FA_SUCCESS)
      << lastError();
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = 0;
  ASSERT_EQ(fa_attention_forward_varlen_tensor_maps(varlen, &a, maps, &count),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 3);
  // q: {D, Tq, H, 1}, strides row H*D, head D, the whole tensor (bytes).
  EXPECT_STREQ(maps[0].tensor, "q");
  EXPECT_EQ(maps[0].param, 11);
  EXPECT_EQ(maps[0].rank, 4u);
  EXPECT_EQ(maps[0].global_address, addr(0));
  const uint64_t qDims[4] = {D, Tq, H, 1}, kDims[4] = {D, Tk, Hkv, 1};
  const uint64_t qStrides[3] = {2 * H * D, 2 * D, 2 * H * D * Tq},
                 kStrides[3] = {2 * Hkv * D, 2 * D, 2 * Hkv * D * Tk};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(maps[0].global_dim[i], qDims[i]) << i;
    EXPECT_EQ(maps[1].global_dim[i], kDims[i]) << i;
    EXPECT_EQ(maps[2].global_dim[i], kDims[i]) << i;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(maps[0].global_strides[i], qStrides[i]) << i;
    EXPECT_EQ(maps[1].global_strides[i], kStrides[i]) << i;
  }
  EXPECT_EQ(maps[0].box_dim[1], 128u);
  unsigned grid[3] = {};
  ASSERT_EQ(fa_attention_forward_varlen_grid(varlen, &a, grid), FA_SUCCESS);
  // ceil(300 / 128) query blocks of the longest sequence, H, B.
  EXPECT_EQ(grid[0], 3u);
  EXPECT_EQ(grid[1], unsigned(H));
  EXPECT_EQ(grid[2], unsigned(B));

  // q, k, v read out of a packed qkv [T, 3, H, D] (K/V heads = H): strided
  // views; o may be a view too.
  fa_attention_varlen_args p = a;
  p.k = tensor(addr(1), FA_DTYPE_BF16, {Tq, H, D});
  p.v = p.k;
  for (fa_tensor *t : {&p.q, &p.k, &p.v}) {
    t->data = addr(0) + 2 * D * H * (t == &p.q ? 0 : t == &p.k ? 1 : 2);
    t->strides[0] = 3 * H * D;
  }
  ASSERT_EQ(fa_attention_forward_varlen_tensor_maps(varlen, &p, maps, &count),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(maps[1].global_strides[0], uint64_t(2 * 3 * H * D));
  EXPECT_EQ(maps[1].global_address, addr(0) + 2 * D * H);
}

TEST_F(VarlenApi, RejectsEachBadArgument) {
  fa_attention_varlen_args bad = a;
  EXPECT_EQ(fa_attention_forward_varlen_check(varlen, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel or args is null"), std::string::npos);
  bad.batch = 0;
  reject(bad, "batch is 0; expected 1 to 65535 sequences");
  bad = a;
  bad.batch = 70000;
  reject(bad, "batch is 70000");
  bad = a;
  bad.max_seqlen_q = -1;
  reject(bad, "max_seqlen_q is -1");
  bad = a;
  bad.cu_seqlens_q = 0;
  reject(bad, "cu_seqlens_q 0x0 must be a non-null, 4-byte aligned device "
              "address of 4 int32 offsets");
  bad = a;
  bad.cu_seqlens_k = addr(6) + 2;
  reject(bad, "cu_seqlens_k 0x");
  bad = a;
  bad.q = tensor(addr(0), FA_DTYPE_BF16, {1, Tq, H, D});
  reject(bad, "q, k and v must be packed [T,H,D] tensors (rank 3), got ranks "
              "4, 3, 3");
  bad = a;
  bad.q.dtype = FA_DTYPE_F16;
  reject(bad, "q.dtype is f16, expected bf16");
  bad = a;
  bad.q = tensor(addr(0), FA_DTYPE_BF16, {Tq, H, 64});
  reject(bad, "q.shape is [500,8,64], expected [500,8,128] ([Tq,H,D] with "
              "the kernel's head dim)");
  bad = a;
  bad.q.data = 0;
  reject(bad, "q.data is null");
  bad = a;
  bad.q.data += 8;
  reject(bad, "q.data 0x7f0000000008 is not 16-byte aligned");
  bad = a;
  bad.k = tensor(addr(1), FA_DTYPE_BF16, {Tk, 3, D});
  bad.v = tensor(addr(2), FA_DTYPE_BF16, {Tk, 3, D});
  reject(bad, "q has 8 heads and k has 3; the query head count must be a "
              "multiple of the key head count");
  bad = a;
  bad.v = tensor(addr(2), FA_DTYPE_BF16, {Tk - 1, Hkv, D});
  reject(bad, "v.shape is [699,2,128], expected [700,2,128]");
  bad = a;
  bad.o = tensor(addr(3), FA_DTYPE_BF16, {Tk, H, D});
  reject(bad, "o.shape is [700,8,128], expected [500,8,128] ([Tq,H,Dv] from "
              "q and v)");
  bad = a;
  bad.lse = tensor(addr(4), FA_DTYPE_F32, {Tq, H});
  reject(bad, "lse.shape is [500,8], expected [8,500] ([H,Tq] from q)");
  bad = a;
  bad.lse.dtype = FA_DTYPE_BF16;
  reject(bad, "lse.dtype is bf16, expected f32");
  bad = a;
  bad.lse.strides[0] = Tq + 4;
  reject(bad, "lse.strides are [504,1] for shape [8,500], expected [500,1]");
  bad = a;
  bad.k.strides[2] = 2;
  reject(bad, "k.strides are [256,128,2]; the last dimension's stride must "
              "be 1");
  bad = a;
  bad.o.strides[1] = 0; // heads on one address
  reject(bad, "must be positive");
  bad = a;
  bad.o.strides[0] = 64; // rows overlapping heads
  reject(bad, "put two elements of the output at one address");
  bad = a;
  bad.o.data = addr(0) + 1024;
  reject(bad, "output o");
  bad = a;
  bad.lse.data = a.cu_seqlens_q;
  reject(bad, "overlaps cu_seqlens_q");
  bad = a;
  bad.scale = std::nanf("");
  reject(bad, "scale is nan");
  // TMA: a stride that is no multiple of 16 bytes.
  bad = a;
  bad.q.strides[0] = H * D + 8; // 16 bytes more per row is fine...
  EXPECT_EQ(fa_attention_forward_varlen_check(varlen, &bad), FA_SUCCESS)
      << lastError();
  bad.q.strides[1] = D + 8; // ... heads 272 bytes apart too
  EXPECT_EQ(fa_attention_forward_varlen_check(varlen, &bad), FA_SUCCESS)
      << lastError();
}

TEST_F(VarlenApi, EmptyBatchesLaunchNothing) {
  unsigned grid[3] = {9, 9, 9};
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  // No query token: tensors of 0 tokens may have null data.
  fa_attention_varlen_args e = a;
  e.q = tensor(0, FA_DTYPE_BF16, {0, H, D});
  e.o = tensor(0, FA_DTYPE_BF16, {0, H, D});
  e.lse = tensor(0, FA_DTYPE_F32, {H, 0});
  e.max_seqlen_q = 0;
  ASSERT_EQ(fa_attention_forward_varlen_check(varlen, &e), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_attention_forward_varlen_grid(varlen, &e, grid), FA_SUCCESS);
  EXPECT_EQ(grid[0] | grid[1] | grid[2], 0u);
  ASSERT_EQ(fa_attention_forward_varlen_tensor_maps(varlen, &e, maps, &count),
            FA_SUCCESS);
  EXPECT_EQ(count, 0);
  // A no-op launch touches no GPU (this test has none) and succeeds.
  EXPECT_EQ(fa_attention_forward_varlen(varlen, &e, nullptr), FA_SUCCESS)
      << lastError();
  // Its shapes must still agree.
  e.o = tensor(addr(3), FA_DTYPE_BF16, {1, H, D});
  EXPECT_EQ(fa_attention_forward_varlen_check(varlen, &e),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("o.shape is [1,8,128], expected [0,8,128]"),
            std::string::npos)
      << lastError();
  // max_seqlen_q 0 with tokens: every sequence is empty.
  e = a;
  e.max_seqlen_q = 0;
  ASSERT_EQ(fa_attention_forward_varlen_grid(varlen, &e, grid), FA_SUCCESS);
  EXPECT_EQ(grid[0], 0u);
  // No key token: o and lse are filled, which needs o's heads adjacent.
  e = a;
  e.k = tensor(0, FA_DTYPE_BF16, {0, Hkv, D});
  e.v = tensor(0, FA_DTYPE_BF16, {0, Hkv, D});
  ASSERT_EQ(fa_attention_forward_varlen_check(varlen, &e), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_attention_forward_varlen_tensor_maps(varlen, &e, maps, &count),
            FA_SUCCESS);
  EXPECT_EQ(count, 0);
  e.o.strides[1] = 2 * D;
  e.o.strides[0] = 2 * D * H;
  EXPECT_EQ(fa_attention_forward_varlen_check(varlen, &e),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("k has no tokens, so o is filled with zeros, "
                             "which needs its heads adjacent"),
            std::string::npos)
      << lastError();
}

TEST(VarlenSeqlens, HostCheckOfTheOffsets) {
  const int32_t q[] = {0, 100, 100, 350}, k[] = {0, 200, 201, 700};
  EXPECT_EQ(fa_varlen_check_seqlens(q, k, 3, 350, 700, 250, 499), FA_SUCCESS)
      << lastError();
  // Tokens past the last sequence belong to none.
  EXPECT_EQ(fa_varlen_check_seqlens(q, k, 3, 400, 700, 250, -1), FA_SUCCESS);
  auto reject = [&](const int32_t *cq, const int32_t *ck, int64_t tq,
                    int32_t maxQ, int32_t maxK, const std::string &expect) {
    EXPECT_EQ(fa_varlen_check_seqlens(cq, ck, 3, tq, 700, maxQ, maxK),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  };
  reject(q, k, 349, 250, 499,
         "cu_seqlens_q[3] = 350 is past the packed tensor's 349 tokens");
  reject(q, k, 350, 249, 499,
         "sequence 2 has 250 tokens (cu_seqlens_q[2] = 100, [3] = 350), more "
         "than max_seqlen_q = 249");
  reject(q, k, 350, 250, 498,
         "sequence 2 has 499 tokens (cu_seqlens_k[2] = 201, [3] = 700), more "
         "than max_seqlen_k = 498");
  const int32_t down[] = {0, 100, 90, 350}, late[] = {1, 100, 100, 350};
  reject(down, k, 350, -1, -1,
         "cu_seqlens_q[2] = 90 is below cu_seqlens_q[1] = 100: offsets must "
         "not decrease");
  reject(late, k, 350, -1, -1,
         "cu_seqlens_q[0] is 1; the first sequence starts at 0");
  EXPECT_EQ(fa_varlen_check_seqlens(nullptr, k, 3, 350, 700, -1, -1),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_varlen_check_seqlens(q, k, 0, 350, 700, -1, -1),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("batch 0"), std::string::npos) << lastError();
}

} // namespace

namespace {
/// A backward's three entries ("bwd_pre", "bwd", "bwd_post"), fa_<role>_<tag>.
std::string backwardEntries(const std::string &tag, int threads,
                            int sharedBytes) {
  auto entry = [&](const char *role, int shared) {
    return std::string("\"") + role + R"(": {"name": "fa_)" + role + "_" +
           tag + R"(", "threads": )" + std::to_string(threads) +
           R"(, "shared_bytes": )" + std::to_string(shared) + "}";
  };
  return entry("bwd_pre", 0) + ", " + entry("bwd", sharedBytes) + ", " +
         entry("bwd_post", 0);
}

/// `a` without query tokens: q, o, d_o, dq of 0 rows and lse, delta,
/// dq_accum of 0 columns, their data null.
fa_attention_backward_varlen_args
withoutQueries(fa_attention_backward_varlen_args a) {
  for (fa_tensor *t : {&a.q, &a.o, &a.d_o, &a.dq})
    t->shape[0] = 0, t->data = 0;
  for (fa_tensor *t : {&a.lse, &a.delta, &a.dq_accum})
    t->shape[1] = 0, t->data = 0;
  return a;
}

/// An mma.sync varlen backward as fa-aot writes it for
/// `bwd:bf16:d64:causal:varlen` (strides from 15, cu_seqlens at 33).
std::string varlenBackward(const std::string &tag, int cuParam = 33,
                           const std::string &mma = "") {
  return R"({"tag": ")" + tag + R"(", "direction": "bwd", "dtype": "bf16",
      "head_dim": 64, "head_dim_v": 64, "block_q": 64, "block_kv": 128,
      "warps": 8, "stages": 1, "mask": "causal", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a", "dsplit": 1,
      "entries": {)" + backwardEntries(tag, 256, 73728) + R"(},
      "ptx": ")" + tag + R"(.ptx", "stride_param": 15, "varlen": true,
      "cu_seqlens_param": )" + std::to_string(cuParam) + mma + "}";
}

/// A warp-specialised wgmma varlen backward as fa-aot writes it for
/// `bwd:bf16:d64:causal:wgmma:varlen`: 4-D maps of the packed tensors after
/// fa_bwd's 15 parameters, strides from 19, cu_seqlens at 37.
std::string varlenWgmmaBackward(const std::string &tag, int cuParam = 37,
                                const std::string &extra = "") {
  auto map = [](const char *t, int param, const char *dims, int rows) {
    return std::string(R"({"tensor": ")") + t + R"(", "param": )" +
           std::to_string(param) + R"(, "dims": )" + dims + R"(, "box": [64, )" +
           std::to_string(rows) + R"(, 1, 1], "swizzle": 128,
              "l2_promotion": 256, "oob_fill": "zero"})";
  };
  std::string maps =
      "[" + map("q", 15, R"(["head_dim", "nq", "heads", "batch"])", 64) +
      ", " + map("k", 16, R"(["head_dim", "nk", "kv_heads", "batch"])", 128) +
      ", " + map("v", 17, R"(["head_dim_v", "nk", "kv_heads", "batch"])", 128) +
      ", " + map("do", 18, R"(["head_dim_v", "nq", "heads", "batch"])", 64) +
      "]";
  return R"({"tag": ")" + tag + R"(", "direction": "bwd", "dtype": "bf16",
      "head_dim": 64, "head_dim_v": 64, "block_q": 64, "block_kv": 128,
      "warps": 12, "stages": 2, "mask": "causal", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a", "dsplit": 1,
      "mma": "wgmma", "entries": {)" + backwardEntries(tag, 384, 132096) + R"(},
      "ptx": ")" + tag + R"(.ptx", "stride_param": 19, "tensor_maps": )" +
         maps + R"(, "varlen": true, "cu_seqlens_param": )" +
         std::to_string(cuParam) + extra + "}";
}

TEST(VarlenBackwardManifest, WarpSpecializedWgmma) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("vw", manifest({varlenWgmmaBackward("vw")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.varlen, 1);
  EXPECT_EQ(info.tensor_map_count, 4);
  fa_bundle_free(b);
  // After the maps, the 18 strides: 19 + 18.
  expectRejected("vw_param", manifest({varlenWgmmaBackward("vw", 33)}),
                 "field 'cu_seqlens_param' = 33, expected 37");
  // The deterministic dQ order counts a dense batch's key blocks.
  std::string det = varlenWgmmaBackward(
      "vw", 38, R"(, "deterministic": true, "semaphore_param": 19)");
  det.replace(det.find(R"("stride_param": 19)"), 18, R"("stride_param": 20)");
  expectRejected("vw_det", manifest({det}), "non-deterministic");
}

/// A bundle with a varlen backward; packed tensors at fake addresses.
class VarlenBackwardApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 3, H = 8, Hkv = 2, Tq = 500, Tk = 700, D = 64;
  /// The bundle's one kernel (an mma.sync varlen backward).
  virtual std::string kernelJson() const { return varlenBackward("vb"); }
  void SetUp() override {
    ASSERT_EQ(loadText("bwd", manifest({kernelJson()}), &bundle), FA_SUCCESS)
        << lastError();
    kernel = fa_bundle_kernel_at(bundle, 0);
    fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    a.q = tensor(addr(0), bf, {Tq, H, D});
    a.k = tensor(addr(1), bf, {Tk, Hkv, D});
    a.v = tensor(addr(2), bf, {Tk, Hkv, D});
    a.o = tensor(addr(3), bf, {Tq, H, D});
    a.d_o = tensor(addr(4), bf, {Tq, H, D});
    a.lse = tensor(addr(5), f32, {H, Tq});
    a.dq = tensor(addr(6), bf, {Tq, H, D});
    a.dk = tensor(addr(7), bf, {Tk, Hkv, D});
    a.dv = tensor(addr(8), bf, {Tk, Hkv, D});
    a.delta = tensor(addr(9), f32, {H, Tq});
    a.dq_accum = tensor(addr(10), f32, {H, Tq, D});
    a.cu_seqlens_q = addr(11);
    a.cu_seqlens_k = addr(12);
    a.batch = B;
    a.max_seqlen_k = 400;
    a.scale = 0.125f;
  }
  void TearDown() override { fa_bundle_free(bundle); }
  void reject(const fa_attention_backward_varlen_args &bad,
              const std::string &expect) {
    EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &bad),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
    EXPECT_EQ(fa_attention_backward_varlen(kernel, &bad, nullptr),
              FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(expect), std::string::npos) << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *kernel = nullptr;
  fa_attention_backward_varlen_args a{};
};
} // namespace

TEST(VarlenBackwardManifest, Fields) {
  expectRejected("param", manifest({varlenBackward("vb", 29)}),
                 "field 'cu_seqlens_param' = 29, expected 33 (cu_seqlens_q "
                 "and cu_seqlens_k follow the strides of q, k, v, do, dk and "
                 "dv)");
  // A wgmma backward runs varlen batches only warp-specialised (12 warps,
  // TMA; RuntimeTest.cpp's Manifest.VarlenWgmmaBackward), not with cp.async.
  expectRejected("wgmma",
                 manifest({varlenBackward("vb", 33, R"(, "mma": "wgmma")")}),
                 "field 'varlen' is true, but only strided wgmma forwards");
}

TEST_F(VarlenBackwardApi, FoundByTheVarlenSearchOnly) {
  fa_kernel_query q = causalQuery(FA_DIRECTION_BWD, 64);
  const fa_kernel *k = nullptr;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(k, kernel);
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_NOT_FOUND);
}

TEST_F(VarlenBackwardApi, AcceptsPackedTensorsAndRefusesDenseLaunches) {
  ASSERT_EQ(fa_attention_backward_varlen_check(kernel, &a), FA_SUCCESS)
      << lastError();
  // dq, dk and dv may be strided views (dq of a packed [T, 3, H, D]).
  fa_attention_backward_varlen_args p = a;
  p.dq.strides[0] = 3 * H * D;
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &p), FA_SUCCESS)
      << lastError();
  // The dense backward refuses the varlen kernel.
  fa_attention_backward_args d{};
  fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
  d.q = d.o = d.d_o = d.dq = tensor(addr(0), bf, {1, H, Tq, D});
  d.k = d.v = d.dk = d.dv = tensor(addr(1), bf, {1, Hkv, Tk, D});
  d.lse = d.delta = tensor(addr(2), f32, {1, H, Tq});
  d.dq_accum = tensor(addr(3), f32, {1, H, Tq, D});
  d.scale = 0.125f;
  EXPECT_EQ(fa_attention_backward_check(kernel, &d), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'vb' is a varlen backward (packed "
                             "sequences); use fa_attention_backward_varlen"),
            std::string::npos)
      << lastError();
}

TEST_F(VarlenBackwardApi, RejectsEachBadArgument) {
  fa_attention_backward_varlen_args bad = a;
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  bad.max_seqlen_k = -1;
  reject(bad, "max_seqlen_k is -1; expected the longest key sequence's "
              "length (>= 0)");
  bad = a, bad.batch = 0;
  reject(bad, "batch is 0; expected 1 to 65535 sequences");
  bad = a, bad.cu_seqlens_k = 0;
  reject(bad, "cu_seqlens_k 0x0 must be a non-null, 4-byte aligned device "
              "address of 4 int32 offsets");
  bad = a, bad.lse = tensor(addr(5), FA_DTYPE_F32, {Tq, H});
  reject(bad, "lse.shape is [500,8], expected [8,500] ([H,Tq] from q)");
  bad = a, bad.dq_accum = tensor(addr(10), FA_DTYPE_F32, {H, Tq, 32});
  reject(bad, "dq_accum.shape is [8,500,32], expected [8,500,64] (workspace "
              "[H,Tq,D] from q)");
  bad = a, bad.dk = tensor(addr(7), FA_DTYPE_BF16, {Tk, H, D});
  reject(bad, "dk.shape is [700,8,64], expected [700,2,64] (the shape of k)");
  bad = a, bad.d_o = tensor(addr(4), FA_DTYPE_F16, {Tq, H, D});
  reject(bad, "d_o.dtype is f16, expected bf16");
  // Outputs may not overlap an input.
  bad = a, bad.dv.data = a.v.data;
  reject(bad, "dv");
  bad = a, bad.scale = NAN;
  reject(bad, "scale");
}

/// The same packed arguments for the warp-specialised wgmma varlen backward,
/// whose K, V, Q and dO go through tensor maps of the one-batch view.
class VarlenWgmmaBackwardApi : public VarlenBackwardApi {
protected:
  std::string kernelJson() const override {
    return varlenWgmmaBackward("vw");
  }
};

TEST_F(VarlenWgmmaBackwardApi, ChecksThePackedViewsMaps) {
  // The packed tensors pass, tensor maps of the one-batch view included.
  ASSERT_EQ(fa_attention_backward_varlen_check(kernel, &a), FA_SUCCESS)
      << lastError();
  // q's token stride of H·D + 4 elements (8 bytes past a multiple of 16):
  // no tensor map (nor cp.async row) could take it.
  fa_attention_backward_varlen_args bad = a;
  bad.q.strides[0] = H * D + 4;
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &bad),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("q.strides are [516,64,1]: stride 516 of "
                             "dimension 0 must be positive and a multiple of "
                             "8 elements (rows 16-byte aligned)"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("fa_attention_backward_varlen_check: "),
            std::string::npos)
      << lastError();
}

TEST_F(VarlenBackwardApi, EmptyBatchesLaunchNothing) {
  // No tokens at all: nothing to compute (null data is fine).
  fa_attention_backward_varlen_args e = withoutQueries(a);
  for (fa_tensor *t : {&e.k, &e.v, &e.dk, &e.dv})
    t->shape[0] = 0, t->data = 0;
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &e), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_backward_varlen(kernel, &e, nullptr), FA_SUCCESS)
      << lastError();
  // Queries without any key: valid (dq is filled with zeros), which needs
  // dq's heads adjacent.
  fa_attention_backward_varlen_args noKeys = a;
  for (fa_tensor *t : {&noKeys.k, &noKeys.v, &noKeys.dk, &noKeys.dv})
    t->shape[0] = 0, t->data = 0;
  noKeys.max_seqlen_k = 0;
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &noKeys), FA_SUCCESS)
      << lastError();
  noKeys.dq.strides[0] = 2 * H * D, noKeys.dq.strides[1] = 2 * D;
  reject(noKeys, "k has no tokens, so dq is filled with zeros, which needs its "
                 "heads adjacent in each row: dq.strides[1] is 128, expected "
                 "D = 64");
  // Keys without any query: dk and dv are filled with zeros.
  fa_attention_backward_varlen_args noQueries = withoutQueries(a);
  EXPECT_EQ(fa_attention_backward_varlen_check(kernel, &noQueries), FA_SUCCESS)
      << lastError();
}

//===----------------------------------------------------------------------===//
// Varlen kernels with attention sinks (bundle version 18).
//===----------------------------------------------------------------------===//

namespace {
/// `varlenKernel` with sinks after cu_seqlens_q and _k (sinks_param 28).
std::string varlenSinkForward(const std::string &tag, int sinksParam = 28) {
  return varlenKernel(tag, 128, "causal",
                      R"(, "varlen": true, "cu_seqlens_param": 26,
                         "sinks": true, "sinks_param": )" +
                          std::to_string(sinksParam));
}

/// `varlenBackward` with sinks and its bwd_sink entry.
std::string varlenSinkBackward(const std::string &tag) {
  std::string k = varlenBackward(tag, 33, R"(, "sinks": true)");
  const std::string entries = R"("entries": {)";
  k.insert(k.find(entries) + entries.size(),
           R"("bwd_sink": {"name": "fa_bwd_sink_)" + tag +
               R"(", "threads": 256, "shared_bytes": 32}, )");
  return k;
}

/// Forward and backward varlen kernels with sinks and their plain twins;
/// packed tensors, sinks and d_sinks at fake addresses.
class VarlenSinksApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 3, H = 8, Hkv = 2, Tq = 500, Tk = 700;
  void SetUp() override {
    ASSERT_EQ(loadText("varlen_sinks",
                       manifestOf({varlenSinkForward("fs"),
                                   varlenKernel("fp", 128),
                                   varlenSinkBackward("bs"),
                                   varlenBackward("bp")},
                                  "18"),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    fwdSinks = fa_bundle_kernel_at(bundle, 0);
    fwdPlain = fa_bundle_kernel_at(bundle, 1);
    bwdSinks = fa_bundle_kernel_at(bundle, 2);
    bwdPlain = fa_bundle_kernel_at(bundle, 3);
    fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    f.q = tensor(addr(0), bf, {Tq, H, 128});
    f.k = tensor(addr(1), bf, {Tk, Hkv, 128});
    f.v = tensor(addr(2), bf, {Tk, Hkv, 128});
    f.o = tensor(addr(3), bf, {Tq, H, 128});
    f.lse = tensor(addr(4), f32, {H, Tq});
    f.cu_seqlens_q = addr(5);
    f.cu_seqlens_k = addr(6);
    f.batch = B;
    f.max_seqlen_q = 300;
    f.scale = 0.125f;
    g.q = g.o = g.d_o = tensor(addr(0), bf, {Tq, H, 64});
    g.k = g.v = tensor(addr(1), bf, {Tk, Hkv, 64});
    g.lse = tensor(addr(2), f32, {H, Tq});
    g.dq = tensor(addr(3), bf, {Tq, H, 64});
    g.dk = tensor(addr(4), bf, {Tk, Hkv, 64});
    g.dv = tensor(addr(5), bf, {Tk, Hkv, 64});
    g.delta = tensor(addr(6), f32, {H, Tq});
    g.dq_accum = tensor(addr(7), f32, {H, Tq, 64});
    g.cu_seqlens_q = addr(8);
    g.cu_seqlens_k = addr(9);
    g.batch = B;
    g.max_seqlen_k = 300;
    g.scale = 0.125f;
    sinks = tensor(addr(11), f32, {H});
    dSinks = tensor(addr(12), f32, {H});
  }
  void TearDown() override { fa_bundle_free(bundle); }
  void expectInvalid(fa_status s, const std::string &expect) {
    EXPECT_EQ(s, FA_ERROR_INVALID_ARGUMENT) << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *fwdSinks = nullptr, *fwdPlain = nullptr,
                  *bwdSinks = nullptr, *bwdPlain = nullptr;
  fa_attention_varlen_args f{};
  fa_attention_backward_varlen_args g{};
  fa_tensor sinks{}, dSinks{};
};
} // namespace

TEST(VarlenSinksManifest, FieldsAndVersion) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("vs_ok",
                     manifestOf({varlenSinkForward("f"),
                                 varlenSinkBackward("b")},
                                "18"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, i), &info),
              FA_SUCCESS);
    EXPECT_EQ(info.sinks, 1);
    EXPECT_EQ(info.varlen, 1);
  }
  fa_bundle_free(b);
  // A version-17 runtime refuses sinks on a varlen kernel (and would launch
  // the backward's bwd_sink without cu_seqlens_q).
  expectRejected("vs_v17", manifestOf({varlenSinkBackward("b")}, "17"),
                 "kernels[0]: varlen kernels with sinks need bundle version "
                 "18, the manifest says 17");
  expectRejected("vs_param", manifestOf({varlenSinkForward("f", 27)}, "18"),
                 "field 'sinks_param' = 27, expected 28");
}

TEST_F(VarlenSinksApi, SearchMatchesTheQuerysSinks) {
  fa_kernel_query q = causalQuery(FA_DIRECTION_FWD, 128);
  const fa_kernel *k = nullptr;
  q.sinks = 1;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(k, fwdSinks);
  q.sinks = 0;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 4096, &k), FA_SUCCESS);
  EXPECT_EQ(k, fwdPlain);
  q.direction = FA_DIRECTION_BWD;
  q.head_dim = 64;
  q.sinks = 1;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(k, bwdSinks);
}

TEST_F(VarlenSinksApi, KernelAndLaunchMustAgree) {
  EXPECT_EQ(fa_attention_forward_varlen_sinks_check(fwdSinks, &f, &sinks),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_backward_varlen_sinks_check(bwdSinks, &g, &sinks,
                                                     &dSinks),
            FA_SUCCESS)
      << lastError();
  expectInvalid(fa_attention_forward_varlen_check(fwdSinks, &f),
                "kernel 'fs' has attention sinks; launch it with "
                "fa_attention_forward_varlen_sinks and a sinks tensor f32 [H]");
  expectInvalid(fa_attention_forward_varlen(fwdSinks, &f, nullptr),
                "has attention sinks");
  expectInvalid(fa_attention_backward_varlen_check(bwdSinks, &g),
                "kernel 'bs' has attention sinks; launch it with "
                "fa_attention_backward_varlen_sinks");
  expectInvalid(fa_attention_forward_varlen_sinks_check(fwdPlain, &f, &sinks),
                "kernel 'fp' has no attention sinks; launch it with "
                "fa_attention_forward_varlen, or find a kernel with "
                "fa_kernel_query.sinks = 1");
  expectInvalid(fa_attention_backward_varlen_sinks(bwdPlain, &g, &sinks,
                                                   &dSinks, nullptr),
                "has no attention sinks");
  // The maps and the grid need no sinks.
  unsigned grid[3];
  EXPECT_EQ(fa_attention_forward_varlen_grid(fwdSinks, &f, grid), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(grid[0], 3u);
}

TEST_F(VarlenSinksApi, RejectsBadSinksAndGradients) {
  expectInvalid(fa_attention_forward_varlen_sinks_check(fwdSinks, &f, nullptr),
                "sinks is null; a kernel with sinks takes them as f32 [H]");
  fa_tensor t = tensor(addr(11), FA_DTYPE_F32, {Hkv});
  expectInvalid(fa_attention_forward_varlen_sinks(fwdSinks, &f, &t, nullptr),
                "fa_attention_forward_varlen_sinks: sinks.shape is [2], "
                "expected [8] ([H], one logit per query head of q)");
  t = sinks;
  t.data += 4;
  expectInvalid(fa_attention_forward_varlen_sinks_check(fwdSinks, &f, &t),
                "is not 16-byte aligned");
  // Sinks inside an output (o), d_sinks over an input or another output.
  t = sinks;
  t.data = f.o.data + 64;
  expectInvalid(fa_attention_forward_varlen_sinks_check(fwdSinks, &f, &t),
                "output o");
  expectInvalid(
      fa_attention_backward_varlen_sinks_check(bwdSinks, &g, &sinks, nullptr),
      "d_sinks is null; a backward with sinks writes d_sinks f32 [H]");
  t = tensor(addr(12), FA_DTYPE_F32, {2 * H});
  expectInvalid(
      fa_attention_backward_varlen_sinks_check(bwdSinks, &g, &sinks, &t),
      "d_sinks.shape is [16], expected [8] ([H], the gradient of sinks)");
  t = dSinks;
  t.data = g.lse.data;
  expectInvalid(
      fa_attention_backward_varlen_sinks_check(bwdSinks, &g, &sinks, &t),
      "output d_sinks");
  t = dSinks;
  t.data = g.cu_seqlens_q;
  expectInvalid(
      fa_attention_backward_varlen_sinks(bwdSinks, &g, &sinks, &t, nullptr),
      "output d_sinks");
  // The sinks' rules hold where nothing but d_sinks = 0 is written (no
  // query token).
  fa_attention_backward_varlen_args e = withoutQueries(g);
  EXPECT_EQ(fa_attention_backward_varlen_sinks_check(bwdSinks, &e, &sinks,
                                                     &dSinks),
            FA_SUCCESS)
      << lastError();
  t = tensor(addr(12), FA_DTYPE_F32, {H - 1});
  expectInvalid(
      fa_attention_backward_varlen_sinks_check(bwdSinks, &e, &sinks, &t),
      "d_sinks.shape is [7], expected [8]");
}
