//===- KvAppendTest.cpp - GPU-free tests of fa_kv_append ------------------===//
//
// The kv_append entry of a paged split forward (manifest, kernel info, the
// search that returns only such kernels) and every check of fa_kv_append
// with fake device addresses and host copies of the counts and the table:
// shapes, dtypes, rotary tables, q, and the capacity and page-table checks
// that turn an out-of-cache write into an error.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace fa_test;

namespace {

/// fa-aot's `fwd:bf16:d128:none:splitkv:paged[:append]`.
std::string pagedKernel(const std::string &tag, bool append) {
  std::string appendEntry =
      append ? R"(, "kv_append": {"name": "fa_kv_append_)" + tag +
                   R"(", "threads": 256, "shared_bytes": 0})"
             : "";
  return R"({"tag": ")" + tag + R"(", "direction": "fwd", "dtype": "bf16",
      "head_dim": 128, "head_dim_v": 128, "block_q": 64, "block_kv": 64,
      "warps": 4, "stages": 2, "mask": "none", "window_left": -1,
      "window_right": -1, "score_mod": null, "target": "sm_90a",
      "split_kv": true, "entries": {
        "fwd": {"name": "fa_fwd_)" + tag +
         R"(", "threads": 128, "shared_bytes": 49152},
        "merge": {"name": "fa_merge_)" + tag +
         R"(", "threads": 128, "shared_bytes": 0})" + appendEntry + R"(},
      "ptx": ")" + tag + R"(.ptx", "stride_param": 12, "paged": true,
      "page_table_param": 21})";
}

std::string manifest(const std::vector<std::string> &kernels) {
  std::string list;
  for (const std::string &k : kernels)
    list += (list.empty() ? "" : ",") + k;
  return R"({"format": "fa-bundle", "version": 14, "compiler": "test", "kernels": [)" +
         list + "]}";
}

fa_kernel_query decodeQuery() {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = 128;
  q.mask = FA_MASK_NONE;
  q.compute_capability = 90;
  return q;
}

/// A valid paged append: 2 sequences, 3 new rows, pages of 16, 2 pages each.
struct Call {
  std::vector<int32_t> seqlens{5, 16};
  std::vector<int32_t> table{0, 1, 2, 3};
  fa_kv_append_args args{};
  Call() {
    args.k_new = tensor(addr(1), FA_DTYPE_BF16, {2, 3, 8, 128});
    args.v_new = tensor(addr(2), FA_DTYPE_BF16, {2, 3, 8, 128});
    args.k_cache = tensor(addr(3), FA_DTYPE_BF16, {4, 16, 8, 128});
    args.v_cache = tensor(addr(4), FA_DTYPE_BF16, {4, 16, 8, 128});
    args.cache_seqlens = addr(5);
    args.page_table = addr(6);
    args.max_pages = 2;
    refresh();
  }
  void refresh() {
    args.cache_seqlens_host = seqlens.data();
    args.page_table_host = table.data();
  }
  void rotary(int64_t maxPos, int64_t half) {
    args.rotary_cos = tensor(addr(7), FA_DTYPE_F32, {maxPos, half});
    args.rotary_sin = tensor(addr(8), FA_DTYPE_F32, {maxPos, half});
  }
};

class KvAppend : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(loadText("kvappend", manifest({pagedKernel("plain", false),
                                             pagedKernel("app", true)}),
                       &bundle),
              FA_SUCCESS)
        << lastError();
    plain = fa_bundle_kernel_at(bundle, 0);
    app = fa_bundle_kernel_at(bundle, 1);
  }
  void TearDown() override { fa_bundle_free(bundle); }
  void expectError(const Call &c, const std::string &part) {
    EXPECT_EQ(fa_kv_append_check(app, &c.args), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(part), std::string::npos) << lastError();
  }
  fa_bundle *bundle = nullptr;
  const fa_kernel *plain = nullptr, *app = nullptr;
};

TEST_F(KvAppend, InfoAndSearch) {
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(app, &info), FA_SUCCESS);
  EXPECT_EQ(info.kv_append, 1);
  ASSERT_EQ(fa_kernel_get_info(plain, &info), FA_SUCCESS);
  EXPECT_EQ(info.kv_append, 0);
  fa_kernel_query q = decodeQuery();
  const fa_kernel *found = nullptr;
  ASSERT_EQ(fa_kernel_find_paged_append(bundle, &q, 1024, 0, &found), FA_SUCCESS)
      << lastError();
  EXPECT_EQ(found, app);
}

TEST_F(KvAppend, ValidCalls) {
  Call c;
  EXPECT_EQ(fa_kv_append_check(app, &c.args), FA_SUCCESS) << lastError();
  c.rotary(64, 32);
  c.args.q = tensor(addr(9), FA_DTYPE_BF16, {2, 3, 32, 128});
  c.args.q_out = tensor(addr(10), FA_DTYPE_BF16, {2, 3, 32, 128});
  EXPECT_EQ(fa_kv_append_check(app, &c.args), FA_SUCCESS) << lastError();
  // A contiguous cache [B, Ncap, Hkv, D].
  Call d;
  d.args.page_table = 0;
  d.args.max_pages = 0;
  d.args.k_cache = tensor(addr(3), FA_DTYPE_BF16, {2, 32, 8, 128});
  d.args.v_cache = tensor(addr(4), FA_DTYPE_BF16, {2, 32, 8, 128});
  EXPECT_EQ(fa_kv_append_check(app, &d.args), FA_SUCCESS) << lastError();
}

TEST_F(KvAppend, KernelWithoutEntry) {
  Call c;
  EXPECT_EQ(fa_kv_append_check(plain, &c.args), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("has no kv_append entry"), std::string::npos)
      << lastError();
}

TEST_F(KvAppend, CapacityOverflow) {
  Call c;
  c.seqlens[1] = 30; // 30 + 3 > 2 pages of 16
  expectError(c, "cache_seqlens[1] = 30 with 3 new rows overflows the cache: "
                 "its capacity is 32 rows per sequence");
  c.seqlens[1] = -1;
  expectError(c, "cache_seqlens[1] = -1");
}

TEST_F(KvAppend, PageEntryOutsideThePool) {
  Call c;
  c.table[3] = 4; // sequence 1's rows 16..18 go through page_table[1, 1]
  expectError(c, "page_table[1, 1] = 4 holds new rows but is outside the "
                 "pool's 4 pages");
  c.table[3] = 3;
  c.table[1] = -7; // sequence 0 (rows 5..7) never reaches its second page
  EXPECT_EQ(fa_kv_append_check(app, &c.args), FA_SUCCESS) << lastError();
}

TEST_F(KvAppend, HostCopiesRequired) {
  Call c;
  c.args.cache_seqlens_host = nullptr;
  expectError(c, "cache_seqlens and cache_seqlens_host must both be given");
  Call d;
  d.args.page_table_host = nullptr;
  expectError(d, "page_table_host");
}

TEST_F(KvAppend, Shapes) {
  Call c;
  c.args.v_new = tensor(addr(2), FA_DTYPE_BF16, {2, 4, 8, 128});
  expectError(c, "v_new.shape");
  Call d;
  d.args.k_new = tensor(addr(1), FA_DTYPE_F16, {2, 3, 8, 128});
  expectError(d, "k_new.dtype is f16, expected bf16");
  Call e;
  e.args.max_pages = 0;
  expectError(e, "max_pages is 0, expected at least 1");
}

TEST_F(KvAppend, Rotary) {
  Call c;
  c.rotary(64, 80);
  expectError(c, "gives rotary_dim 160, expected at most the head dim 128");
  Call d;
  d.rotary(18, 32); // positions up to 16 + 3 - 1 = 18
  expectError(d, "puts rotary positions up to 18 past rotary_cos's 18 rows");
  Call e;
  e.args.q = tensor(addr(9), FA_DTYPE_BF16, {2, 1, 32, 128});
  e.args.q_out = tensor(addr(10), FA_DTYPE_BF16, {2, 1, 32, 128});
  expectError(e, "q is given without rotary_cos");
  Call f;
  f.rotary(64, 32);
  f.args.q = tensor(addr(9), FA_DTYPE_BF16, {2, 1, 32, 128});
  f.args.q_out = tensor(addr(9), FA_DTYPE_BF16, {2, 1, 32, 128});
  expectError(f, "overlap");
}

} // namespace
