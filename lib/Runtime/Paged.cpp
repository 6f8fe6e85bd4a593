//===- Paged.cpp - Launch the paged-KV decode kernels ------------*- C++ -*-===//
//
// A paged launch is the split-KV launch (SplitKv.cpp) of a kernel that
// gathers its key tiles through a page table: K and V are pools of pages,
// the kernel's nk is the page table's capacity, and each CTA's keys end at
// its sequence's seqused_k (docs/ABI.md "Paged KV cache").
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "TensorMaps.h"

using namespace fa::runtime;

namespace {

constexpr const char *kApi = "fa_attention_forward_paged";

fa_status checkPagedCall(const fa_kernel *kernel, const fa_attention_args *args,
                         const fa_paged_kv *paged, const SplitKvWorkspace &w,
                         const ModArgList &mods, const SinkArgs &sinks,
                         const char *api) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": " + (kernel ? "args" : "kernel") +
                    " is null");
  std::string err =
      checkPagedArguments(kernel->config, *args, paged, w, mods, sinks);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return FA_SUCCESS;
}

/// Every tensor, the page table, seqused_k and the used workspace are
/// memory of the context's device, and the stream belongs to it.
fa_status checkDevice(const fa_attention_args &a, const fa_paged_kv &p,
                      const SplitKvWorkspace &w, const ModArgList &mods,
                      const SinkArgs &sinks, CUstream stream,
                      const ContextScope &scope, const char *api) {
  fa_tensor ws = usedSplitKvWorkspace(a, w);
  PagedTables tables;
  std::vector<NamedTensor> all = tensorsOfPaged(a, p, tables);
  appendModArgs(all, mods);
  all.push_back({"workspace", &ws});
  if (sinks.sinks)
    all.push_back({"sinks", sinks.sinks});
  return checkLaunchDevice(api, all, stream, scope.device, scope.ctx);
}

/// The split forward over the pages (with the mod_args of a kernel with
/// mods), then the merge (with the sinks of a kernel with sinks: the merge
/// joins them), on `stream`.
fa_status launchPaged(const fa_kernel &kernel, const fa_attention_args &a,
                      const fa_paged_kv &p, const SplitKvWorkspace &w,
                      const ModArgList &mods, const SinkArgs &sinks,
                      CUstream stream, const ContextScope &scope,
                      const char *api) {
  const KernelConfig &c = kernel.config;
  CUfunction split, merge;
  if (fa_status s = kernelFunction(kernel, c.fwd, scope.ctx, scope.device, split))
    return s;
  if (fa_status s = kernelFunction(kernel, c.merge, scope.ctx, scope.device, merge))
    return s;
  int32_t b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[2],
          nq = a.q.shape[2], nk = p.max_pages * p.page_size, splits = w.splits;
  int32_t maxPages = p.max_pages, pageSize = p.page_size,
          numPages = p.num_pages;
  float scale = a.scale;
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, oPart = w.workspace,
              lsePart = splitLsePartials(a, w), pageTable = p.page_table,
              sequsedK = p.seqused_k;
  // A TMA kernel's k and v maps (by value), then q's batch, head and row
  // strides and the pools' page, head and row strides; the paged
  // parameters follow them, then the mod_args (docs/ABI.md).
  void *splitParams[12 + 2 + 9 + 5 + ModArgParams::kMaxParams +
                    WindowParams::kMaxParams] = {
      &q, &k, &v, &oPart, &lsePart, &b, &h, &hkv, &nq, &nk, &scale, &splits};
  StrideParams inStrides;
  inStrides.add(a.q);
  inStrides.addPages(a.k);
  inStrides.addPages(a.v);
  inStrides.place(splitParams, c.strideParam);
  void *paged[5] = {&pageTable, &sequsedK, &maxPages, &pageSize, &numPages};
  for (int i = 0; i < 5; ++i)
    splitParams[c.pageTableParam + i] = paged[i];
  ModArgParams modParams;
  modParams.place(splitParams, c.modArgParam, mods);
  WindowParams window;
  window.place(splitParams, c);
  Grid splitGrid{static_cast<unsigned>(queryTiles(c, h, hkv, nq)),
                 static_cast<unsigned>(gridHeads(c, h, hkv)),
                 static_cast<unsigned>(b * splits)};
  return launchSplitThenMerge(c, split, merge, splitGrid, splitParams, a, w,
                              sinks, stream, api);
}

/// The checks, the device checks and the launches of one paged call.
fa_status runPaged(const fa_kernel *kernel, const fa_attention_args *args,
                   const fa_paged_kv *paged, const SplitKvWorkspace &w,
                   const ModArgList &mods, const SinkArgs &sinks,
                   CUstream stream, const char *api) {
  return checkedLaunch(
      args ? args->q.data : 0,
      [&] { return checkPagedCall(kernel, args, paged, w, mods, sinks, api); },
      [&](const ContextScope &scope) {
        return checkDevice(*args, *paged, w, mods, sinks, stream, scope, api);
      },
      [&](const ContextScope &scope) {
        return launchPaged(*kernel, *args, *paged, w, mods, sinks, stream,
                           scope, api);
      });
}

/// The sinks of an _ex launch: given where the kernel has them or the call
/// passes them, so either mismatch is refused by name.
SinkArgs exSinks(const fa_kernel *kernel, const fa_tensor *sinks) {
  return SinkArgs{sinks, nullptr, sinks || (kernel && kernel->config.sinks)};
}

} // namespace

extern "C" {

fa_status fa_attention_forward_paged_check(const fa_kernel *kernel,
                                           const fa_attention_args *args,
                                           const fa_paged_kv *paged,
                                           CUdeviceptr workspace,
                                           uint64_t workspace_bytes,
                                           int32_t splits) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  if (fa_status s = checkPagedCall(kernel, args, paged, w, ModArgList{},
                                   SinkArgs{}, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged_tensor_maps(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, fa_tensor_map_args out[FA_MAX_TENSOR_MAPS],
    int32_t *count) try {
  const char *api = "fa_attention_forward_paged_tensor_maps";
  if (!kernel || !args || !out || !count)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": null argument");
  *count = 0;
  std::vector<fa_tensor_map_args> maps;
  return mapsOut(api, pagedTensorMapArgs(kernel->config, *args, paged, maps),
                 maps, out, count);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged(const fa_kernel *kernel,
                                     const fa_attention_args *args,
                                     const fa_paged_kv *paged,
                                     CUdeviceptr workspace,
                                     uint64_t workspace_bytes, int32_t splits,
                                     CUstream stream) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  return runPaged(kernel, args, paged, w, ModArgList{}, SinkArgs{}, stream,
                  kApi);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged_sinks_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *sinks) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  if (fa_status s = checkPagedCall(kernel, args, paged, w, ModArgList{},
                                   SinkArgs{sinks, nullptr, true}, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged_sinks(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *sinks, CUstream stream) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  return runPaged(kernel, args, paged, w, ModArgList{},
                  SinkArgs{sinks, nullptr, true}, stream,
                  "fa_attention_forward_paged_sinks");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged_check_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *mod_args, int32_t mod_arg_count,
    const fa_tensor *sinks) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  if (fa_status s = checkPagedCall(kernel, args, paged, w,
                                   ModArgList{mod_args, mod_arg_count},
                                   exSinks(kernel, sinks), __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_paged_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    const fa_paged_kv *paged, CUdeviceptr workspace, uint64_t workspace_bytes,
    int32_t splits, const fa_tensor *mod_args, int32_t mod_arg_count,
    const fa_tensor *sinks, CUstream stream) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  return runPaged(kernel, args, paged, w, ModArgList{mod_args, mod_arg_count},
                  exSinks(kernel, sinks), stream,
                  "fa_attention_forward_paged_ex");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
