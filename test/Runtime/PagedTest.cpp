//===- PagedTest.cpp - GPU-free tests of the paged-KV runtime -------------===//
//
// The manifest fields of paged-KV split forwards (bundle version 14), their
// search (only fa_kernel_find_paged returns them, and it returns nothing
// else), and every check of fa_attention_forward_paged: the paged cache's
// fields, the pools' shapes and strides, the kernel/launch pairing both
// ways, overlaps and the workspace, and the pool maps of a kernel that
// loads its pages by TMA (bundle version 20), with fake device addresses:
// nothing calls the driver.
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

/// The split-KV forward fa-aot writes for `fwd:bf16:d128:none:splitkv`
/// (strides from 12), `extra` appended: by default the paged fields
/// (the page table after the strides of q, k and v: 12 + 9).
std::string splitKernel(const std::string &tag,
                        const std::string &extra = R"(, "paged": true,
                            "page_table_param": 21)") {
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

std::string manifest(const std::vector<std::string> &kernels,
                     const std::string &version = "14") {
  return manifestOf(kernels, version);
}

fa_kernel_query decodeQuery() { return forwardQuery(128); }

// The paged search by rows, as fa_kernel_find_packed_gqa_rows: a 16-row
// tile for one query row of 4 heads, the 32-row one for 4 rows of 8 heads.
TEST(PagedRows, SmallestTileHoldingTheRows) {
  fa_bundle *b = nullptr;
  auto tile = [](int bq) {
    return R"(, "paged": true, "page_table_param": 21, "pack_gqa": true,
              "block_q": )" +
           std::to_string(bq);
  };
  ASSERT_EQ(loadText("paged_rows",
                     manifest({splitKernel("p32", tile(32)),
                               splitKernel("p16", tile(16))}),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = decodeQuery();
  auto pick = [&](int64_t group, int64_t nq) {
    const fa_kernel *k = nullptr;
    EXPECT_EQ(fa_kernel_find_paged_rows(b, &q, group, nq, 4096, 0, &k),
              FA_SUCCESS)
        << lastError();
    return kernelTag(k);
  };
  EXPECT_EQ(pick(4, 1), "p16");
  EXPECT_EQ(pick(8, 4), "p32");
  const fa_kernel *k = nullptr;
  // No kernel of these has fa_kv_append.
  EXPECT_EQ(fa_kernel_find_paged_rows(b, &q, 4, 1, 4096, 1, &k),
            FA_ERROR_NOT_FOUND);
  EXPECT_EQ(fa_kernel_find_paged_rows(b, &q, 4, 1, 4096, 2, &k),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("fa_kernel_find_paged_rows: append is 2"),
            std::string::npos)
      << lastError();
  fa_bundle_free(b);
}

TEST(PagedManifest, FieldsAndVersion) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("paged_ok", manifest({splitKernel("pg")}), &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fa_bundle_kernel_at(b, 0), &info), FA_SUCCESS);
  EXPECT_EQ(info.paged, 1);
  EXPECT_EQ(info.split_kv, 1);
  fa_bundle_free(b);
  // A version-13 runtime would launch it as a dense split forward.
  expectRejected("paged_v13", manifest({splitKernel("pg")}, "13"),
                 "kernels[0]: paged-KV kernels need bundle version 14, the "
                 "manifest says 13");
  expectRejected("paged_param",
                 manifest({splitKernel("pg", R"(, "paged": true,
                                                "page_table_param": 24)")}),
                 "field 'page_table_param' = 24, expected 21 (the page table "
                 "follows the strides of q, k and v)");
  expectRejected("paged_noparam",
                 manifest({splitKernel("pg", R"(, "paged": true)")}),
                 "page_table_param");
  expectRejected("paged_type", manifest({splitKernel("pg", R"(, "paged": 1)")}),
                 "field 'paged' must be true or false, got 1");
  // Only strided split forwards read pages.
  std::string plain = R"({"tag": "p", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 64, "block_kv": 64,
      "warps": 4, "stages": 2, "mask": "none", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a",
      "entries": {"fwd": {"name": "fa_fwd_p", "threads": 128,
      "shared_bytes": 49152}}, "ptx": "p.ptx", "stride_param": 11,
      "paged": true, "page_table_param": 23})";
  expectRejected("paged_plain", manifest({plain}),
                 "field 'paged' is true, but only strided split-KV forwards "
                 "read a paged KV cache");
}

/// A bundle with a paged split forward and the dense split forward of the
/// same problem; calls of B = 2 sequences, 32 query heads on 8 key heads,
/// one query, 64 pages of 16 keys, 8 pages per sequence at most.
class PagedApi : public ::testing::Test {
protected:
  static constexpr int64_t B = 2, H = 32, Hkv = 8, Nq = 1, D = 128;
  static constexpr int32_t Pages = 64, PageSize = 16, MaxPages = 8;

  void SetUp() override {
    ASSERT_EQ(loadText("paged_api",
                       manifest({splitKernel("pg"), splitKernel("dense", "")}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    paged = fa_bundle_kernel_at(bundle, 0);
    dense = fa_bundle_kernel_at(bundle, 1);
    fa_dtype bf = FA_DTYPE_BF16, f32 = FA_DTYPE_F32;
    a.q = tensor(addr(0), bf, {B, H, Nq, D});
    a.k = tensor(addr(1), bf, {Pages, PageSize, Hkv, D});
    a.v = tensor(addr(2), bf, {Pages, PageSize, Hkv, D});
    a.o = tensor(addr(3), bf, {B, H, Nq, D});
    a.lse = tensor(addr(4), f32, {B, H, Nq});
    a.scale = 1.0f / std::sqrt(float(D));
    cache = {addr(5), addr(6), MaxPages, PageSize, Pages};
    EXPECT_EQ(fa_splitkv_workspace_bytes(paged, B, H, Nq, 4, &bytes),
              FA_SUCCESS)
        << lastError();
  }
  void TearDown() override { fa_bundle_free(bundle); }

  /// Expects the paged check to fail with `expect` in the message.
  void reject(const fa_attention_args &args, const fa_paged_kv *p,
              const std::string &expect, int32_t splits = 4) {
    EXPECT_EQ(fa_attention_forward_paged_check(paged, &args, p, ws, bytes,
                                               splits),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  }

  fa_bundle *bundle = nullptr;
  const fa_kernel *paged = nullptr, *dense = nullptr;
  fa_attention_args a{};
  fa_paged_kv cache{};
  uint64_t bytes = 0;
  const CUdeviceptr ws = addr(20);
};

TEST_F(PagedApi, OnlyThePagedSearchFindsIt) {
  fa_kernel_query q = decodeQuery();
  const fa_kernel *k = nullptr;
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_find_splitkv(bundle, &q, 4096, &k), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "dense");
  ASSERT_EQ(fa_kernel_find_paged(bundle, &q, 4096, 0, &k), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "pg");
  EXPECT_EQ(fa_kernel_find_paged(bundle, &q, 4096, 1, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(lastError().find("(split-KV) (packed GQA) (paged KV)"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_kernel_find_paged(bundle, &q, 4096, 2, &k),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("pack_gqa is 2; expected 0 or 1"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_NOT_FOUND);
}

TEST_F(PagedApi, AcceptsValidCalls) {
  EXPECT_EQ(fa_attention_forward_paged_check(paged, &a, &cache, ws, bytes, 4),
            FA_SUCCESS)
      << lastError();
  // Pages of 64 keys, and pools whose pages are strided views of a larger
  // buffer (a row stride of two heads' rows, 16-byte multiples).
  fa_attention_args big = a;
  fa_paged_kv bigCache = cache;
  bigCache.page_size = 64;
  big.k = tensor(addr(1), FA_DTYPE_BF16, {Pages, 64, Hkv, D});
  big.v = big.k;
  big.v.data = addr(2);
  EXPECT_EQ(fa_attention_forward_paged_check(paged, &big, &bigCache, ws,
                                             bytes, 1),
            FA_SUCCESS)
      << lastError();
  big.k.strides[1] = 2 * Hkv * D;
  big.k.strides[0] = 64 * big.k.strides[1];
  EXPECT_EQ(fa_attention_forward_paged_check(paged, &big, &bigCache, ws,
                                             bytes, 1),
            FA_SUCCESS)
      << lastError();
}

TEST_F(PagedApi, KernelAndLaunchMustAgree) {
  // The dense split kernel has no page table parameter ...
  EXPECT_EQ(fa_attention_forward_paged_check(dense, &a, &cache, ws, bytes, 4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'dense' is not a paged-KV kernel"),
            std::string::npos)
      << lastError();
  // ... and the split launch would leave the paged kernel's unset.
  fa_attention_args denseArgs = a;
  denseArgs.k = tensor(addr(1), FA_DTYPE_BF16, {B, Hkv, 128, D});
  denseArgs.v = tensor(addr(2), FA_DTYPE_BF16, {B, Hkv, 128, D});
  EXPECT_EQ(fa_attention_forward_splitkv_check(paged, &denseArgs, ws, bytes, 4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'pg' reads a paged KV cache; use "
                             "fa_attention_forward_paged"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(fa_attention_forward_splitkv_check(dense, &denseArgs, ws, bytes, 4),
            FA_SUCCESS)
      << lastError();
  EXPECT_EQ(fa_attention_forward_paged_check(nullptr, &a, &cache, ws, bytes, 4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fa_attention_forward_paged_check(paged, nullptr, &cache, ws, bytes,
                                             4),
            FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(PagedApi, RejectsBadCacheFields) {
  reject(a, nullptr, "paged is null");
  fa_paged_kv p = cache;
  p.page_size = 24;
  reject(a, &p, "page_size 24 and num_pages 64; max_pages and num_pages must "
                "be >= 1 and page_size a positive multiple of 16");
  p = cache;
  p.page_size = 0;
  reject(a, &p, "page_size a positive multiple of 16");
  p = cache;
  p.max_pages = 0;
  reject(a, &p, "max_pages 0");
  p = cache;
  p.num_pages = 0;
  reject(a, &p, "num_pages 0");
  p = cache;
  p.max_pages = 1 << 28;
  reject(a, &p, "must stay below 2^31");
  p = cache;
  p.page_table = 0;
  reject(a, &p, "page_table 0x0 must be a non-null, 4-byte aligned");
  p = cache;
  p.seqused_k = addr(6) + 2;
  reject(a, &p, "seqused_k 0x7f0600000002 must be a non-null, 4-byte aligned");
  // The pools' extents must be the cache's.
  p = cache;
  p.page_size = 32;
  reject(a, &p, "k.shape is [64,16,8,128], expected [64,32,8,128]");
  p = cache;
  p.num_pages = 65;
  reject(a, &p, "k.shape is [64,16,8,128], expected [65,16,8,128]");
}

TEST_F(PagedApi, RejectsBadTensors) {
  fa_attention_args b = a;
  b.v = tensor(addr(2), FA_DTYPE_BF16, {Pages, PageSize, 4, D});
  reject(b, &cache, "v.shape is [64,16,4,128], expected [64,16,8,128]");
  b = a;
  b.k.strides[0] += 8;
  reject(b, &cache, "a page's rows must follow each other (strides[0] = "
                    "page_size x strides[1] = 16384)");
  b = a;
  b.q = tensor(addr(0), FA_DTYPE_BF16, {B, 12, Nq, D});
  b.o = tensor(addr(3), FA_DTYPE_BF16, {B, 12, Nq, D});
  b.lse = tensor(addr(4), FA_DTYPE_F32, {B, 12, Nq});
  reject(b, &cache, "q has 12 heads and k has 8");
  b = a;
  b.k = tensor(addr(1), FA_DTYPE_BF16, {Pages, PageSize, Hkv, 64});
  reject(b, &cache, "k.shape is [64,16,8,64], expected [64,16,8,128]");
  b = a;
  b.o = tensor(addr(3), FA_DTYPE_BF16, {B, H, 2, D});
  reject(b, &cache, "o.shape is [2,32,2,128], expected [2,32,1,128]");
  b = a;
  b.k.dtype = FA_DTYPE_F16;
  reject(b, &cache, "k.dtype is f16, expected bf16");
  b = a;
  b.scale = NAN;
  reject(b, &cache, "scale is nan");
  // Outputs may overlap neither the pools nor the page table.
  b = a;
  b.o.data = addr(1);
  reject(b, &cache, "output o");
  fa_paged_kv p = cache;
  p.page_table = addr(4);
  reject(a, &p, "overlaps page_table");
  // The split-KV workspace rules hold.
  reject(a, &cache, "splits is 0 for batch 2", 0);
  EXPECT_EQ(fa_attention_forward_paged_check(paged, &a, &cache, ws, bytes - 4,
                                             4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("workspace_bytes is"), std::string::npos)
      << lastError();
  // The launch runs the same checks before it touches the driver.
  EXPECT_EQ(fa_attention_forward_paged(paged, &a, nullptr, ws, bytes, 4,
                                       nullptr),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("fa_attention_forward_paged: paged is null"),
            std::string::npos)
      << lastError();
}

} // namespace

namespace {
/// The paged kernel with attention sinks that fa-aot writes for
/// `fwd:bf16:d128:none:splitkv:paged:sinks`: its merge takes the sinks after
/// its 8 parameters and o's 3 strides.
std::string pagedSinksKernel(const std::string &tag) {
  return splitKernel(tag, R"(, "paged": true, "page_table_param": 21,
                             "sinks": true, "sinks_param": 11)");
}
} // namespace

TEST_F(PagedApi, SinksGoThroughTheirOwnLaunch) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("paged_sinks",
                     manifestOf({pagedSinksKernel("ps")}, "16"), &b),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *withSinks = fa_bundle_kernel_at(b, 0);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(withSinks, &info), FA_SUCCESS);
  EXPECT_EQ(info.sinks, 1);
  EXPECT_EQ(info.paged, 1);
  // Found by the paged search for a query with sinks, not without.
  fa_kernel_query q = decodeQuery();
  const fa_kernel *k = nullptr;
  EXPECT_EQ(fa_kernel_find_paged(b, &q, 4096, 0, &k), FA_ERROR_NOT_FOUND);
  q.sinks = 1;
  ASSERT_EQ(fa_kernel_find_paged(b, &q, 4096, 0, &k), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(k, withSinks);

  fa_tensor sinks = tensor(addr(7), FA_DTYPE_F32, {H});
  EXPECT_EQ(fa_attention_forward_paged_sinks_check(withSinks, &a, &cache, ws,
                                                   bytes, 4, &sinks),
            FA_SUCCESS)
      << lastError();
  // The plain paged launch would leave the merge's sinks unset.
  EXPECT_EQ(fa_attention_forward_paged_check(withSinks, &a, &cache, ws, bytes,
                                             4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kernel 'ps' has attention sinks; launch it with "
                             "fa_attention_forward_paged_sinks and a sinks "
                             "tensor f32 [H]"),
            std::string::npos)
      << lastError();
  // The sinks launch's check on `kernel` fails with `expect`.
  auto rejectSinks = [&](const fa_kernel *kernel, const fa_tensor *s,
                         const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_paged_sinks_check(kernel, &a, &cache, ws,
                                                     bytes, 4, s),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  };
  // ... and the sinks launch would pass a parameter a plain kernel lacks.
  rejectSinks(paged, &sinks, "kernel 'pg' has no attention sinks");
  // The sinks themselves: present, f32 [H], and no output on top of them.
  rejectSinks(withSinks, nullptr, "sinks is null");
  fa_tensor wrong = tensor(addr(7), FA_DTYPE_F32, {Hkv});
  rejectSinks(withSinks, &wrong, "sinks.shape is [8], expected [32]");
  fa_tensor onOutput = tensor(a.lse.data, FA_DTYPE_F32, {H});
  rejectSinks(withSinks, &onOutput, "overlap");
  fa_bundle_free(b);
}

TEST_F(PagedApi, ModArgsThroughTheExLaunch) {
  // A paged kernel whose score_mod reads a key bias [B, Nk]: its mod_args
  // follow the paged parameters (21 + 5).
  std::string modded = splitKernel("pm", R"(, "paged": true,
      "page_table_param": 21, "mod_args": [{"dtype": "f32", "rank": 2,
      "dims": ["batch", "nk"]}], "mod_arg_param": 26)");
  modded.replace(modded.find(R"("score_mod": null)"), 17,
                 R"("score_mod": "key_bias")");
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("paged_mods", manifest({modded}), &b), FA_SUCCESS)
      << lastError();
  const fa_kernel *pm = fa_bundle_kernel_at(b, 0);
  // "nk" is the page table's capacity, not a pool dimension.
  fa_tensor bias = tensor(addr(8), FA_DTYPE_F32, {B, MaxPages * PageSize});
  EXPECT_EQ(fa_attention_forward_paged_check_ex(pm, &a, &cache, ws, bytes, 4,
                                                &bias, 1, nullptr),
            FA_SUCCESS)
      << lastError();
  auto rejectEx = [&](const fa_kernel *kernel, const fa_tensor *mods,
                      int32_t count, const fa_tensor *sinks,
                      const std::string &expect) {
    EXPECT_EQ(fa_attention_forward_paged_check_ex(kernel, &a, &cache, ws, bytes,
                                                  4, mods, count, sinks),
              FA_ERROR_INVALID_ARGUMENT)
        << expect;
    EXPECT_NE(lastError().find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << lastError();
  };
  fa_tensor pooled = tensor(addr(8), FA_DTYPE_F32, {B, Pages * PageSize});
  rejectEx(pm, &pooled, 1, nullptr,
           "mod_args[0].shape is [2,1024], but kernel 'pm' reads it as [batch, "
           "nk] = dimension 1 of 128");
  rejectEx(pm, nullptr, 0, nullptr, "reads 1 (f32 [batch, nk]) score_mod");
  fa_tensor onOutput = tensor(a.o.data, FA_DTYPE_F32, {B, MaxPages * PageSize});
  rejectEx(pm, &onOutput, 1, nullptr, "overlap");
  fa_tensor sinks = tensor(addr(7), FA_DTYPE_F32, {H});
  rejectEx(pm, &bias, 1, &sinks, "kernel 'pm' has no attention sinks");
  // The plain paged launch would leave the kernel's mod_args unset.
  EXPECT_EQ(fa_attention_forward_paged_check(pm, &a, &cache, ws, bytes, 4),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("reads 1 (f32 [batch, nk])"), std::string::npos)
      << lastError();
  // The _ex launch serves a kernel without mods or sinks too.
  EXPECT_EQ(fa_attention_forward_paged_check_ex(paged, &a, &cache, ws, bytes, 4,
                                                nullptr, 0, nullptr),
            FA_SUCCESS)
      << lastError();
  rejectEx(paged, &bias, 1, nullptr, "kernel 'pg' reads none score_mod");
  fa_bundle_free(b);
}

namespace {

/// The paged decode kernel fa-aot writes for
/// `fwd:bf16:d128:none:packgqa:splitkv:bq32:w2:paged:pw:tma`: k and v maps
/// over the pools after the split count, the strides at 14, the page table
/// after them; `box` the maps' box.
std::string pagedTmaKernel(const std::string &box = "[64, 16, 1, 1]") {
  auto map = [&](const char *t, const char *param, const char *dim) {
    return std::string(R"({"tensor": ")") + t + R"(", "param": )" + param +
           R"(, "dims": [")" + dim +
           R"(", "page_size", "kv_heads", "num_pages"], "box": )" + box +
           R"(, "swizzle": 128, "l2_promotion": 128, "oob_fill": "zero"})";
  };
  return R"({"tag": "pt", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 32, "block_kv": 64,
      "warps": 2, "stages": 2, "mask": "none", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a",
      "split_kv": true, "pack_gqa": true, "producer_warp": true,
      "entries": {
        "fwd": {"name": "fa_fwd_pt", "threads": 96, "shared_bytes": 73792},
        "merge": {"name": "fa_merge_pt", "threads": 128, "shared_bytes": 0}},
      "ptx": "pt.ptx", "stride_param": 14, "paged": true,
      "page_table_param": 23, "tensor_maps": [)" +
         map("k", "12", "head_dim") + ", " + map("v", "13", "head_dim_v") +
         "]}";
}

} // namespace

TEST(PagedTma, PoolMapsOfSixteenKeyBoxes) {
  fa_bundle *b = nullptr;
  ASSERT_EQ(loadText("paged_tma", manifest({pagedTmaKernel()}, "20"), &b),
            FA_SUCCESS)
      << lastError();
  const fa_kernel *k = fa_bundle_kernel_at(b, 0);
  constexpr int64_t Pages = 40, PageSize = 48, Hkv = 8, D = 128;
  fa_attention_args a{};
  a.q = tensor(addr(0), FA_DTYPE_BF16, {2, 32, 1, D});
  a.k = tensor(addr(1), FA_DTYPE_BF16, {Pages, PageSize, Hkv, D});
  a.v = tensor(addr(2), FA_DTYPE_BF16, {Pages, PageSize, Hkv, D});
  // v's rows two heads' rows apart (a strided view of a larger buffer).
  a.v.strides[1] = 2 * Hkv * D;
  a.v.strides[0] = PageSize * a.v.strides[1];
  a.o = tensor(addr(3), FA_DTYPE_BF16, {2, 32, 1, D});
  a.lse = tensor(addr(4), FA_DTYPE_F32, {2, 32, 1});
  a.scale = 0.125f;
  fa_paged_kv cache{addr(5), addr(6), 8, PageSize, Pages};
  uint64_t bytes = 0;
  ASSERT_EQ(fa_splitkv_workspace_bytes(k, 2, 32, 1, 4, &bytes), FA_SUCCESS);
  EXPECT_EQ(fa_attention_forward_paged_check(k, &a, &cache, addr(20), bytes, 4),
            FA_SUCCESS)
      << lastError();
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = -1;
  ASSERT_EQ(fa_attention_forward_paged_tensor_maps(k, &a, &cache, maps, &count),
            FA_SUCCESS)
      << lastError();
  ASSERT_EQ(count, 2);
  for (int i = 0; i < 2; ++i) {
    const fa_tensor_map_args &m = maps[i];
    EXPECT_STREQ(m.tensor, i ? "v" : "k");
    EXPECT_EQ(m.param, 12 + i);
    EXPECT_EQ(m.rank, 4u);
    EXPECT_EQ(m.global_address, i ? addr(2) : addr(1));
    // (D, page_size, Hkv, pages): rows of a page, then heads, then pages.
    const uint64_t dims[4] = {D, PageSize, Hkv, Pages};
    const uint64_t rowBytes = (i ? 2 : 1) * Hkv * D * 2;
    const uint64_t strides[3] = {rowBytes, D * 2, PageSize * rowBytes};
    const uint32_t box[4] = {64, 16, 1, 1};
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(m.global_dim[d], dims[d]) << "map " << i << " dim " << d;
      EXPECT_EQ(m.box_dim[d], box[d]) << "map " << i << " box " << d;
    }
    for (int d = 0; d < 3; ++d)
      EXPECT_EQ(m.global_strides[d], strides[d]) << "map " << i << " stride "
                                                 << d;
  }
  // Not a paged launch's kernel, or no cache: refused, no maps.
  EXPECT_EQ(fa_attention_forward_paged_tensor_maps(k, &a, nullptr, maps,
                                                   &count),
            FA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 0);
  EXPECT_NE(lastError().find("paged is null"), std::string::npos)
      << lastError();
  fa_bundle_free(b);

  // Beside a cp.async paged kernel of the same problem and key tile, listed
  // first, the paged search takes the TMA one.
  ASSERT_EQ(loadText("paged_tma_pick",
                     manifest({splitKernel("pc", R"(, "pack_gqa": true,
                                  "paged": true, "page_table_param": 21)"),
                               pagedTmaKernel()},
                              "20"),
                     &b),
            FA_SUCCESS)
      << lastError();
  fa_kernel_query q = decodeQuery();
  const fa_kernel *pick = nullptr;
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_find_paged(b, &q, 4096, 1, &pick), FA_SUCCESS)
      << lastError();
  ASSERT_EQ(fa_kernel_get_info(pick, &info), FA_SUCCESS);
  EXPECT_STREQ(info.tag, "pt");
  fa_bundle_free(b);

  // A version-19 runtime refuses maps on a paged kernel.
  expectRejected("paged_tma_v19", manifest({pagedTmaKernel()}, "19"),
                 "paged kernels with tensor maps need bundle version 20");
  // The kernels' boxes are 16-key groups, not the key tile.
  expectRejected("paged_tma_box",
                 manifest({pagedTmaKernel("[64, 64, 1, 1]")}, "20"),
                 "box[1] = 64, expected a paged kernel's key group of 16");
}
