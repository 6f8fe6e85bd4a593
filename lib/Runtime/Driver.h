//===- Driver.h - CUDA driver calls of the fa runtime -----------*- C++ -*-===//
//
// The runtime's only view of the GPU: thin wrappers of CUDA driver API calls
// that turn a CUresult into an fa_status with a message naming the call.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_RUNTIME_DRIVER_H
#define FA_LIB_RUNTIME_DRIVER_H

#include "Internal.h"

namespace fa::runtime {

/// Kernels use the default 48 KiB of dynamic shared memory unless raised.
constexpr unsigned kDefaultSharedLimit = 48 * 1024;

/// `x` as "0x…", for addresses in messages.
std::string hex(uint64_t x);
/// "<call> failed: <name> (<code>): <text>".
std::string cuMessage(const char *call, CUresult r);
/// Records cuMessage(call, r) and returns FA_ERROR_CUDA.
fa_status cuFail(const char *call, CUresult r);

/// Calls cuInit once per process; every later call returns its result.
fa_status initDriver();
/// Reads a whole file (a manifest or a module image).
fa_status readFile(const std::string &path, std::string &out);
/// The compute capability of `device` as major * 10 + minor.
fa_status deviceComputeCapability(CUdevice device, int &cc);
/// Loads PTX (text) or a cubin/fatbin image into the current context; `what`
/// names the image in errors.
fa_status loadImage(const std::string &image, const std::string &what,
                    CUmodule &out);
/// Lets `f` use `bytes` of dynamic shared memory, above the default 48 KiB.
fa_status allowDynamicSharedMemory(CUfunction f, unsigned bytes);
/// Launches entry `entry` on `grid` with its threads and shared memory, a
/// dependent entry (Entry::dependent) with programmatic stream serialization
/// where the driver is 12.3 or later and FA_DEPENDENT_LAUNCH is not 0.
fa_status launch(CUfunction f, const Entry &entry, const Grid &grid,
                 CUstream stream, void **params);

/// The function of `entry` of `kernel` in context `ctx` (on `device`),
/// loading the kernel's module once per context (Bundle.cpp).
fa_status kernelFunction(const fa_kernel &kernel, const Entry &entry,
                         CUcontext ctx, CUdevice device, CUfunction &out);

/// Makes a context current for the duration of a call: the caller's, else
/// the one that owns `owner` (PyTorch's autograd threads may have none).
class ContextScope {
public:
  fa_status enter(CUdeviceptr owner);
  ~ContextScope();
  CUcontext ctx = nullptr;
  CUdevice device = 0;

private:
  bool pushed = false;
};

/// The split-KV (or paged) call's partials in its workspace: O (f32
/// [splits, B, H, Nq, Dv]) at the workspace's start, LSE after them.
CUdeviceptr splitLsePartials(const fa_attention_args &a,
                             const SplitKvWorkspace &w);
/// fa_merge of a split-KV or paged kernel (its function `merge`): the
/// partials in the workspace into o and lse, the sinks of a kernel with sinks
/// joined as one more partial (SplitKv.cpp).
fa_status launchMerge(const KernelConfig &c, CUfunction merge,
                      const fa_attention_args &a, const SplitKvWorkspace &w,
                      const SinkArgs &sinks, CUstream stream);
/// The split forward `split` over `grid` with `params` (and, for a TMA
/// kernel, its k and v maps made from `a`, by value), then launchMerge;
/// errors name the C entry point `api` (SplitKv.cpp; the split-KV and paged
/// launches).
fa_status launchSplitThenMerge(const KernelConfig &c, CUfunction split,
                               CUfunction merge, const Grid &grid,
                               void **params, const fa_attention_args &a,
                               const SplitKvWorkspace &w,
                               const SinkArgs &sinks, CUstream stream,
                               const char *api);

/// The steps of a launch API: its GPU-free checks, the context of the
/// device that owns `owner`, the device checks in it, the launches.
template <typename Check, typename DeviceCheck, typename Launch>
fa_status checkedLaunch(CUdeviceptr owner, Check check,
                        DeviceCheck deviceCheck, Launch launches) {
  if (fa_status s = check())
    return s;
  ContextScope scope;
  if (fa_status s = scope.enter(owner))
    return s;
  if (fa_status s = deviceCheck(scope))
    return s;
  if (fa_status s = launches(scope))
    return s;
  return succeed();
}

/// What cuPointerGetAttributes says of one allocation.
struct AllocationInfo {
  CUdeviceptr start = 0;
  size_t size = 0; // 0 when the driver does not say
  unsigned memType = 0;
  int ordinal = -1;
};

/// The allocations one launch's checks have queried. Allocations do not
/// overlap, so a pointer inside a known one has its attributes: the tensors
/// of a launch that share an allocation (PyTorch carves small tensors out of
/// 2 MiB segments) cost one driver query.
class KnownAllocations {
public:
  /// The known allocation holding `address`, or null.
  const AllocationInfo *holding(CUdeviceptr address) const {
    for (unsigned i = 0; i < count; ++i) {
      const AllocationInfo &a = known[i];
      if (a.size && address >= a.start && address - a.start < a.size)
        return &a;
    }
    return nullptr;
  }
  /// Remembers `info` (the first 16 only: a launch has at most 12 tensors).
  void add(const AllocationInfo &info) {
    if (count < known.size())
      known[count++] = info;
  }

private:
  std::array<AllocationInfo, 16> known{};
  unsigned count = 0;
};

/// Each pointer must be device memory of `device` and hold the whole tensor.
fa_status checkPointers(const std::vector<NamedTensor> &tensors,
                        CUdevice device);
/// `stream` must be a default stream or belong to `ctx`.
fa_status checkStream(CUstream stream, CUcontext ctx);
/// A launch's device-side checks: checkPointers on `device`, then
/// checkStream on `ctx`, a failure's message prefixed with "<api>: ".
fa_status checkLaunchDevice(const std::string &api,
                            const std::vector<NamedTensor> &tensors,
                            CUstream stream, CUdevice device, CUcontext ctx);

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_DRIVER_H
