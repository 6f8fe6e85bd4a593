//===- CApiTest.cpp - No C++ exception leaves libfa_runtime's C API -------===//
//
// Every allocation inside each GPU-free C entry point is made to fail in
// turn (a replaced operator new throws std::bad_alloc at the k-th call): the
// call must return FA_ERROR_INTERNAL with a message, never unwind into the C
// caller. Every field of a valid manifest is replaced by values of every JSON
// kind: the load must succeed or be FA_ERROR_BAD_MANIFEST, never crash.
//
//===----------------------------------------------------------------------===//

#include "fa/Runtime/fa_runtime.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using nlohmann::json;

namespace {
/// The allocations left before one throws; negative: none throws.
thread_local long allocationsBeforeFailure = -1;
} // namespace

void *operator new(std::size_t size) {
  if (allocationsBeforeFailure == 0) {
    allocationsBeforeFailure = -1;
    throw std::bad_alloc();
  }
  if (allocationsBeforeFailure > 0)
    --allocationsBeforeFailure;
  if (void *p = std::malloc(size ? size : 1))
    return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t size) { return operator new(size); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }

namespace {

std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "fa_capi_" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

/// A small valid manifest: the fixture bundle's first forward and backward
/// and a wgmma forward made from that forward (docs/ABI.md's maps).
json smallManifest() {
  std::ifstream in(std::string(FA_FIXTURE_BUNDLE) + "/manifest.json");
  json full = json::parse(in);
  json fwd = full["kernels"][0], bwd = full["kernels"][1], wgmma = fwd;
  wgmma["tag"] = "wgmma_fwd";
  wgmma["mma"] = "wgmma";
  wgmma["target"] = "sm_90a";
  wgmma["block_q"] = wgmma["block_kv"] = 128;
  wgmma["warps"] = 12;
  wgmma["entries"]["fwd"]["threads"] = 384;
  wgmma["entries"]["fwd"]["shared_bytes"] = 163840;
  wgmma["tensor_maps"] = json::parse(R"([
    {"tensor": "q", "param": 11, "dims": ["head_dim", "nq", "batch*heads"],
     "box": [64, 128, 1], "swizzle": 128, "l2_promotion": 256, "oob_fill": "zero"},
    {"tensor": "k", "param": 12, "dims": ["head_dim", "nk", "batch*kv_heads"],
     "box": [64, 128, 1], "swizzle": 128, "l2_promotion": 256, "oob_fill": "zero"},
    {"tensor": "v", "param": 13, "dims": ["head_dim_v", "nk", "batch*kv_heads"],
     "box": [64, 128, 1], "swizzle": 128, "l2_promotion": 256, "oob_fill": "zero"}])");
  full["kernels"] = json::array({fwd, bwd, wgmma});
  full["version"] = 5; // the wgmma kernel's maps are passed by value
  return full;
}

std::string writeBundle(const std::string &name, const std::string &text) {
  std::string dir = tempDir(name);
  std::ofstream(dir + "/manifest.json") << text;
  return dir;
}

/// Runs `call` with the k-th allocation failing, for k = 0, 1, ... until a
/// run needs fewer. Each such run must return normally, either with
/// FA_ERROR_INTERNAL and "out of host memory" in the message or, where the
/// failure hit a std::ostringstream (which swallows it and only truncates its
/// text), with the status of a run without failures. Returns the runs made.
template <typename Call>
long sweepAllocationFailures(const char *name, Call call) {
  fa_status expected = call();
  long k = 0;
  for (;; ++k) {
    allocationsBeforeFailure = k;
    fa_status status = call();
    bool injected = allocationsBeforeFailure == -1;
    allocationsBeforeFailure = -1;
    if (!injected)
      break;
    if (status == expected)
      continue;
    EXPECT_EQ(status, FA_ERROR_INTERNAL) << name << ", allocation " << k;
    EXPECT_NE(std::string(fa_last_error()).find("out of host memory"),
              std::string::npos)
        << name << ", allocation " << k << ": " << fa_last_error();
  }
  return k;
}

/// A tensor at a fake device address of its own (1 GiB apart).
fa_tensor tensor(fa_dtype dtype, std::initializer_list<int64_t> shape) {
  static CUdeviceptr next = 0x7f0000000000;
  fa_tensor t{};
  t.data = next += CUdeviceptr(1) << 30;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape)
    t.shape[i++] = d;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

} // namespace

TEST(CApi, EveryAllocationFailureIsAnInternalError) {
  std::string dir = writeBundle("alloc", smallManifest().dump());
  long runs = sweepAllocationFailures("fa_bundle_load", [&] {
    fa_bundle *b = nullptr;
    fa_status s = fa_bundle_load(dir.c_str(), &b);
    EXPECT_TRUE(s == FA_SUCCESS || !b);
    fa_bundle_free(b);
    return s;
  });
  EXPECT_GT(runs, 100) << "the manifest parse allocates";

  fa_bundle *bundle = nullptr;
  ASSERT_EQ(fa_bundle_load(dir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  ASSERT_EQ(fa_bundle_kernel_count(bundle), 3);
  const fa_kernel *fwd = fa_bundle_kernel_at(bundle, 0);
  const fa_kernel *bwd = fa_bundle_kernel_at(bundle, 1);
  const fa_kernel *wgmma = fa_bundle_kernel_at(bundle, 2);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(fwd, &info), FA_SUCCESS);

  // A query no kernel matches builds a long message listing the bundle.
  fa_kernel_query miss{};
  miss.direction = FA_DIRECTION_FWD;
  miss.dtype = FA_DTYPE_F32;
  miss.head_dim = 80;
  miss.compute_capability = 90;
  miss.score_mod = "softcap";
  EXPECT_GT(sweepAllocationFailures("fa_kernel_find", [&] {
              const fa_kernel *k = nullptr;
              return fa_kernel_find(bundle, &miss, &k);
            }),
            0);
  sweepAllocationFailures("fa_kernel_find_for_keys", [&] {
    const fa_kernel *k = nullptr;
    return fa_kernel_find_for_keys(bundle, &miss, 4096, &k);
  });
  sweepAllocationFailures("fa_kernel_find_deterministic", [&] {
    const fa_kernel *k = nullptr;
    return fa_kernel_find_deterministic(bundle, &miss, 0, &k);
  });

  // Arguments the checks reject (a message with the values) and accept.
  int d = info.head_dim;
  fa_attention_args args{};
  args.q = tensor(info.dtype, {1, 2, 100, d});
  args.k = tensor(info.dtype, {1, 2, 300, d});
  args.v = tensor(info.dtype, {1, 2, 300, d});
  args.o = tensor(info.dtype, {1, 2, 100, d});
  args.lse = tensor(FA_DTYPE_F32, {1, 2, 100});
  args.scale = 0.125f;
  for (const fa_kernel *k : {fwd, wgmma}) {
    ASSERT_EQ(fa_attention_forward_check(k, &args), FA_SUCCESS)
        << fa_last_error();
    sweepAllocationFailures("fa_attention_forward_check",
                            [&] { return fa_attention_forward_check(k, &args); });
    sweepAllocationFailures("fa_attention_forward_tensor_maps", [&] {
      fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
      int32_t count = 0;
      return fa_attention_forward_tensor_maps(k, &args, maps, &count);
    });
  }
  fa_attention_args wrong = args;
  wrong.o = tensor(info.dtype, {1, 2, 99, d});
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_check (bad)", [&] {
              return fa_attention_forward_check(fwd, &wrong);
            }),
            0);

  fa_attention_backward_args b{};
  for (fa_tensor *t : {&b.q, &b.o, &b.d_o, &b.dq})
    *t = tensor(info.dtype, {1, 2, 100, d});
  for (fa_tensor *t : {&b.k, &b.v, &b.dk, &b.dv})
    *t = tensor(info.dtype, {1, 2, 300, d});
  b.lse = tensor(FA_DTYPE_F32, {1, 2, 100});
  b.delta = tensor(FA_DTYPE_F32, {1, 2, 100});
  b.dq_accum = tensor(FA_DTYPE_F32, {1, 2, 100, d});
  b.scale = 0.125f;
  ASSERT_EQ(fa_attention_backward_check(bwd, &b), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_backward_check",
                          [&] { return fa_attention_backward_check(bwd, &b); });
  sweepAllocationFailures("fa_attention_backward_grids", [&] {
    unsigned grids[3][3];
    return fa_attention_backward_grids(bwd, &b, grids);
  });
  sweepAllocationFailures("fa_attention_backward_tensor_maps", [&] {
    fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
    int32_t count = 0;
    return fa_attention_backward_tensor_maps(bwd, &b, maps, &count);
  });
  std::string missing = dir + "/no_such.ptx";
  sweepAllocationFailures("fa_module_load_file", [&] {
    fa_module *m = nullptr;
    return fa_module_load_file(missing.c_str(), &m);
  });
  fa_bundle_free(bundle);
}

TEST(CApi, ModArgChecksSurviveAllocationFailures) {
  // A forward and a backward whose score_mod reads slopes [H] (bundle
  // version 8): the manifest, fa_kernel_get_mod_arg and the _ex checks,
  // accepting and rejecting, each run out of memory at every allocation.
  json full = smallManifest();
  json fwd = full["kernels"][0], bwd = full["kernels"][1];
  for (json *k : {&fwd, &bwd}) {
    (*k)["tag"] = "mod_" + (*k)["tag"].get<std::string>();
    (*k)["score_mod"] = "slopes";
    (*k)["mod_args"] =
        json::parse(R"([{"dtype": "f32", "rank": 1, "dims": ["heads"]}])");
  }
  fwd["mod_arg_param"] = 11;
  bwd["mod_arg_param"] = 15;
  full["kernels"] = json::array({fwd, bwd});
  full["version"] = 8;
  std::string dir = writeBundle("alloc_mod", full.dump());
  sweepAllocationFailures("fa_bundle_load (mod_args)", [&] {
    fa_bundle *b = nullptr;
    fa_status s = fa_bundle_load(dir.c_str(), &b);
    fa_bundle_free(b);
    return s;
  });
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(fa_bundle_load(dir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  const fa_kernel *f = fa_bundle_kernel_at(bundle, 0);
  const fa_kernel *b = fa_bundle_kernel_at(bundle, 1);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(f, &info), FA_SUCCESS);
  sweepAllocationFailures("fa_kernel_get_mod_arg", [&] {
    fa_mod_arg_info m;
    return fa_kernel_get_mod_arg(f, 3, &m);
  });
  int d = info.head_dim;
  fa_attention_args args{};
  args.q = tensor(info.dtype, {1, 2, 100, d});
  args.k = tensor(info.dtype, {1, 2, 300, d});
  args.v = tensor(info.dtype, {1, 2, 300, d});
  args.o = tensor(info.dtype, {1, 2, 100, d});
  args.lse = tensor(FA_DTYPE_F32, {1, 2, 100});
  args.scale = 0.125f;
  fa_tensor slopes = tensor(FA_DTYPE_F32, {2}), wrong = tensor(FA_DTYPE_F32, {3});
  ASSERT_EQ(fa_attention_forward_check_ex(f, &args, &slopes, 1), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_forward_check_ex", [&] {
    return fa_attention_forward_check_ex(f, &args, &slopes, 1);
  });
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_check_ex (bad)",
                                    [&] {
                                      return fa_attention_forward_check_ex(
                                          f, &args, &wrong, 1);
                                    }),
            0);
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_check (none)", [&] {
              return fa_attention_forward_check(f, &args);
            }),
            0);
  fa_attention_backward_args ba{};
  for (fa_tensor *t : {&ba.q, &ba.o, &ba.d_o, &ba.dq})
    *t = tensor(info.dtype, {1, 2, 100, d});
  for (fa_tensor *t : {&ba.k, &ba.v, &ba.dk, &ba.dv})
    *t = tensor(info.dtype, {1, 2, 300, d});
  ba.lse = tensor(FA_DTYPE_F32, {1, 2, 100});
  ba.delta = tensor(FA_DTYPE_F32, {1, 2, 100});
  ba.dq_accum = tensor(FA_DTYPE_F32, {1, 2, 100, d});
  ba.scale = 0.125f;
  ASSERT_EQ(fa_attention_backward_check_ex(b, &ba, &slopes, 1), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_backward_check_ex", [&] {
    return fa_attention_backward_check_ex(b, &ba, &wrong, 1);
  });
  fa_bundle_free(bundle);
}

TEST(CApi, InternalErrorHasAName) {
  EXPECT_STREQ(fa_status_string(FA_ERROR_INTERNAL), "internal error");
}

TEST(CApi, ManifestThatIsNoRegularFile) {
  // A directory, a device that never ends, a pipe nobody writes: an I/O
  // error at once, never a hang, a crash or an exception.
  std::string dir = tempDir("not_regular");
  std::string manifest = dir + "/manifest.json";
  unlink(manifest.c_str());
  rmdir(manifest.c_str());
  fa_bundle *b = nullptr;
  ASSERT_EQ(mkdir(manifest.c_str(), 0755), 0);
  EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_IO);
  EXPECT_NE(std::string(fa_last_error()).find(manifest), std::string::npos);
  rmdir(manifest.c_str());
  ASSERT_EQ(mkfifo(manifest.c_str(), 0644), 0);
  EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_IO);
  unlink(manifest.c_str());
  ASSERT_EQ(symlink("/dev/zero", manifest.c_str()), 0);
  EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_IO);
  unlink(manifest.c_str());
  EXPECT_EQ(b, nullptr);
  fa_module *m = nullptr;
  EXPECT_EQ(fa_module_load_file("/dev/zero", &m), FA_ERROR_IO);
  EXPECT_EQ(fa_module_load_file(dir.c_str(), &m), FA_ERROR_IO);
}

TEST(CApi, MalformedJson) {
  for (const char *text :
       {"", "{", "}", "[", "nul", "{\"format\": }", "{\"format\": \"fa-bundle\",}",
        "\xff\xfe", "{\"a\": 1} trailing", "[1, 2", "\"unterminated",
        "{\"version\": 1e999999}", "{\"kernels\": [{\"tag\": \"\\ud800\"}]}"}) {
    std::string dir = writeBundle("malformed", text);
    fa_bundle *b = nullptr;
    EXPECT_EQ(fa_bundle_load(dir.c_str(), &b), FA_ERROR_BAD_MANIFEST) << text;
    EXPECT_NE(std::string(fa_last_error()).find("manifest.json"),
              std::string::npos)
        << text << ": " << fa_last_error();
    EXPECT_EQ(b, nullptr);
  }
}

namespace {
/// Calls `visit` with the JSON pointer of every value under `v`.
void forEachPath(const json &v, const json::json_pointer &at,
                 const std::function<void(const json::json_pointer &)> &visit) {
  visit(at);
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it)
      forEachPath(it.value(), at / it.key(), visit);
  else if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i)
      forEachPath(v[i], at / i, visit);
}
} // namespace

TEST(CApi, EveryFieldOfEveryKind) {
  json base = smallManifest();
  // A TF32 forward, for the fields of f32 kernels.
  json tf32 = base["kernels"][0];
  tf32["tag"] = "tf32_fwd";
  tf32["dtype"] = "f32";
  tf32["tf32"] = true;
  base["kernels"].push_back(tf32);
  {
    fa_bundle *b = nullptr;
    std::string dir = writeBundle("kinds_base", base.dump());
    ASSERT_EQ(fa_bundle_load(dir.c_str(), &b), FA_SUCCESS) << fa_last_error();
    fa_bundle_free(b);
  }
  // A value of each JSON kind, the integer edges and a removed field.
  const json kinds[] = {nullptr,
                        true,
                        -1,
                        0,
                        3.5,
                        1e300,
                        json(uint64_t(18446744073709551615ull)),
                        json(int64_t(-9223372036854775807ll - 1)),
                        2147483648ll,
                        "x",
                        "",
                        json::array(),
                        json::array({1, 2, 3}),
                        json::object(),
                        json::object({{"x", 1}})};
  int loads = 0, rejected = 0;
  forEachPath(base, json::json_pointer(), [&](const json::json_pointer &at) {
    if (at.empty())
      return;
    for (int kind = -1; kind < static_cast<int>(std::size(kinds)); ++kind) {
      json m = base;
      if (kind < 0)
        m.at(at.parent_pointer()).is_object()
            ? (void)m.at(at.parent_pointer()).erase(at.back())
            : (void)m.at(at.parent_pointer()).erase(std::stoul(at.back()));
      else
        m.at(at) = kinds[kind];
      std::string dir = writeBundle("kinds", m.dump());
      fa_bundle *b = nullptr;
      fa_status s = fa_bundle_load(dir.c_str(), &b);
      ++loads;
      if (s == FA_SUCCESS) {
        EXPECT_NE(b, nullptr);
        fa_bundle_free(b);
        continue;
      }
      ++rejected;
      EXPECT_EQ(s, FA_ERROR_BAD_MANIFEST)
          << at.to_string() << " = " << m.dump() << ": " << fa_last_error();
      EXPECT_NE(std::string(fa_last_error()).find("manifest.json: "),
                std::string::npos)
          << at.to_string() << ": " << fa_last_error();
      EXPECT_EQ(b, nullptr);
    }
  });
  // Most replacements break the manifest: the checks are field by field.
  EXPECT_GT(rejected, loads * 3 / 4) << rejected << " of " << loads;
}

TEST(CApi, F32ChoiceSurvivesAllocationFailures) {
  // A TF32 forward only: the search's hint for a query that refuses TF32,
  // the search that takes it, and the checks of 4-byte tensors.
  json full = smallManifest();
  json fwd = full["kernels"][0];
  fwd["dtype"] = "f32";
  fwd["tf32"] = true;
  full["kernels"] = json::array({fwd});
  std::string dir = writeBundle("alloc_f32", full.dump());
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(fa_bundle_load(dir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_F32;
  q.head_dim = fwd["head_dim"].get<int>();
  q.compute_capability = 90;
  const fa_kernel *k = nullptr;
  EXPECT_EQ(fa_kernel_find(bundle, &q, &k), FA_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(fa_last_error()).find("allow_tf32 is 0"),
            std::string::npos)
      << fa_last_error();
  EXPECT_GT(
      sweepAllocationFailures("fa_kernel_find (allow_tf32 0)",
                              [&] { return fa_kernel_find(bundle, &q, &k); }),
      0);
  q.allow_tf32 = 1;
  ASSERT_EQ(fa_kernel_find(bundle, &q, &k), FA_SUCCESS) << fa_last_error();
  sweepAllocationFailures("fa_kernel_find (allow_tf32 1)",
                          [&] { return fa_kernel_find(bundle, &q, &k); });
  int d = q.head_dim;
  fa_attention_args args{};
  args.q = tensor(FA_DTYPE_F32, {1, 2, 100, d});
  args.k = tensor(FA_DTYPE_F32, {1, 2, 300, d});
  args.v = tensor(FA_DTYPE_F32, {1, 2, 300, d});
  args.o = tensor(FA_DTYPE_F32, {1, 2, 100, d});
  args.lse = tensor(FA_DTYPE_F32, {1, 2, 100});
  args.scale = 0.125f;
  ASSERT_EQ(fa_attention_forward_check(k, &args), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_forward_check (f32)",
                          [&] { return fa_attention_forward_check(k, &args); });
  args.v.dtype = FA_DTYPE_BF16;
  EXPECT_GT(sweepAllocationFailures(
                "fa_attention_forward_check (f32, bad)",
                [&] { return fa_attention_forward_check(k, &args); }),
            0);
  fa_bundle_free(bundle);
}

TEST(CApi, VarlenChecksSurviveAllocationFailures) {
  // A varlen wgmma forward (bundle version 10): its manifest fields, its
  // search (hit and miss), the launch checks accepting and rejecting, its
  // maps and grid, and the host check of the offsets, each out of memory at
  // every allocation.
  json full = smallManifest();
  json v = full["kernels"][2];
  v["tag"] = "varlen_fwd";
  v["stride_param"] = 14;
  v["varlen"] = true;
  v["cu_seqlens_param"] = 26;
  for (json &m : v["tensor_maps"]) {
    m["dims"].back() = m["tensor"] == "q" ? "heads" : "kv_heads";
    m["dims"].push_back("batch");
    m["box"].push_back(1);
  }
  full["kernels"] = json::array({v});
  full["version"] = 10;
  std::string dir = writeBundle("alloc_varlen", full.dump());
  sweepAllocationFailures("fa_bundle_load (varlen)", [&] {
    fa_bundle *b = nullptr;
    fa_status s = fa_bundle_load(dir.c_str(), &b);
    fa_bundle_free(b);
    return s;
  });
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(fa_bundle_load(dir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  const fa_kernel *k = fa_bundle_kernel_at(bundle, 0);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS);
  ASSERT_EQ(info.varlen, 1);
  fa_kernel_query query{};
  query.direction = FA_DIRECTION_FWD;
  query.dtype = info.dtype;
  query.head_dim = info.head_dim;
  query.mask = info.mask;
  query.compute_capability = 90;
  const fa_kernel *found = nullptr;
  ASSERT_EQ(fa_kernel_find_varlen(bundle, &query, 1000, &found), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_kernel_find_varlen", [&] {
    return fa_kernel_find_varlen(bundle, &query, 1000, &found);
  });
  EXPECT_GT(sweepAllocationFailures("fa_kernel_find (varlen only)", [&] {
              return fa_kernel_find(bundle, &query, &found);
            }),
            0);
  int d = info.head_dim;
  fa_attention_varlen_args a{};
  a.q = tensor(info.dtype, {500, 4, d});
  a.k = tensor(info.dtype, {700, 2, d});
  a.v = tensor(info.dtype, {700, 2, d});
  a.o = tensor(info.dtype, {500, 4, d});
  a.lse = tensor(FA_DTYPE_F32, {4, 500});
  a.cu_seqlens_q = tensor(FA_DTYPE_I32, {4}).data;
  a.cu_seqlens_k = tensor(FA_DTYPE_I32, {4}).data;
  a.batch = 3;
  a.max_seqlen_q = 300;
  a.scale = 0.125f;
  ASSERT_EQ(fa_attention_forward_varlen_check(k, &a), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_forward_varlen_check", [&] {
    return fa_attention_forward_varlen_check(k, &a);
  });
  fa_tensor_map_args maps[FA_MAX_TENSOR_MAPS];
  int32_t count = 0;
  sweepAllocationFailures("fa_attention_forward_varlen_tensor_maps", [&] {
    return fa_attention_forward_varlen_tensor_maps(k, &a, maps, &count);
  });
  unsigned grid[3];
  sweepAllocationFailures("fa_attention_forward_varlen_grid", [&] {
    return fa_attention_forward_varlen_grid(k, &a, grid);
  });
  fa_attention_varlen_args bad = a;
  bad.o = tensor(info.dtype, {499, 4, d});
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_varlen_check (bad)",
                                    [&] {
                                      return fa_attention_forward_varlen_check(
                                          k, &bad);
                                    }),
            0);
  const int32_t cq[] = {0, 100, 50, 500}, ck[] = {0, 10, 20, 700};
  EXPECT_GT(sweepAllocationFailures("fa_varlen_check_seqlens (bad)", [&] {
              return fa_varlen_check_seqlens(cq, ck, 3, 500, 700, -1, -1);
            }),
            0);
  fa_bundle_free(bundle);
  // The same kernel with sinks (bundle version 18): its _sinks check.
  v["sinks"] = true;
  v["sinks_param"] = 28;
  full["kernels"] = json::array({v});
  full["version"] = 18;
  std::string sinkDir = writeBundle("alloc_varlen_sinks", full.dump());
  ASSERT_EQ(fa_bundle_load(sinkDir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  k = fa_bundle_kernel_at(bundle, 0);
  fa_tensor sinks = tensor(FA_DTYPE_F32, {4});
  ASSERT_EQ(fa_attention_forward_varlen_sinks_check(k, &a, &sinks), FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_forward_varlen_sinks_check", [&] {
    return fa_attention_forward_varlen_sinks_check(k, &a, &sinks);
  });
  EXPECT_GT(sweepAllocationFailures(
                "fa_attention_forward_varlen_sinks_check (bad)",
                [&] {
                  return fa_attention_forward_varlen_sinks_check(k, &bad,
                                                                 &sinks);
                }),
            0);
  fa_bundle_free(bundle);
}

TEST(CApi, SinksChecksSurviveAllocationFailures) {
  // A forward and a backward with attention sinks (bundle version 13): the
  // manifest, the search, and the _sinks checks accepting and rejecting,
  // each out of memory at every allocation.
  json full = smallManifest();
  json fwd = full["kernels"][0], bwd = full["kernels"][1];
  fwd["sinks"] = true;
  fwd["sinks_param"] = 11;
  bwd["sinks"] = true;
  bwd["entries"]["bwd_sink"] = bwd["entries"]["bwd_pre"];
  bwd["entries"]["bwd_sink"]["name"] = "fa_bwd_sink_fixture";
  full["kernels"] = json::array({fwd, bwd});
  full["version"] = 13;
  std::string dir = writeBundle("alloc_sinks", full.dump());
  sweepAllocationFailures("fa_bundle_load (sinks)", [&] {
    fa_bundle *b = nullptr;
    fa_status s = fa_bundle_load(dir.c_str(), &b);
    fa_bundle_free(b);
    return s;
  });
  fa_bundle *bundle = nullptr;
  ASSERT_EQ(fa_bundle_load(dir.c_str(), &bundle), FA_SUCCESS)
      << fa_last_error();
  const fa_kernel *f = fa_bundle_kernel_at(bundle, 0),
                  *b = fa_bundle_kernel_at(bundle, 1);
  fa_kernel_info info;
  ASSERT_EQ(fa_kernel_get_info(f, &info), FA_SUCCESS);
  fa_kernel_query query{};
  query.direction = FA_DIRECTION_FWD;
  query.dtype = info.dtype;
  query.head_dim = info.head_dim;
  query.mask = info.mask;
  query.compute_capability = 80;
  query.sinks = 1;
  const fa_kernel *found = nullptr;
  ASSERT_EQ(fa_kernel_find(bundle, &query, &found), FA_SUCCESS)
      << fa_last_error();
  EXPECT_EQ(found, f);
  query.sinks = 0;
  EXPECT_GT(sweepAllocationFailures("fa_kernel_find (no plain kernel)", [&] {
              return fa_kernel_find(bundle, &query, &found);
            }),
            0);
  int d = info.head_dim;
  fa_attention_args a{};
  a.q = tensor(info.dtype, {2, 4, 100, d});
  a.k = tensor(info.dtype, {2, 2, 130, d});
  a.v = tensor(info.dtype, {2, 2, 130, d});
  a.o = tensor(info.dtype, {2, 4, 100, d});
  a.lse = tensor(FA_DTYPE_F32, {2, 4, 100});
  a.scale = 0.125f;
  fa_tensor sinks = tensor(FA_DTYPE_F32, {4}), dSinks = tensor(FA_DTYPE_F32, {4}),
            bad = tensor(FA_DTYPE_F32, {3});
  ASSERT_EQ(fa_attention_forward_sinks_check(f, &a, nullptr, 0, &sinks),
            FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_forward_sinks_check", [&] {
    return fa_attention_forward_sinks_check(f, &a, nullptr, 0, &sinks);
  });
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_sinks_check (bad)",
                                    [&] {
                                      return fa_attention_forward_sinks_check(
                                          f, &a, nullptr, 0, &bad);
                                    }),
            0);
  EXPECT_GT(sweepAllocationFailures("fa_attention_forward_check (sinks)",
                                    [&] {
                                      return fa_attention_forward_check(f, &a);
                                    }),
            0);
  fa_attention_backward_args g{};
  g.q = a.q, g.k = a.k, g.v = a.v, g.o = a.o, g.lse = a.lse;
  g.d_o = tensor(info.dtype, {2, 4, 100, d});
  g.dq = tensor(info.dtype, {2, 4, 100, d});
  g.dk = tensor(info.dtype, {2, 2, 130, d});
  g.dv = tensor(info.dtype, {2, 2, 130, d});
  g.delta = tensor(FA_DTYPE_F32, {2, 4, 100});
  g.dq_accum = tensor(FA_DTYPE_F32, {2, 4, 100, d});
  g.scale = 0.125f;
  ASSERT_EQ(fa_attention_backward_sinks_check(b, &g, nullptr, 0, &sinks,
                                              &dSinks),
            FA_SUCCESS)
      << fa_last_error();
  sweepAllocationFailures("fa_attention_backward_sinks_check", [&] {
    return fa_attention_backward_sinks_check(b, &g, nullptr, 0, &sinks,
                                             &dSinks);
  });
  EXPECT_GT(sweepAllocationFailures("fa_attention_backward_sinks_check (bad)",
                                    [&] {
                                      return fa_attention_backward_sinks_check(
                                          b, &g, nullptr, 0, &sinks, &bad);
                                    }),
            0);
  fa_bundle_free(bundle);
}
