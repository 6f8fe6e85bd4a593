//===- Launch.cpp - Check and launch forward and backward kernels --------===//
//
// A forward launch runs one entry (fwd); a backward runs three in stream
// order (bwd_pre computes Delta and zeroes dQ's accumulator, bwd the key
// loop, bwd_post converts dQ). Both share one path: check the arguments, find
// the context, check the pointers and stream, then launch, with tensor maps
// when the kernel loads by TMA. docs/ABI.md gives the parameters and grids.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"
#include "Workspace.h"

#include <algorithm>
#include <iterator>

using namespace fa::runtime;

namespace {

/// Parameters of fa_fwd and fa_bwd before a TMA kernel's maps (docs/ABI.md).
constexpr int kForwardParams = 11;
constexpr int kBackwardParams = 15;

/// The C entry point that launches kernels with arguments `Args`; it names
/// the call in every message about them.
template <typename Args> const char *apiName();
template <> const char *apiName<fa_attention_args>() {
  return "fa_attention_forward";
}
template <> const char *apiName<fa_attention_backward_args>() {
  return "fa_attention_backward";
}

/// The sizes and scale that every entry takes by address, read from q and k
/// of valid arguments (the checks keep each size within 32 bits).
struct ScalarParams {
  template <typename Args>
  explicit ScalarParams(const Args &a)
      : b(a.q.shape[0]), h(a.q.shape[1]), hkv(a.k.shape[1]), nq(a.q.shape[2]),
        nk(a.k.shape[2]), scale(a.scale) {}
  int32_t b, h, hkv, nq, nk;
  float scale;
};

/// ceil(a / b) as a grid extent (validated below 2^31 before any launch).
unsigned gridBlocks(int64_t a, int64_t b) {
  return static_cast<unsigned>(ceilDiv(a, b));
}

/// fa_attention_{forward,backward}_check{,_ex,_sinks}.
template <typename Args>
fa_status checkCall(const fa_kernel *kernel, const Args *args,
                    const ModArgList &mods, const SinkArgs &sinks = {}) {
  // Strings only on failure: this runs before every launch.
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(apiName<Args>()) + ": kernel or args is null");
  std::string err = checkArguments(kernel->config, *args, mods, sinks);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(apiName<Args>()) + ": " + err);
  return succeed();
}

/// The cuTensorMapEncodeTiled arguments of the kernel's maps.
template <typename Args>
fa_status mapArgsFor(const KernelConfig &c, const Args &args,
                     std::vector<fa_tensor_map_args> &out) {
  std::string err = tensorMapArgs(c, args, out);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(apiName<Args>()) + ": " + err);
  return FA_SUCCESS;
}

/// fa_attention_{forward,backward}_tensor_maps: the launch's checks, then
/// the maps the kernel would be given, copied out.
template <typename Args>
fa_status tensorMapsOut(const fa_kernel *kernel, const Args *args,
                        fa_tensor_map_args out[FA_MAX_TENSOR_MAPS],
                        int32_t *count) {
  if (!out || !count)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(apiName<Args>()) + "_tensor_maps: null argument");
  *count = 0;
  if (fa_status s = checkCall(kernel, args, ModArgList::unchecked()))
    return s;
  std::vector<fa_tensor_map_args> maps;
  if (fa_status s = mapArgsFor(kernel->config, *args, maps))
    return s;
  std::copy(maps.begin(), maps.end(), out);
  *count = static_cast<int32_t>(maps.size());
  return succeed();
}

/// What every launch does before it launches: checks the arguments, makes a
/// context current (`scope`), and checks that the tensors are memory of its
/// device and that `stream` belongs to it.
template <typename Args>
fa_status prepareLaunch(const fa_kernel *kernel, const Args *args,
                        const ModArgList &mods, const SinkArgs &sinks,
                        CUstream stream, ContextScope &scope) {
  if (fa_status s = checkCall(kernel, args, mods, sinks))
    return s;
  if (fa_status s = scope.enter(args->q.data))
    return s;
  return checkLaunchDevice(apiName<Args>(), tensorsOf(*args, mods, sinks),
                           stream, scope.device, scope.ctx);
}

/// Launches `entry` (function `f`) of `kernel`. `params` holds the kernel's
/// `abiParams` ABI parameters and room after them: a TMA kernel's maps go
/// there (by value), then, with `tileCounter`, a persistent grid's counter,
/// a zeroed workspace of the launch.
template <typename Args>
fa_status launchEntry(const fa_kernel &kernel, const Args &args, CUfunction f,
                      const Entry &entry, const Grid &grid, CUstream stream,
                      void **params, int abiParams, bool tileCounter) {
  const KernelConfig &c = kernel.config;
  if (c.tensorMaps.empty())
    return launch(f, entry, grid, stream, params);
  std::vector<fa_tensor_map_args> maps;
  if (fa_status s = mapArgsFor(c, args, maps))
    return s;
  auto launchMain = [&] {
    return launchWithMaps(apiName<Args>(), c.tag, maps, f, entry, grid, stream,
                          params);
  };
  if (!tileCounter)
    return launchMain();
  int counterParam = abiParams + static_cast<int>(maps.size());
  return withTileCounter(apiName<Args>(), c.tag, stream, params[counterParam],
                         launchMain);
}

/// One CTA per (query tile, head, batch); a persistent kernel instead has
/// one CTA per SM walk the tiles (docs/ABI.md), never more CTAs than tiles.
fa_status forwardGrid(const KernelConfig &c, const fa_attention_args &a,
                      CUdevice device, Grid &out) {
  unsigned b = a.q.shape[0];
  unsigned h = gridHeads(c, a.q.shape[1], a.k.shape[1]);
  unsigned queryTiles = static_cast<unsigned>(
      fa::runtime::queryTiles(c, a.q.shape[1], a.k.shape[1], a.q.shape[2]));
  out = {queryTiles, h, b};
  if (!c.fwd.persistent)
    return FA_SUCCESS;
  // The kernel counts tiles in 32 bits.
  uint64_t tiles = uint64_t(queryTiles) * uint64_t(h) * uint64_t(b);
  if (tiles >= (uint64_t(1) << 31))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_attention_forward: " + std::to_string(tiles) +
                    " query tiles for a persistent grid; at most 2^31 - 1");
  int sms = 0;
  if (CUresult r = cuDeviceGetAttribute(
          &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))
    return cuFail("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", r);
  out = {static_cast<unsigned>(std::min<uint64_t>(tiles, std::max(sms, 1))), 1,
         1};
  return FA_SUCCESS;
}

/// fa_bwd_sink (kernels with sinks; after bwd_pre, which wrote Delta):
/// d_sinks [H] from lse, delta and the sinks, one CTA per query head; a
/// varlen batch's (`varlen`) with its sequence count and cu_seqlens_q.
fa_status launchSinkGradient(const fa_kernel &kernel,
                             const fa_attention_backward_args &a,
                             const SinkArgs &sinks, const VarlenBatch *varlen,
                             const ContextScope &scope, CUstream stream) {
  const KernelConfig &c = kernel.config;
  CUfunction f;
  if (fa_status s =
          kernelFunction(kernel, c.bwdSink, scope.ctx, scope.device, f))
    return s;
  CUdeviceptr lse = a.lse.data, delta = a.delta.data,
              sinksData = sinks.sinks->data, dSinks = sinks.dSinks->data;
  ScalarParams n(a);
  CUdeviceptr cuQ = varlen ? varlen->cuSeqlensQ : 0;
  if (varlen)
    n.b = varlen->batch;
  void *params[8] = {&lse, &delta, &sinksData, &dSinks,
                     &n.b, &n.h,   &n.nq,      &cuQ};
  return launch(f, c.bwdSink, Grid{static_cast<unsigned>(n.h), 1, 1}, stream,
                params);
}

/// The functions of bwd_pre, bwd and bwd_post, all loaded before any runs.
fa_status backwardFunctions(const fa_kernel &kernel, const ContextScope &scope,
                            CUfunction &pre, CUfunction &main,
                            CUfunction &post) {
  const KernelConfig &c = kernel.config;
  if (fa_status s =
          kernelFunction(kernel, c.bwdPre, scope.ctx, scope.device, pre))
    return s;
  if (fa_status s =
          kernelFunction(kernel, c.bwd, scope.ctx, scope.device, main))
    return s;
  return kernelFunction(kernel, c.bwdPost, scope.ctx, scope.device, post);
}

/// fa_attention_forward_fp8{,_check}.
fa_status checkFp8Call(const fa_kernel *kernel, const fa_attention_args *args,
                       const fa_tensor descales[3]) {
  const char *api = "fa_attention_forward_fp8";
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel or args is null");
  std::string err = checkFp8Arguments(kernel->config, *args, descales);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return succeed();
}

/// fa_attention_backward_fp8{,_check}.
fa_status checkBackwardFp8Call(const fa_kernel *kernel,
                               const fa_attention_backward_args *args,
                               const fa_tensor descales[4]) {
  const char *api = "fa_attention_backward_fp8";
  if (!kernel || !args || !descales)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel, args or descales is null");
  std::string err = checkArguments(kernel->config, *args, ModArgList{}, {},
                                   /*varlenView=*/false, descales);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return succeed();
}

/// Launches fwd of a checked forward in the context of `scope`
/// (`descales`: an fp8 kernel's; `blockMask`: a block-sparse kernel's;
/// `sinks`: a sink kernel's; else null).
fa_status launchCheckedForward(const fa_kernel &kernel,
                               const fa_attention_args &a,
                               const ModArgList &mods,
                               const fa_tensor *descales,
                               const fa_block_mask *blockMask,
                               const fa_tensor *sinks, CUstream stream,
                               ContextScope &scope);

} // namespace

namespace fa::runtime {

std::array<Grid, 3> backwardGrids(const KernelConfig &c,
                                  const fa_attention_backward_args &a) {
  unsigned b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1];
  unsigned queryBlocks = gridBlocks(a.q.shape[2], c.blockQ);
  unsigned keyBlocks = gridBlocks(a.k.shape[2], c.blockKV);
  return {Grid{queryBlocks, h, b},
          Grid{keyBlocks * static_cast<unsigned>(c.dsplit), hkv, b},
          Grid{queryBlocks, h, b}};
}

} // namespace fa::runtime

extern "C" {

fa_status fa_attention_forward_check(const fa_kernel *kernel,
                                     const fa_attention_args *args) try {
  return checkCall(kernel, args, ModArgList{});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_check_ex(const fa_kernel *kernel,
                                        const fa_attention_args *args,
                                        const fa_tensor *mod_args,
                                        int32_t mod_arg_count) try {
  return checkCall(kernel, args, ModArgList{mod_args, mod_arg_count});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status
fa_attention_backward_check(const fa_kernel *kernel,
                            const fa_attention_backward_args *args) try {
  return checkCall(kernel, args, ModArgList{});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_check_ex(const fa_kernel *kernel,
                                         const fa_attention_backward_args *args,
                                         const fa_tensor *mod_args,
                                         int32_t mod_arg_count) try {
  return checkCall(kernel, args, ModArgList{mod_args, mod_arg_count});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count) try {
  return tensorMapsOut(kernel, args, out, count);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count) try {
  return tensorMapsOut(kernel, args, out, count);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_grids(const fa_kernel *kernel,
                                      const fa_attention_backward_args *args,
                                      unsigned grids[3][3]) try {
  if (fa_status s = checkCall(kernel, args, ModArgList::unchecked()))
    return s;
  if (!grids)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_attention_backward_grids: grids is null");
  std::array<Grid, 3> all = backwardGrids(kernel->config, *args);
  for (int i = 0; i < 3; ++i)
    std::copy(all[i].begin(), all[i].end(), grids[i]);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward(const fa_kernel *kernel,
                               const fa_attention_args *args,
                               CUstream stream) try {
  return fa_attention_forward_ex(kernel, args, nullptr, 0, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_ex(const fa_kernel *kernel,
                                  const fa_attention_args *args,
                                  const fa_tensor *mod_args,
                                  int32_t mod_arg_count, CUstream stream) try {
  return launchForward(kernel, args, ModArgList{mod_args, mod_arg_count},
                       nullptr, {}, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"

fa_status fa::runtime::launchForward(const fa_kernel *kernel,
                                     const fa_attention_args *args,
                                     const ModArgList &mods,
                                     const fa_block_mask *blockMask,
                                     const SinkArgs &sinks, CUstream stream) {
  ContextScope scope;
  if (kernel && args && kernel->config.blockSparse != (blockMask != nullptr))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string("fa_attention_forward: kernel '") +
                    kernel->config.tag +
                    (blockMask ? "' is not block-sparse: launch it without a "
                                 "block mask"
                               : "' is block-sparse: launch it with "
                                 "fa_attention_forward_block_sparse and a "
                                 "block mask"));
  if (fa_status s = prepareLaunch(kernel, args, mods, sinks, stream, scope))
    return s;
  return launchCheckedForward(*kernel, *args, mods, nullptr, blockMask,
                              sinks.given() ? sinks.sinks : nullptr, stream,
                              scope);
}

extern "C" {

fa_status fa_attention_forward_fp8_check(const fa_kernel *kernel,
                                         const fa_attention_args *args,
                                         const fa_tensor descales[3]) try {
  return checkFp8Call(kernel, args, descales);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_fp8(const fa_kernel *kernel,
                                   const fa_attention_args *args,
                                   const fa_tensor descales[3],
                                   CUstream stream) try {
  if (fa_status s = checkFp8Call(kernel, args, descales))
    return s;
  ContextScope scope;
  if (fa_status s = scope.enter(args->q.data))
    return s;
  if (fa_status s = checkLaunchDevice("fa_attention_forward_fp8",
                                      tensorsOfFp8(*args, descales), stream,
                                      scope.device, scope.ctx))
    return s;
  return launchCheckedForward(*kernel, *args, ModArgList{}, descales, nullptr,
                              nullptr, stream, scope);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status
fa_attention_backward_fp8_check(const fa_kernel *kernel,
                                const fa_attention_backward_args *args,
                                const fa_tensor descales[4]) try {
  return checkBackwardFp8Call(kernel, args, descales);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_fp8(const fa_kernel *kernel,
                                    const fa_attention_backward_args *args,
                                    const fa_tensor descales[4],
                                    CUstream stream) try {
  if (fa_status s = checkBackwardFp8Call(kernel, args, descales))
    return s;
  ContextScope scope;
  if (fa_status s = scope.enter(args->q.data))
    return s;
  if (fa_status s = checkLaunchDevice("fa_attention_backward_fp8",
                                      tensorsOfFp8(*args, descales), stream,
                                      scope.device, scope.ctx))
    return s;
  return launchCheckedBackward(*kernel, *args, ModArgList{}, {}, nullptr,
                               nullptr, scope, stream, descales);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"

namespace {
fa_status launchCheckedForward(const fa_kernel &kernel,
                               const fa_attention_args &a,
                               const ModArgList &mods,
                               const fa_tensor *descales,
                               const fa_block_mask *blockMask,
                               const fa_tensor *sinks, CUstream stream,
                               ContextScope &scope) {
  const KernelConfig &c = kernel.config;
  CUfunction f;
  if (fa_status s = kernelFunction(kernel, c.fwd, scope.ctx, scope.device, f))
    return s;
  Grid grid;
  if (fa_status s = forwardGrid(c, a, scope.device, grid))
    return s;
  ScalarParams n(a);
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, o = a.o.data,
              lse = a.lse.data;
  // fa_fwd's 11, then a TMA kernel's maps and a persistent grid's counter
  // or an fp8 kernel's descales, a strided kernel's strides of q, k, v, o,
  // a block-sparse kernel's block mask and its head count, the mod_args,
  // last a sink kernel's sinks.
  void *params[kForwardParams + FA_MAX_TENSOR_MAPS + 3 + 12 + 2 +
               ModArgParams::kMaxParams + 1 + WindowParams::kMaxParams] = {
      &q, &k, &v, &o, &lse, &n.b, &n.h, &n.hkv, &n.nq, &n.nk, &n.scale};
  CUdeviceptr descalePtrs[3] = {};
  if (c.descaleParam >= 0)
    for (int i = 0; i < 3; ++i) {
      descalePtrs[i] = descales[i].data;
      params[c.descaleParam + i] = &descalePtrs[i];
    }
  StrideParams strides;
  if (c.strided()) {
    for (const fa_tensor *t : {&a.q, &a.k, &a.v, &a.o})
      strides.add(*t);
    strides.place(params, c.strideParam);
  }
  // A block-sparse kernel's block mask and its head count.
  CUdeviceptr maskData = 0;
  int32_t maskHeads = 0;
  if (blockMask) {
    std::string err = checkBlockMaskFor(c, *blockMask, a);
    if (!err.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "fa_attention_forward_block_sparse: " + err);
    fa_tensor words = blockMaskTensor(c, *blockMask);
    if (fa_status s = checkPointers({{"block_mask", &words}}, scope.device))
      return failWithPrefix(s, "fa_attention_forward_block_sparse: ");
    maskData = blockMask->data;
    maskHeads = static_cast<int32_t>(blockMask->mask_heads);
    params[c.blockMaskParam] = &maskData;
    params[c.blockMaskParam + 1] = &maskHeads;
  }
  ModArgParams modParams;
  modParams.place(params, c.modArgParam, mods);
  CUdeviceptr sinksData = sinks ? sinks->data : 0;
  if (c.sinks)
    params[c.sinksParam] = &sinksData;
  WindowParams window;
  window.place(params, c);
  if (fa_status s = launchEntry(kernel, a, f, c.fwd, grid, stream, params,
                                kForwardParams, c.fwd.persistent))
    return s;
  return succeed();
}
} // namespace

extern "C" {

fa_status fa_attention_backward(const fa_kernel *kernel,
                                const fa_attention_backward_args *args,
                                CUstream stream) try {
  return fa_attention_backward_ex(kernel, args, nullptr, 0, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_ex(const fa_kernel *kernel,
                                   const fa_attention_backward_args *args,
                                   const fa_tensor *mod_args,
                                   int32_t mod_arg_count, CUstream stream) try {
  return launchBackward(kernel, args, ModArgList{mod_args, mod_arg_count}, {},
                        stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"

fa_status fa::runtime::launchBackward(const fa_kernel *kernel,
                                      const fa_attention_backward_args *args,
                                      const ModArgList &mods,
                                      const SinkArgs &sinks, CUstream stream,
                                      const fa_block_mask *blockMask) {
  constexpr const char *kSparseApi = "fa_attention_backward_block_sparse: ";
  if (kernel && args) {
    std::string err = checkBlockMaskPresence(*kernel, blockMask);
    if (err.empty() && blockMask)
      err = checkBlockMaskFor(kernel->config, *blockMask, *args);
    if (!err.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  (blockMask ? kSparseApi : "fa_attention_backward: ") + err);
  }
  ContextScope scope;
  if (fa_status s = prepareLaunch(kernel, args, mods, sinks, stream, scope))
    return s;
  return launchCheckedBackward(*kernel, *args, mods, sinks, blockMask,
                               nullptr, scope, stream);
}

fa_status fa::runtime::launchCheckedBackward(
    const fa_kernel &kernelRef, const fa_attention_backward_args &a,
    const ModArgList &mods, const SinkArgs &sinks,
    const fa_block_mask *blockMask, const VarlenBatch *varlen,
    const ContextScope &scope, CUstream stream, const fa_tensor *descales) {
  constexpr const char *kSparseApi = "fa_attention_backward_block_sparse: ";
  const fa_kernel *kernel = &kernelRef;
  const KernelConfig &c = kernel->config;
  // A block-sparse kernel's block mask and its head count (after the
  // strides).
  CUdeviceptr maskData = 0;
  int32_t maskHeads = 0;
  if (blockMask) {
    fa_tensor words = blockMaskTensor(c, *blockMask);
    if (fa_status s = checkPointers({{"block_mask", &words}}, scope.device))
      return failWithPrefix(s, kSparseApi);
    maskData = blockMask->data;
    maskHeads = static_cast<int32_t>(blockMask->mask_heads);
  }
  CUfunction pre, main, post;
  if (fa_status s = backwardFunctions(*kernel, scope, pre, main, post))
    return s;
  ScalarParams n(a);
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, o = a.o.data,
              dO = a.d_o.data, lse = a.lse.data, delta = a.delta.data,
              dqAccum = a.dq_accum.data, dq = a.dq.data, dk = a.dk.data,
              dv = a.dv.data;
  // A strided kernel's entries take the strides of o, do (bwd_pre); q, k,
  // v, do, dk, dv (bwd, after its maps and semaphores); dq (bwd_post).
  // An fp8 kernel's bwd_pre also takes descale_do and kv_heads, after the
  // strides (docs/ABI.md).
  void *preParams[7 + 2 * 3 + 2] = {&o,   &dO,  &delta, &dqAccum,
                                    &n.b, &n.h, &n.nq};
  // fa_bwd's 15, then a TMA kernel's maps and a deterministic one's
  // semaphores or an fp8 one's descales, the strides of q, k, v, do, dk, dv
  // (a strided kernel), a block-sparse kernel's block mask and its head
  // count, last the mod_args.
  void *mainParams[kBackwardParams + FA_MAX_TENSOR_MAPS + 4 + 6 * 3 + 2 +
                   ModArgParams::kMaxParams + WindowParams::kMaxParams] = {
      &q,  &k,   &v,   &dO,    &lse,  &delta, &dqAccum, &dk,
      &dv, &n.b, &n.h, &n.hkv, &n.nq, &n.nk,  &n.scale};
  CUdeviceptr descalePtrs[4] = {};
  if (descales) {
    for (int i = 0; i < 4; ++i) {
      descalePtrs[i] = descales[i].data;
      mainParams[c.descaleParam + i] = &descalePtrs[i];
    }
    preParams[kBackwardPreStrideParam + 6] = &descalePtrs[3];
    preParams[kBackwardPreStrideParam + 7] = &n.hkv;
  }
  void *postParams[5 + 3] = {&dqAccum, &dq, &n.b, &n.h, &n.nq};
  StrideParams preStrides, mainStrides, postStrides;
  if (c.strided()) {
    for (const fa_tensor *t : {&a.o, &a.d_o})
      preStrides.add(*t);
    preStrides.place(preParams, kBackwardPreStrideParam);
    for (const fa_tensor *t : {&a.q, &a.k, &a.v, &a.d_o, &a.dk, &a.dv})
      mainStrides.add(*t);
    mainStrides.place(mainParams, c.strideParam);
    postStrides.add(a.dq);
    postStrides.place(postParams, kBackwardPostStrideParam);
  }
  if (blockMask) {
    mainParams[c.blockMaskParam] = &maskData;
    mainParams[c.blockMaskParam + 1] = &maskHeads;
  }
  ModArgParams modParams;
  modParams.place(mainParams, c.modArgParam, mods);
  WindowParams window;
  window.place(mainParams, c);
  std::array<Grid, 3> grids = backwardGrids(c, a);
  // Varlen: the dense view is one batch of all tokens for bwd_pre and
  // bwd_post; bwd takes the offsets and runs (key block of the longest
  // sequence, key head, sequence), its sizes the token totals.
  CUdeviceptr cuQ = 0, cuK = 0;
  int32_t sequences = 0;
  if (varlen) {
    cuQ = varlen->cuSeqlensQ, cuK = varlen->cuSeqlensK;
    sequences = varlen->batch;
    mainParams[c.cuSeqlensParam] = &cuQ;
    mainParams[c.cuSeqlensParam + 1] = &cuK;
    mainParams[9] = &sequences; // batch: the sequences
    grids[1] = {gridBlocks(varlen->maxSeqlenK, c.blockKV) *
                    static_cast<unsigned>(c.dsplit),
                grids[1][1], static_cast<unsigned>(varlen->batch)};
  }

  if (fa_status s = launch(pre, c.bwdPre, grids[0], stream, preParams))
    return s;
  if (c.sinks)
    if (fa_status s =
            launchSinkGradient(*kernel, a, sinks, varlen, scope, stream))
      return s;
  auto launchMain = [&] {
    return launchEntry(*kernel, a, main, c.bwd, grids[1], stream, mainParams,
                       kBackwardParams, false);
  };
  auto launchWithWorkspace = [&] {
    if (!c.deterministic)
      return launchMain();
    return withZeroedWorkspace(
        apiName<fa_attention_backward_args>(),
        "the " + std::to_string(semaphoreBytes(a)) +
            "-byte semaphore workspace of deterministic kernel '" + c.tag +
            "'",
        semaphoreBytes(a), stream, mainParams[c.semaphoreParam], launchMain);
  };
  // A varlen batch whose longest key sequence is empty has no key block:
  // dQ stays zero (bwd_pre zeroed dq_accum).
  if (grids[1][0] > 0)
    if (fa_status s = launchWithWorkspace())
      return s;
  if (fa_status s = launch(post, c.bwdPost, grids[2], stream, postParams))
    return s;
  return succeed();
}

extern "C" {

fa_status fa_attention_forward_sinks_check(const fa_kernel *kernel,
                                           const fa_attention_args *args,
                                           const fa_tensor *mod_args,
                                           int32_t mod_arg_count,
                                           const fa_tensor *sinks) try {
  return checkCall(kernel, args, ModArgList{mod_args, mod_arg_count},
                   SinkArgs{sinks, nullptr, true});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_sinks_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_tensor *mod_args, int32_t mod_arg_count, const fa_tensor *sinks,
    const fa_tensor *d_sinks) try {
  return checkCall(kernel, args, ModArgList{mod_args, mod_arg_count},
                   SinkArgs{sinks, d_sinks, true});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_sinks(const fa_kernel *kernel,
                                     const fa_attention_args *args,
                                     const fa_tensor *mod_args,
                                     int32_t mod_arg_count,
                                     const fa_tensor *sinks,
                                     CUstream stream) try {
  return launchForward(kernel, args, ModArgList{mod_args, mod_arg_count},
                       nullptr, SinkArgs{sinks, nullptr, true}, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_sinks(const fa_kernel *kernel,
                                      const fa_attention_backward_args *args,
                                      const fa_tensor *mod_args,
                                      int32_t mod_arg_count,
                                      const fa_tensor *sinks,
                                      const fa_tensor *d_sinks,
                                      CUstream stream) try {
  return launchBackward(
      kernel, args, ModArgList{mod_args, mod_arg_count},
      SinkArgs{sinks, d_sinks, true}, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
