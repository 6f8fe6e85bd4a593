//===- Quantize.cpp - fa_quantize: e4m3 inputs on the GPU -------*- C++ -*-===//
//
// Finds, validates and launches the quantiser an fp8 forward's module holds
// (QuantizeKernel.cpp in the compiler) over (ceil(N/64), H, B) CTAs:
// fa_quantize_amax then fa_quantize for per-group descales (the blocks'
// maxima in the caller's workspace), fa_quantize alone for per-block ones.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

using namespace fa::runtime;

namespace {

constexpr const char *kApi = "fa_quantize";
constexpr unsigned kThreads = 256; // the entries' threads, checked below
constexpr int64_t kBlockRows = 64;

std::string str(int64_t v) { return std::to_string(v); }

int64_t blocksOf(const fa_quantize_args &a) {
  return (a.x.shape[2] + kBlockRows - 1) / kBlockRows;
}

bool perBlock(const fa_quantize_args &a) { return a.descale.rank == 3; }

std::vector<NamedTensor> tensorsOfQuantize(const fa_quantize_args &a) {
  std::vector<NamedTensor> all = {
      {"x", &a.x}, {"x8", &a.x8}, {"descale", &a.descale}};
  if (!perBlock(a))
    all.push_back({"workspace", &a.workspace});
  return all;
}

/// Shapes, dtypes and layouts; "" when valid.
std::string checkShapes(const KernelConfig &c, const fa_quantize_args &a) {
  std::string e = checkTensorFor(c, "x", a.x, c.quantizeDtype, 4, 0, false);
  if (!e.empty())
    return e;
  int64_t batch = a.x.shape[0], heads = a.x.shape[1], rows = a.x.shape[2];
  if (a.x.shape[3] != c.headDim)
    return "x.shape[3] is " + str(a.x.shape[3]) + ", expected the kernel's " +
           "head dim " + str(c.headDim);
  e = checkTensorFor(c, "x8", a.x8, FA_DTYPE_F8E4M3, 4, 0, true);
  if (e.empty())
    e = checkShapeFor("x8", a.x8, {batch, heads, rows, c.headDim}, "x's");
  if (e.empty() && a.descale.rank != 2 && a.descale.rank != 3)
    return "descale.rank is " + str(a.descale.rank) +
           ", expected 2 ([B, G]: a factor per group of heads) or 3 ([B, H, "
           "ceil(N/64)]: a factor per 64-row block)";
  if (e.empty())
    e = checkTensorFor(c, "descale", a.descale, FA_DTYPE_F32, a.descale.rank, 0,
                       true);
  if (!e.empty())
    return e;
  if (perBlock(a)) {
    if (a.workspace.data)
      return "workspace is given for block descales, which need none (data "
             "0)";
    return checkShapeFor("descale", a.descale, {batch, heads, blocksOf(a)},
                         "[B, H, ceil(N/64)] from x");
  }
  int64_t groups = a.descale.shape[1];
  if (a.descale.shape[0] != batch || heads % groups != 0)
    return "descale.shape is [" + str(a.descale.shape[0]) + "," + str(groups) +
           "], expected [" + str(batch) +
           ", G] with G dividing H = " + str(heads) + " (one factor per " +
           "group of H/G heads)";
  e = checkTensorFor(c, "workspace", a.workspace, FA_DTYPE_F32, 3, 0, true);
  if (e.empty())
    e = checkShapeFor("workspace", a.workspace, {batch, heads, blocksOf(a)},
                      "[B, H, ceil(N/64)] from x: the blocks' maxima");
  return e;
}

fa_status checkCall(const fa_kernel *kernel, const fa_quantize_args *args,
                    const char *api) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " +
                                               (kernel ? "args" : "kernel") +
                                               " is null");
  const KernelConfig &c = kernel->config;
  std::string err;
  if (!c.quantizer)
    err = "kernel " + c.tag +
          " has no quantiser (build an fp8 forward with "
          "the config field 'quant=<bf16|f16|f32>')";
  else if (c.quant.threads != kThreads || c.quantAmax.threads != kThreads)
    err = "kernel " + c.tag + "'s quantize entries have " +
          str(c.quant.threads) + " and " + str(c.quantAmax.threads) +
          " threads, expected " + str(kThreads);
  else if (args->rotate != 0 && args->rotate != 1)
    err = "rotate is " + str(args->rotate) + ", expected 0 or 1";
  if (err.empty())
    err = checkShapes(c, *args);
  if (err.empty())
    err = checkOutputOverlap(tensorsOfQuantize(*args),
                             {"x8", "descale", "workspace"});
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return FA_SUCCESS;
}

fa_status launchQuantize(const fa_kernel &kernel, const fa_quantize_args &a,
                         CUstream stream, const ContextScope &scope) {
  const KernelConfig &c = kernel.config;
  CUfunction amaxFn, quantFn;
  if (fa_status s =
          kernelFunction(kernel, c.quantAmax, scope.ctx, scope.device, amaxFn))
    return s;
  if (fa_status s =
          kernelFunction(kernel, c.quant, scope.ctx, scope.device, quantFn))
    return s;
  // The block form reads no maxima (the amax parameter is unused there).
  CUdeviceptr x = a.x.data, x8 = a.x8.data, descale = a.descale.data,
              amax = perBlock(a) ? a.descale.data : a.workspace.data;
  int32_t batch = a.x.shape[0], heads = a.x.shape[1], rows = a.x.shape[2],
          headsPerFactor = perBlock(a) ? 0 : heads / a.descale.shape[1],
          rotate = a.rotate;
  void *params[9] = {&x,     &x8,   &amax,           &descale, &batch,
                     &heads, &rows, &headsPerFactor, &rotate};
  Grid grid{static_cast<unsigned>(blocksOf(a)), static_cast<unsigned>(heads),
            static_cast<unsigned>(batch)};
  // Block factors come from the CTA's own rows: one pass.
  if (!perBlock(a))
    if (fa_status s = launch(amaxFn, c.quantAmax, grid, stream, params))
      return s;
  return launch(quantFn, c.quant, grid, stream, params);
}

} // namespace

extern "C" {

fa_status fa_kernel_find_quantize(const fa_bundle *bundle, fa_dtype dtype,
                                  int64_t head_dim, const fa_kernel **out) try {
  if (!bundle || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(__func__) + ": " +
                                               (bundle ? "out" : "bundle") +
                                               " is null");
  *out = nullptr;
  for (const auto &k : bundle->kernels)
    if (k->config.quantizer && k->config.quantizeDtype == dtype &&
        k->config.headDim == head_dim) {
      *out = k.get();
      return succeed();
    }
  return fail(FA_ERROR_NOT_FOUND,
              std::string(__func__) + ": no kernel of the bundle quantises " +
                  fa_dtype_name(dtype) + " inputs at head dim " +
                  str(head_dim) +
                  " (build an fp8 forward with the config field "
                  "'quant=<bf16|f16|f32>')");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_quantize_check(const fa_kernel *kernel,
                            const fa_quantize_args *args) try {
  if (fa_status s = checkCall(kernel, args, __func__))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_quantize(const fa_kernel *kernel, const fa_quantize_args *args,
                      CUstream stream) try {
  if (fa_status s = checkCall(kernel, args, kApi))
    return s;
  ContextScope scope;
  if (fa_status s = scope.enter(args->x.data))
    return s;
  if (fa_status s = checkLaunchDevice(kApi, tensorsOfQuantize(*args), stream,
                                      scope.device, scope.ctx))
    return s;
  if (fa_status s = launchQuantize(*kernel, *args, stream, scope))
    return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
