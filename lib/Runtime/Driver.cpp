//===- Driver.cpp - CUDA driver calls and the plain module API -----------===//
//
// Everything here that touches the GPU goes through the CUDA driver API, so a
// deployment needs libcuda and the bundle only. The fa_module_* functions
// load and launch any module, for callers that bring their own kernels.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <fstream>
#include <iterator>

using namespace fa::runtime;

namespace fa::runtime {

fa_status initDriver() {
  static CUresult initResult = cuInit(0);
  if (initResult != CUDA_SUCCESS)
    return cuFail("cuInit", initResult);
  return FA_SUCCESS;
}

fa_status readFile(const std::string &path, std::string &out) {
  // Only a regular file of bounded size: a directory reads as nothing and a
  // device such as /dev/zero would never end.
  constexpr uint64_t kMaxBytes = uint64_t(1) << 31;
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return fail(FA_ERROR_NOT_FOUND,
                "cannot open '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || uint64_t(st.st_size) > kMaxBytes)
    return fail(FA_ERROR_IO, "expected '" + path +
                                 "' to be a regular file of at most 2 GiB");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(FA_ERROR_NOT_FOUND,
                "cannot open '" + path + "': " + std::strerror(errno));
  out.assign(std::istreambuf_iterator<char>(in), {});
  if (in.bad())
    return fail(FA_ERROR_IO, "cannot read '" + path + "'");
  return FA_SUCCESS;
}

fa_status deviceComputeCapability(CUdevice device, int &cc) {
  int major = 0, minor = 0;
  CUresult r = cuDeviceGetAttribute(
      &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (r == CUDA_SUCCESS)
    r = cuDeviceGetAttribute(
        &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  if (r != CUDA_SUCCESS)
    return cuFail("cuDeviceGetAttribute(compute capability)", r);
  cc = major * 10 + minor;
  return FA_SUCCESS;
}

/// PTX is JIT-compiled by the driver; its log is kept for the error message.
fa_status loadImage(const std::string &image, const std::string &what,
                    CUmodule &out) {
  bool binary = image.size() >= 4 &&
                (std::memcmp(image.data(),
                             "\x7f"
                             "ELF",
                             4) == 0 ||
                 std::memcmp(image.data(), "\x50\xed\x55\xba", 4) == 0);
  std::string text = image;
  if (!binary && (text.empty() || text.back() != '\0'))
    text.push_back('\0'); // the driver reads PTX as a C string
  char log[8192] = {0};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, reinterpret_cast<void *>(sizeof(log) - 1)};
  CUresult r = cuModuleLoadDataEx(&out, text.data(), 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    std::string msg = cuMessage("cuModuleLoadDataEx", r) + " loading " + what;
    if (log[0])
      msg += "; JIT log: " + std::string(log);
    return fail(FA_ERROR_CUDA, msg);
  }
  return FA_SUCCESS;
}

fa_status allowDynamicSharedMemory(CUfunction f, unsigned bytes) {
  CUresult r =
      cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         static_cast<int>(bytes));
  if (r != CUDA_SUCCESS)
    return cuFail("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r);
  return FA_SUCCESS;
}

namespace {

/// Whether dependent entries are launched as such.
bool dependentLaunches() {
  // Stream capture records them as programmatic graph edges from driver
  // 12.3 on; FA_DEPENDENT_LAUNCH=0 launches every kernel plainly.
  static const bool on = [] {
    const char *env = std::getenv("FA_DEPENDENT_LAUNCH");
    if (env && std::strcmp(env, "0") == 0)
      return false;
    int version = 0;
    return cuDriverGetVersion(&version) == CUDA_SUCCESS && version >= 12030;
  }();
  return on;
}

} // namespace

fa_status launch(CUfunction f, const Entry &entry, const Grid &grid,
                 CUstream stream, void **params) {
  CUresult r;
  const char *call = "cuLaunchKernel";
  if (entry.dependent && dependentLaunches()) {
    call = "cuLaunchKernelEx";
    CUlaunchAttribute serialization{};
    serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    serialization.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid[0];
    config.gridDimY = grid[1];
    config.gridDimZ = grid[2];
    config.blockDimX = entry.threads;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = entry.sharedBytes;
    config.hStream = stream;
    config.attrs = &serialization;
    config.numAttrs = 1;
    r = cuLaunchKernelEx(&config, f, params, nullptr);
  } else {
    r = cuLaunchKernel(f, grid[0], grid[1], grid[2], entry.threads, 1, 1,
                       entry.sharedBytes, stream, params, nullptr);
  }
  if (r != CUDA_SUCCESS)
    return fail(FA_ERROR_CUDA,
                cuMessage(call, r) + " for '" + entry.name + "'");
  return FA_SUCCESS;
}

fa_status ContextScope::enter(CUdeviceptr owner) {
  if (fa_status s = initDriver())
    return s;
  CUresult r = cuCtxGetCurrent(&ctx);
  if (r != CUDA_SUCCESS)
    return cuFail("cuCtxGetCurrent", r);
  if (!ctx) {
    r = cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, owner);
    if (r != CUDA_SUCCESS || !ctx)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "no CUDA context is current and q.data " + hex(owner) +
                      " is not device memory of any context");
    if ((r = cuCtxPushCurrent(ctx)) != CUDA_SUCCESS)
      return cuFail("cuCtxPushCurrent", r);
    pushed = true;
  }
  if ((r = cuCtxGetDevice(&device)) != CUDA_SUCCESS)
    return cuFail("cuCtxGetDevice", r);
  return FA_SUCCESS;
}

ContextScope::~ContextScope() {
  if (pushed) {
    CUcontext popped;
    cuCtxPopCurrent(&popped);
  }
}

} // namespace fa::runtime

namespace {

/// A host or foreign-device pointer would fault in the kernel, and a tensor
/// that runs past its allocation would read or write someone else's memory.
/// `known` holds the allocations queried for the launch's earlier tensors.
fa_status checkPointer(const char *name, const fa_tensor &t, CUdevice device,
                       KnownAllocations &known) {
  AllocationInfo info;
  CUresult r = CUDA_SUCCESS;
  if (const AllocationInfo *a = known.holding(t.data)) {
    info = *a;
  } else {
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *vals[] = {&info.memType, &info.ordinal, &info.start, &info.size};
    r = cuPointerGetAttributes(4, attrs, vals, t.data);
    if (r == CUDA_SUCCESS)
      known.add(info);
  }
  unsigned memType = info.memType;
  int ordinal = info.ordinal;
  CUdeviceptr start = info.start;
  size_t size = info.size;
  // Built only for an error: this runs for every tensor of every launch.
  auto what = [&] { return std::string(name) + ".data " + hex(t.data); };
  if (r != CUDA_SUCCESS)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                what() + " is not CUDA device memory (" +
                    cuMessage("cuPointerGetAttributes", r) + ")");
  if (memType != CU_MEMORYTYPE_DEVICE)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                what() +
                    (memType == CU_MEMORYTYPE_HOST
                         ? " is host memory"
                         : " is not CUDA device memory") +
                    "; expected memory on device " + std::to_string(device));
  if (ordinal != static_cast<int>(device))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                what() + " is on device " + std::to_string(ordinal) +
                    ", but the current context is on device " +
                    std::to_string(device));
  uint64_t bytes = tensorBytes(t);
  if (size && t.data + bytes > start + size)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                what() + " needs " + std::to_string(bytes) +
                    " bytes, but its allocation [" + hex(start) + ", +" +
                    std::to_string(size) + ") ends " +
                    std::to_string(start + size - t.data) + " bytes after it");
  return FA_SUCCESS;
}

} // namespace

namespace fa::runtime {

fa_status checkPointers(const std::vector<NamedTensor> &tensors,
                        CUdevice device) {
  KnownAllocations known;
  for (auto &[name, t] : tensors)
    if (fa_status s = checkPointer(name, *t, device, known))
      return s;
  return FA_SUCCESS;
}

fa_status checkLaunchDevice(const std::string &api,
                            const std::vector<NamedTensor> &tensors,
                            CUstream stream, CUdevice device, CUcontext ctx) {
  if (fa_status s = checkPointers(tensors, device))
    return failWithPrefix(s, api + ": ");
  if (fa_status s = checkStream(stream, ctx))
    return failWithPrefix(s, api + ": ");
  return FA_SUCCESS;
}

fa_status checkStream(CUstream stream, CUcontext ctx) {
  // The null and the special default-stream handles follow the current
  // context; only a created stream has its own.
  if (stream == nullptr || stream == CU_STREAM_LEGACY ||
      stream == CU_STREAM_PER_THREAD)
    return FA_SUCCESS;
  CUcontext owner = nullptr;
  CUresult r = cuStreamGetCtx(stream, &owner);
  if (r != CUDA_SUCCESS)
    return cuFail("cuStreamGetCtx (is the stream valid?)", r);
  if (owner != ctx)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "stream belongs to another CUDA context than the tensors'");
  return FA_SUCCESS;
}

} // namespace fa::runtime

struct fa_module {
  CUmodule module = nullptr;
};

extern "C" {

fa_status fa_module_load_data(const void *image, size_t size,
                              fa_module **out) try {
  if (!image || !size || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_module_load_data: null or empty argument");
  *out = nullptr;
  if (fa_status s = initDriver())
    return s;
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  if (!ctx)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_module_load_data: no CUDA context is current");
  auto module = std::make_unique<fa_module>();
  std::string bytes(static_cast<const char *>(image), size);
  if (fa_status s = loadImage(bytes, "a module image", module->module))
    return s;
  *out = module.release();
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_module_load_file(const char *path, fa_module **out) try {
  if (!path || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_module_load_file: null argument");
  *out = nullptr;
  std::string image;
  if (fa_status s = readFile(path, image))
    return s;
  if (image.empty())
    return fail(FA_ERROR_IO, "'" + std::string(path) + "' is empty");
  fa_status s = fa_module_load_data(image.data(), image.size(), out);
  if (s != FA_SUCCESS)
    return fail(s, lastErrorMessage() + " (from '" + path + "')");
  return s;
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_module_get_function(fa_module *module, const char *name,
                                 CUfunction *out) try {
  if (!module || !name || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_module_get_function: null argument");
  CUresult r = cuModuleGetFunction(out, module->module, name);
  if (r == CUDA_ERROR_NOT_FOUND)
    return fail(FA_ERROR_NOT_FOUND,
                "no entry '" + std::string(name) + "' in the module");
  if (r != CUDA_SUCCESS)
    return cuFail("cuModuleGetFunction", r);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_module_launch(CUfunction function, const unsigned grid[3],
                           const unsigned block[3], unsigned shared_bytes,
                           CUstream stream, void **params) try {
  if (!function || !grid || !block)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_module_launch: null argument");
  if (shared_bytes > kDefaultSharedLimit)
    if (fa_status s = allowDynamicSharedMemory(function, shared_bytes))
      return s;
  CUresult r =
      cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                     block[2], shared_bytes, stream, params, nullptr);
  if (r != CUDA_SUCCESS)
    return cuFail("cuLaunchKernel", r);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

void fa_module_free(fa_module *module) try {
  if (module && module->module)
    cuModuleUnload(module->module);
  delete module;
} catch (...) {
  return failedResult<void>(__func__);
}

} // extern "C"
