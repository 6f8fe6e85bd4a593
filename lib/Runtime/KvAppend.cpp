//===- KvAppend.cpp - fa_kv_append: new rows into a KV cache ----*- C++ -*-===//
//
// Validates and launches a kernel's fa_kv_append entry (KvAppendKernel.cpp
// in the compiler): new keys and values into a contiguous or paged cache
// after each sequence's rows, rotary on the keys and q optional. The
// capacity and page-table checks read the caller's host copies, so a call
// that would write past a sequence's pages fails here instead of being
// dropped silently by the kernel (docs/ABI.md "Appending to a KV cache").
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <algorithm>

using namespace fa::runtime;

namespace {

constexpr const char *kApi = "fa_kv_append";
constexpr unsigned kThreads = 256; // the entry's threads, checked below

/// A contiguous tensor of `shape` at `data`.
fa_tensor denseTensor(CUdeviceptr data, fa_dtype dtype,
                      std::vector<int64_t> shape) {
  fa_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

/// The tensors of a call, the i32 arrays as dense tensors.
struct AppendTensors {
  fa_tensor seqlens, pageTable;
  std::vector<NamedTensor> all;
};

/// Fills `t` in place: its `all` points at its own members.
void tensorsOfAppend(const fa_kv_append_args &a, AppendTensors &t) {
  int64_t batch = a.k_new.shape[0];
  t.seqlens = denseTensor(a.cache_seqlens, FA_DTYPE_I32, {batch});
  t.pageTable = denseTensor(a.page_table, FA_DTYPE_I32, {batch, a.max_pages});
  t.all = {{"k_new", &a.k_new}, {"v_new", &a.v_new}, {"k_cache", &a.k_cache},
           {"v_cache", &a.v_cache}, {"cache_seqlens", &t.seqlens}};
  if (a.page_table)
    t.all.push_back({"page_table", &t.pageTable});
  if (a.rotary_cos.data) {
    t.all.push_back({"rotary_cos", &a.rotary_cos});
    t.all.push_back({"rotary_sin", &a.rotary_sin});
  }
  if (a.q.data) {
    t.all.push_back({"q", &a.q});
    t.all.push_back({"q_out", &a.q_out});
  }
}

std::string str(int64_t v) { return std::to_string(v); }

/// Shapes, dtypes and layouts of every tensor; "" when valid.
std::string checkShapes(const KernelConfig &c, const fa_kv_append_args &a) {
  std::string e;
  auto tensor = [&](const char *name, const fa_tensor &t, fa_dtype dtype,
                    int rank) {
    if (e.empty())
      e = checkTensorFor(c, name, t, dtype, rank, 0, false);
  };
  auto shape = [&](const char *name, const fa_tensor &t,
                   std::vector<int64_t> want, const char *meaning) {
    if (e.empty())
      e = checkShapeFor(name, t, want, meaning);
  };
  tensor("k_new", a.k_new, c.dtype, 4);
  if (!e.empty())
    return e;
  int64_t batch = a.k_new.shape[0], newRows = a.k_new.shape[1],
          kvHeads = a.k_new.shape[2];
  shape("k_new", a.k_new, {batch, newRows, kvHeads, c.headDim},
        "[B, Nnew, Hkv, D] with the kernel's D");
  tensor("v_new", a.v_new, c.dtype, 4);
  shape("v_new", a.v_new, {batch, newRows, kvHeads, c.headDimV},
        "[B, Nnew, Hkv, Dv] of k_new");
  tensor("k_cache", a.k_cache, c.dtype, 4);
  tensor("v_cache", a.v_cache, c.dtype, 4);
  if (!e.empty())
    return e;
  int64_t rows0 = a.k_cache.shape[0], rows1 = a.k_cache.shape[1];
  const char *layout = a.page_table ? "[num_pages, page_size, Hkv, D]"
                                    : "[B, Ncap, Hkv, D]";
  shape("k_cache", a.k_cache, {a.page_table ? rows0 : batch, rows1, kvHeads,
                               c.headDim}, layout);
  shape("v_cache", a.v_cache, {rows0, rows1, kvHeads, c.headDimV},
        "k_cache's first three extents and Dv");
  if (!e.empty())
    return e;
  if (a.page_table ? a.max_pages < 1 || a.max_pages > INT32_MAX / rows1
                   : a.max_pages != 0)
    return "max_pages is " + str(a.max_pages) + ", expected " +
           (a.page_table ? "at least 1 with max_pages x page_size below 2^31"
                         : "0 for a contiguous cache (page_table 0)");
  if (a.rotary_cos.data) {
    tensor("rotary_cos", a.rotary_cos, FA_DTYPE_F32, 2);
    if (!e.empty())
      return e;
    int64_t half = a.rotary_cos.shape[1];
    if (2 * half > c.headDim)
      return "rotary_cos.shape [" + str(a.rotary_cos.shape[0]) + ", " +
             str(half) + "] gives rotary_dim " + str(2 * half) +
             ", expected at most the head dim " + str(c.headDim);
    tensor("rotary_sin", a.rotary_sin, FA_DTYPE_F32, 2);
    shape("rotary_sin", a.rotary_sin, {a.rotary_cos.shape[0], half},
          "rotary_cos's");
  }
  if (a.q.data) {
    if (!a.rotary_cos.data)
      return "q is given without rotary_cos: fa_kv_append only rotates q";
    tensor("q", a.q, c.dtype, 4);
    if (!e.empty())
      return e;
    shape("q", a.q, {batch, a.q.shape[1], a.q.shape[2], c.headDim},
          "[B, Sq, H, D]");
    tensor("q_out", a.q_out, c.dtype, 4);
    shape("q_out", a.q_out, {a.q.shape[0], a.q.shape[1], a.q.shape[2],
                             a.q.shape[3]}, "q's");
  }
  return e;
}

/// The host copies: every new row inside its sequence's capacity, through
/// page-table entries inside the pool, at a rotary position below max_pos.
std::string checkRows(const fa_kv_append_args &a) {
  if (!a.cache_seqlens || !a.cache_seqlens_host)
    return "cache_seqlens and cache_seqlens_host must both be given";
  if (a.cache_seqlens % 4 != 0)
    return "cache_seqlens is not 4-byte aligned";
  if (a.page_table && (!a.page_table_host || a.page_table % 4 != 0))
    return "a paged cache needs page_table 4-byte aligned and "
           "page_table_host";
  int64_t batch = a.k_new.shape[0], newRows = a.k_new.shape[1];
  int64_t pageSize = a.k_cache.shape[1], numPages = a.k_cache.shape[0];
  int64_t capacity = a.page_table ? a.max_pages * pageSize : pageSize;
  int64_t maxPos = a.rotary_cos.data ? a.rotary_cos.shape[0] : INT64_MAX;
  int64_t qRows = a.q.data && !a.q_same_position ? a.q.shape[1] : 1;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t used = a.cache_seqlens_host[b];
    if (used < 0 || used + newRows > capacity)
      return "cache_seqlens[" + str(b) + "] = " + str(used) + " with " +
             str(newRows) + " new rows overflows the cache: its capacity is " +
             str(capacity) + " rows per sequence";
    if (used + std::max(newRows, qRows) > maxPos)
      return "cache_seqlens[" + str(b) + "] = " + str(used) +
             " puts rotary positions up to " +
             str(used + std::max(newRows, qRows) - 1) +
             " past rotary_cos's " + str(maxPos) + " rows";
    for (int64_t slot = used / pageSize;
         a.page_table && slot <= (used + newRows - 1) / pageSize; ++slot) {
      int32_t page = a.page_table_host[b * a.max_pages + slot];
      if (page < 0 || page >= numPages)
        return "page_table[" + str(b) + ", " + str(slot) + "] = " +
               str(page) + " holds new rows but is outside the pool's " +
               str(numPages) + " pages";
    }
  }
  return "";
}

fa_status checkCall(const fa_kernel *kernel, const fa_kv_append_args *args,
                    const char *api) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": " + (kernel ? "args" : "kernel") +
                    " is null");
  const KernelConfig &c = kernel->config;
  std::string err;
  if (!c.kvAppend)
    err = "kernel " + c.tag + " has no kv_append entry (build it with the "
          "config field 'append')";
  else if (c.append.threads != kThreads)
    err = "kernel " + c.tag + "'s kv_append entry has " +
          str(c.append.threads) + " threads, expected " + str(kThreads);
  if (err.empty())
    err = checkShapes(c, *args);
  if (err.empty())
    err = checkRows(*args);
  if (err.empty()) {
    AppendTensors t;
    tensorsOfAppend(*args, t);
    err = checkOutputOverlap(t.all, {"k_cache", "v_cache", "q_out"});
  }
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return FA_SUCCESS;
}

fa_status launchAppend(const fa_kernel &kernel, const fa_kv_append_args &a,
                       CUstream stream, const ContextScope &scope) {
  const KernelConfig &c = kernel.config;
  CUfunction f;
  if (fa_status s = kernelFunction(kernel, c.append, scope.ctx, scope.device, f))
    return s;
  CUdeviceptr kNew = a.k_new.data, vNew = a.v_new.data, kCache = a.k_cache.data,
              vCache = a.v_cache.data, q = a.q.data, qOut = a.q_out.data,
              seqlens = a.cache_seqlens, table = a.page_table,
              cos = a.rotary_cos.data, sin = a.rotary_sin.data;
  bool rotary = cos != 0;
  int32_t batch = a.k_new.shape[0], newRows = a.k_new.shape[1],
          kvHeads = a.k_new.shape[2], qRows = q ? a.q.shape[1] : 0,
          heads = q ? a.q.shape[2] : 0, maxPages = a.max_pages,
          pageSize = a.k_cache.shape[1], numPages = a.k_cache.shape[0],
          rotaryDim = rotary ? 2 * a.rotary_cos.shape[1] : 0,
          maxPos = rotary ? a.rotary_cos.shape[0] : 1,
          interleaved = a.rotary_interleaved != 0,
          samePosition = a.q_same_position != 0;
  void *params[22] = {&kNew,     &vNew,     &kCache,   &vCache,  &q,
                      &qOut,     &seqlens,  &table,    &cos,     &sin,
                      &batch,    &newRows,  &kvHeads,  &qRows,   &heads,
                      &maxPages, &pageSize, &numPages, &rotaryDim, &maxPos,
                      &interleaved, &samePosition};
  int64_t most = std::max<int64_t>(
      {int64_t(batch) * newRows * kvHeads * std::max(c.headDim, c.headDimV),
       int64_t(batch) * qRows * heads * c.headDim});
  Grid grid{static_cast<unsigned>((most + kThreads - 1) / kThreads),
            q ? 3u : 2u, 1};
  return launch(f, c.append, grid, stream, params);
}

} // namespace

extern "C" {

fa_status fa_kv_append_check(const fa_kernel *kernel,
                             const fa_kv_append_args *args) try {
  if (fa_status s = checkCall(kernel, args, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kv_append(const fa_kernel *kernel, const fa_kv_append_args *args,
                       CUstream stream) try {
  if (fa_status s = checkCall(kernel, args, kApi))
    return s;
  ContextScope scope;
  if (fa_status s = scope.enter(args->k_new.data))
    return s;
  AppendTensors t;
  tensorsOfAppend(*args, t);
  if (fa_status s = checkLaunchDevice(kApi, t.all, stream, scope.device,
                                      scope.ctx))
    return s;
  if (fa_status s = launchAppend(*kernel, *args, stream, scope))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
