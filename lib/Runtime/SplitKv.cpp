//===- SplitKv.cpp - Launch the split-KV decode kernels ----------*- C++ -*-===//
//
// A split-KV launch runs the split forward on (query tiles, heads,
// batch x splits) CTAs, each writing a partial O and LSE into the caller's
// workspace, then the merge, one warp per row (docs/ABI.md "Split-KV decode
// entries"). The split count is the caller's; fa_splitkv_choose suggests one.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "TensorMaps.h"

#include <algorithm>

using namespace fa::runtime;

namespace {

constexpr const char *kApi = "fa_attention_forward_splitkv";
constexpr int64_t kMaxGridZ = 65535;
/// The most splits fa_splitkv_choose suggests.
constexpr int64_t kMaxSplits = 128;

/// Whether `kernel` is a split-KV kernel; else an error naming `api`.
fa_status requireSplitKernel(const fa_kernel *kernel, const char *api) {
  if (!kernel)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": kernel is null");
  if (!kernel->config.splitKv)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel '" + kernel->config.tag +
                    "' is not a split-KV kernel");
  return FA_SUCCESS;
}

/// CTAs of the split forward one SM holds: its shared memory (228 KB per
/// SM from sm_90 on, 164 KB on sm_80/87, 100 KB otherwise; 1 KB of it
/// reserved per CTA) and its registers (64K per SM, allocated per warp in
/// units of 256; the manifest's count per thread, else 256).
int64_t ctasPerSm(const KernelConfig &c) {
  int64_t smem = c.target.cc >= 90                       ? 233472
                 : c.target.cc == 80 || c.target.cc == 87 ? 167936
                                                          : 102400;
  int64_t bySmem = smem / (int64_t{c.fwd.sharedBytes} + 1024);
  int64_t perThread = c.registers > 0 ? c.registers : 256;
  int64_t perWarp = ceilDiv(perThread * 32, 256) * 256;
  int64_t warps = ceilDiv(std::max<int64_t>(1, c.fwd.threads), 32);
  // A warp's registers come from one of the four sub-partitions' 16384
  // (Nsight Compute, 2026-12-03: three-warp CTAs of 202 registers, two per
  // SM where 65536 / (3 warps x 6656) would say three).
  int64_t byRegs = 4 * (16384 / perWarp) / warps;
  return std::max<int64_t>(1, std::min(bySmem, byRegs));
}

/// The share of the grid's last wave that `ctas` CTAs fill, `slots` per wave.
double lastWaveFill(int64_t ctas, int64_t slots) {
  return static_cast<double>(ctas) / (ceilDiv(ctas, slots) * slots);
}

/// The split count of fa_splitkv_choose for valid sizes.
int32_t chooseSplits(const KernelConfig &c, int64_t batch, int64_t heads,
                     int64_t kvHeads, int64_t nq, int64_t nk, int32_t sms) {
  int64_t ctas =
      queryTiles(c, heads, kvHeads, nq) * gridHeads(c, heads, kvHeads) * batch;
  // Each split takes at least 4 key blocks (2026-12-03, H200, the TMA
  // kernels at 1 x 8k: 33 splits of one key head 12.0 µs, 66 13.2 at d128;
  // 16 splits 12.1 µs, 66 17.6 at d64), and z = batch x splits.
  int64_t most = std::max<int64_t>(
      1, std::min(ceilDiv(nk, c.blockKV) / 4, kMaxGridZ / batch));
  if (ctas >= sms) {
    // The plain grid fills the GPU; a few splits only even out its last
    // wave. Measured on the H200 (2026-12-03, 64 x 4k, 32 heads on 8, d128,
    // the packed kernel at three CTAs per SM: 512 CTAs fill 65% of their
    // second wave): 1 split 276 µs, 2 (86%) 255 µs, 3 (97%) 257 µs; at two
    // CTAs per SM (97%) one split was best.
    int64_t slots = ctasPerSm(c) * sms;
    for (int64_t s = 1; s <= std::min<int64_t>(most, 4); ++s)
      if (lastWaveFill(ctas * s, slots) >= 0.85)
        return static_cast<int32_t>(s);
    return 1;
  }
  // As many splits as keep the grid within two CTAs per SM: one wave.
  // Measured on the H200 (2026-12-01, 1 x 8k, 32 heads on 8, d128): 8
  // splits (256 CTAs) 37 µs, 9 (288 CTAs, a second partial wave) 50 µs; 16
  // splits 40 µs. A kernel that fits three per SM does not gain from a third
  // (2026-12-03, 1 x 64k: 33 splits 72.5 µs, 49 splits 74.7 µs).
  // At most kMaxSplits: each split costs its row's merge and the CTA's own
  // start, which a few key blocks per split do not pay for (2026-12-03, 1 x
  // 64k, 8 heads on 1, packed: d128 264 splits 40.2 µs, 132 31.1 µs; d64
  // 55.5 and 33.9 µs, 66 28.4 µs).
  int64_t want = std::min<int64_t>(2, ctasPerSm(c)) * sms / ctas;
  return static_cast<int32_t>(
      std::max<int64_t>(1, std::min({want, most, kMaxSplits})));
}

fa_status checkSplitCall(const fa_kernel *kernel, const fa_attention_args *args,
                         const SplitKvWorkspace &w, const ModArgList &mods,
                         const char *api, const SinkArgs &sinks = {}) {
  if (fa_status s = requireSplitKernel(kernel, api))
    return s;
  if (!args)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": args is null");
  std::string err =
      checkSplitKvArguments(kernel->config, *args, w, mods, sinks);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return FA_SUCCESS;
}

/// The device-side checks: the tensors and the used workspace are memory of
/// the context's device, and the stream belongs to it.
fa_status checkDevice(const fa_attention_args &a, const SplitKvWorkspace &w,
                      const ModArgList &mods, const SinkArgs &sinks,
                      CUstream stream, const ContextScope &scope,
                      const char *api) {
  fa_tensor ws = usedSplitKvWorkspace(a, w);
  std::vector<NamedTensor> all = tensorsOf(a, mods, sinks);
  all.push_back({"workspace", &ws});
  return checkLaunchDevice(api, all, stream, scope.device, scope.ctx);
}

} // namespace

CUdeviceptr fa::runtime::splitLsePartials(const fa_attention_args &a,
                                          const SplitKvWorkspace &w) {
  return w.workspace + 4 * static_cast<uint64_t>(w.splits) * a.q.shape[0] *
                           a.q.shape[1] * a.q.shape[2] * a.v.shape[3];
}

fa_status fa::runtime::launchMerge(const KernelConfig &c, CUfunction merge,
                                   const fa_attention_args &a,
                                   const SplitKvWorkspace &w,
                                   const SinkArgs &sinks, CUstream stream) {
  int32_t rows = a.q.shape[0] * a.q.shape[1] * a.q.shape[2],
          splits = w.splits, h = a.q.shape[1], nq = a.q.shape[2];
  CUdeviceptr oPart = w.workspace, lsePart = splitLsePartials(a, w),
              o = a.o.data, lse = a.lse.data;
  // o's strides after heads and nq (a strided kernel's), then the sinks of
  // a kernel with sinks (docs/ABI.md).
  CUdeviceptr sinksData = sinks.sinks ? sinks.sinks->data : 0;
  void *params[kMergeStrideParam + 3 + 1] = {&oPart, &lsePart, &o,  &lse,
                                             &rows,  &splits,  &h, &nq};
  StrideParams outStrides;
  if (c.strided()) {
    outStrides.add(a.o);
    outStrides.place(params, kMergeStrideParam);
  }
  if (c.sinks)
    params[c.sinksParam] = &sinksData;
  Grid grid{static_cast<unsigned>(ceilDiv(rows, c.warps)), 1, 1};
  return launch(merge, c.merge, grid, stream, params);
}

fa_status fa::runtime::launchSplitThenMerge(
    const KernelConfig &c, CUfunction split, CUfunction merge,
    const Grid &grid, void **params, const fa_attention_args &a,
    const SplitKvWorkspace &w, const SinkArgs &sinks, CUstream stream,
    const char *api) {
  // No maps for a cp.async kernel: launchWithMaps then launches plainly.
  std::vector<fa_tensor_map_args> maps;
  std::string err = tensorMapArgs(c, a, maps);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  if (fa_status s =
          launchWithMaps(api, c.tag, maps, split, c.fwd, grid, stream, params))
    return s;
  return launchMerge(c, merge, a, w, sinks, stream);
}

namespace {

/// Launches the split forward (with a TMA kernel's maps), then the merge
/// (with the sinks of a kernel with sinks), on `stream`; errors name `api`.
fa_status launchSplitAndMerge(const fa_kernel &kernel,
                              const fa_attention_args &a,
                              const SplitKvWorkspace &w,
                              const ModArgList &mods, const SinkArgs &sinks,
                              CUstream stream, const ContextScope &scope,
                              const char *api) {
  const KernelConfig &c = kernel.config;
  CUfunction split, merge;
  if (fa_status s = kernelFunction(kernel, c.fwd, scope.ctx, scope.device, split))
    return s;
  if (fa_status s = kernelFunction(kernel, c.merge, scope.ctx, scope.device, merge))
    return s;
  int32_t b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1],
          nq = a.q.shape[2], nk = a.k.shape[2], splits = w.splits;
  float scale = a.scale;
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, oPart = w.workspace,
              lsePart = splitLsePartials(a, w);
  // A strided kernel's split forward takes the strides of q, k and v last
  // (docs/ABI.md), after a TMA kernel's k and v maps; the mod_args come
  // last.
  void *splitParams[12 + 2 + 9 + ModArgParams::kMaxParams +
                    WindowParams::kMaxParams] = {
      &q, &k, &v, &oPart, &lsePart, &b, &h, &hkv, &nq, &nk, &scale, &splits};
  StrideParams inStrides;
  if (c.strided()) {
    for (const fa_tensor *t : {&a.q, &a.k, &a.v})
      inStrides.add(*t);
    inStrides.place(splitParams, c.strideParam);
  }
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

/// The checks, the device checks and the launches of one split-KV call.
fa_status runSplitKv(const fa_kernel *kernel, const fa_attention_args *args,
                     const SplitKvWorkspace &w, const ModArgList &mods,
                     const SinkArgs &sinks, CUstream stream, const char *api) {
  return checkedLaunch(
      args ? args->q.data : 0,
      [&] { return checkSplitCall(kernel, args, w, mods, api, sinks); },
      [&](const ContextScope &scope) {
        return checkDevice(*args, w, mods, sinks, stream, scope, api);
      },
      [&](const ContextScope &scope) {
        return launchSplitAndMerge(*kernel, *args, w, mods, sinks, stream,
                                   scope, api);
      });
}

} // namespace

extern "C" {

fa_status fa_splitkv_workspace_bytes(const fa_kernel *kernel, int64_t batch,
                                     int64_t heads, int64_t nq, int32_t splits,
                                     uint64_t *bytes) try {
  const char *api = "fa_splitkv_workspace_bytes";
  if (fa_status s = requireSplitKernel(kernel, api))
    return s;
  if (!bytes)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": bytes is null");
  const int64_t limit = INT32_MAX;
  if (batch < 1 || heads < 1 || nq < 1 || splits < 1 || batch > limit ||
      heads > limit || nq > limit || batch * heads > limit ||
      batch * heads * nq > limit)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": batch " + std::to_string(batch) +
                    ", heads " + std::to_string(heads) + ", nq " +
                    std::to_string(nq) + ", splits " + std::to_string(splits) +
                    ": each must be at least 1 and batch x heads x nq at "
                    "most 2^31 - 1");
  *bytes = splitKvWorkspaceBytes(batch, heads, nq, kernel->config.headDimV,
                                 splits);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"

namespace {

/// fa_splitkv_choose{,_gqa}: kvHeads 0 means "not given" (the plain
/// entry), which a packed-GQA kernel refuses.
fa_status chooseSplitsChecked(const fa_kernel *kernel, int64_t batch,
                              int64_t heads, int64_t kvHeads, int64_t nq,
                              int64_t nk, int32_t sm_count, int32_t *splits,
                              const char *api) {
  if (fa_status s = requireSplitKernel(kernel, api))
    return s;
  if (!splits)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": splits is null");
  const int64_t limit = INT32_MAX;
  if (batch < 1 || heads < 1 || nq < 1 || nk < 1 || sm_count < 1 ||
      batch > limit || heads > limit || nq > limit || nk > limit)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": batch " + std::to_string(batch) +
                    ", heads " + std::to_string(heads) + ", nq " +
                    std::to_string(nq) + ", nk " + std::to_string(nk) +
                    ", sm_count " + std::to_string(sm_count) +
                    ": each must be in [1, 2^31 - 1]");
  if (kvHeads == 0 && kernel->config.packGqa)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel '" + kernel->config.tag +
                    "' packs GQA heads, so its grid depends on the key "
                    "heads; use fa_splitkv_choose_gqa");
  if (kvHeads != 0 && (kvHeads < 1 || heads % kvHeads))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kv_heads " + std::to_string(kvHeads) +
                    " must be >= 1 and divide heads " + std::to_string(heads));
  *splits = chooseSplits(kernel->config, batch, heads,
                         kvHeads ? kvHeads : heads, nq, nk, sm_count);
  return succeed();
}

} // namespace

extern "C" {

fa_status fa_splitkv_choose(const fa_kernel *kernel, int64_t batch,
                            int64_t heads, int64_t nq, int64_t nk,
                            int32_t sm_count, int32_t *splits) try {
  return chooseSplitsChecked(kernel, batch, heads, 0, nq, nk, sm_count, splits,
                             "fa_splitkv_choose");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_splitkv_choose_gqa(const fa_kernel *kernel, int64_t batch,
                                int64_t heads, int64_t kv_heads, int64_t nq,
                                int64_t nk, int32_t sm_count,
                                int32_t *splits) try {
  return chooseSplitsChecked(kernel, batch, heads, kv_heads, nq, nk, sm_count,
                             splits, "fa_splitkv_choose_gqa");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv_check(const fa_kernel *kernel,
                                             const fa_attention_args *args,
                                             CUdeviceptr workspace,
                                             uint64_t workspace_bytes,
                                             int32_t splits) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  if (fa_status s = checkSplitCall(kernel, args, w, ModArgList{}, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv_check_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  ModArgList mods{mod_args, mod_arg_count};
  if (fa_status s = checkSplitCall(kernel, args, w, mods, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv(const fa_kernel *kernel,
                                       const fa_attention_args *args,
                                       CUdeviceptr workspace,
                                       uint64_t workspace_bytes,
                                       int32_t splits, CUstream stream) try {
  return fa_attention_forward_splitkv_ex(kernel, args, workspace,
                                         workspace_bytes, splits, nullptr, 0,
                                         stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv_ex(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count, CUstream stream) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  return runSplitKv(kernel, args, w, ModArgList{mod_args, mod_arg_count},
                    SinkArgs{}, stream, kApi);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv_sinks_check(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count,
    const fa_tensor *sinks) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  ModArgList mods{mod_args, mod_arg_count};
  if (fa_status s = checkSplitCall(kernel, args, w, mods, __func__,
                                   SinkArgs{sinks, nullptr, true}))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_splitkv_sinks(
    const fa_kernel *kernel, const fa_attention_args *args,
    CUdeviceptr workspace, uint64_t workspace_bytes, int32_t splits,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks,
    CUstream stream) try {
  SplitKvWorkspace w{workspace, workspace_bytes, splits};
  return runSplitKv(kernel, args, w, ModArgList{mod_args, mod_arg_count},
                    SinkArgs{sinks, nullptr, true}, stream,
                    "fa_attention_forward_splitkv_sinks");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
