//===- Bundle.cpp - Load bundles; their modules in each context ----------===//
//
// A bundle is a directory with manifest.json and the kernels' PTX and cubin
// files. Loading it parses the manifest only; a kernel's module is loaded
// into a context the first time the kernel is launched there, once for all
// kernels of the bundle that share the file.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

using namespace fa::runtime;

namespace {

/// The file of kernel `c` to load on a device of compute capability `cc`:
/// its cubin if built for exactly that device, else its PTX for the driver
/// to compile, if the target allows (targetRank).
fa_status moduleFile(const KernelConfig &c, int cc, const std::string *&out) {
  if (targetRank(c, cc) == 0)
    return fail(FA_ERROR_UNSUPPORTED, "kernel '" + c.tag + "' (target " +
                                          c.targetName + ") cannot run on sm_" +
                                          std::to_string(cc));
  bool useCubin = !c.cubinPath.empty() && c.target.cc == cc;
  out = useCubin ? &c.cubinPath : &c.ptxPath;
  return FA_SUCCESS;
}

/// The module of `path` in `ctx`, loaded on first use. Call with the
/// bundle's mutex held.
fa_status loadedModule(fa_bundle &bundle, CUcontext ctx,
                       const std::string &path, CUmodule &out) {
  out = nullptr;
  for (const LoadedModule &m : bundle.modules)
    if (m.ctx == ctx && m.path == path)
      out = m.module;
  if (out)
    return FA_SUCCESS;
  std::string image;
  if (fa_status s = readFile(path, image))
    return s;
  if (fa_status s = loadImage(image, "'" + path + "'", out))
    return s;
  bundle.modules.push_back({ctx, path, out});
  return FA_SUCCESS;
}

/// Raises `f`'s dynamic shared memory limit to what `entry` needs, if that
/// is above the default and the device allows it.
fa_status allowEntrySharedMemory(const Entry &entry, CUfunction f,
                                 CUdevice device) {
  if (entry.sharedBytes <= kDefaultSharedLimit)
    return FA_SUCCESS;
  // The opt-in limit covers static and dynamic shared memory together.
  int optin = 0, staticBytes = 0;
  cuDeviceGetAttribute(
      &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
  cuFuncGetAttribute(&staticBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
  if (entry.sharedBytes + static_cast<unsigned>(staticBytes) >
      static_cast<unsigned>(optin))
    return fail(FA_ERROR_UNSUPPORTED,
                "entry '" + entry.name + "' needs " +
                    std::to_string(entry.sharedBytes) +
                    " bytes of dynamic shared memory and " +
                    std::to_string(staticBytes) +
                    " static; the device allows " + std::to_string(optin) +
                    " per block");
  return allowDynamicSharedMemory(f, entry.sharedBytes);
}

} // namespace

namespace fa::runtime {

fa_status kernelFunction(const fa_kernel &kernel, const Entry &entry,
                         CUcontext ctx, CUdevice device, CUfunction &out) {
  fa_bundle &bundle = *kernel.bundle;
  std::lock_guard<std::mutex> lock(bundle.mutex);
  // Launches after the first in a context skip the device queries, the
  // module search, the symbol lookup and the shared-memory attributes.
  for (const LoadedFunction &f : bundle.functions)
    if (f.ctx == ctx && f.entry == &entry) {
      out = f.function;
      return FA_SUCCESS;
    }
  const KernelConfig &c = kernel.config;
  int cc = 0;
  if (fa_status s = deviceComputeCapability(device, cc))
    return s;
  const std::string *path = nullptr;
  if (fa_status s = moduleFile(c, cc, path))
    return s;
  CUmodule module = nullptr;
  if (fa_status s = loadedModule(bundle, ctx, *path, module))
    return s;
  CUresult r = cuModuleGetFunction(&out, module, entry.name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    return fail(FA_ERROR_NOT_FOUND, "entry '" + entry.name + "' of kernel '" +
                                        c.tag + "' is not in '" + *path + "'");
  if (r != CUDA_SUCCESS)
    return cuFail("cuModuleGetFunction", r);
  if (fa_status s = allowEntrySharedMemory(entry, out, device))
    return s;
  bundle.functions.push_back({ctx, &entry, out});
  return FA_SUCCESS;
}

} // namespace fa::runtime

fa_bundle::~fa_bundle() {
  // Unloading needs the context alive; a context already destroyed took its
  // modules with it, so failures here are harmless.
  for (const LoadedModule &m : modules)
    cuModuleUnload(m.module);
}

const fa_kernel *fa_bundle::windowView(const fa_kernel &kernel, int left,
                                       int right) const {
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<fa_kernel> &view =
      windowViews[{kernel.config.tag, left, right}];
  if (!view) {
    view = std::make_unique<fa_kernel>(kernel);
    view->config.windowLeft = left;
    view->config.windowRight = right;
  }
  return view.get();
}

extern "C" {

fa_status fa_bundle_load(const char *dir, fa_bundle **out) try {
  if (!dir || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_bundle_load: null argument");
  *out = nullptr;
  std::string path = std::string(dir) + "/manifest.json", text;
  if (fa_status s = readFile(path, text))
    return s;
  auto bundle = std::make_unique<fa_bundle>();
  bundle->dir = dir;
  std::string error;
  if (parseManifest(text, dir, bundle->kernels, error) != FA_SUCCESS)
    return fail(FA_ERROR_BAD_MANIFEST, path + ": " + error);
  for (auto &k : bundle->kernels)
    k->bundle = bundle.get();
  *out = bundle.release();
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

void fa_bundle_free(fa_bundle *bundle) try { delete bundle; } catch (...) {
  return failedResult<void>(__func__);
}

int32_t fa_bundle_kernel_count(const fa_bundle *bundle) try {
  return bundle ? static_cast<int32_t>(bundle->kernels.size()) : 0;
} catch (...) {
  return failedResult<int32_t>(__func__);
}

const fa_kernel *fa_bundle_kernel_at(const fa_bundle *bundle,
                                     int32_t index) try {
  if (!bundle || index < 0 ||
      index >= static_cast<int32_t>(bundle->kernels.size()))
    return nullptr;
  return bundle->kernels[index].get();
} catch (...) {
  return failedResult<const fa_kernel *>(__func__);
}

fa_status fa_kernel_get_info(const fa_kernel *kernel, fa_kernel_info *out) try {
  if (!kernel || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_kernel_get_info: null argument");
  const KernelConfig &c = kernel->config;
  *out = {c.tag.c_str(),
          c.targetName.c_str(),
          c.direction,
          c.dtype,
          c.mask,
          c.headDim,
          c.headDimV,
          c.blockQ,
          c.blockKV,
          c.warps,
          c.stages,
          c.windowLeft,
          c.windowRight,
          !c.cubinPath.empty(),
          c.mma,
          static_cast<int32_t>(c.tensorMaps.size()),
          c.dsplit,
          c.deterministic,
          c.fwd.persistent,
          c.scoreMod.empty() ? nullptr : c.scoreMod.c_str(),
          c.splitKv,
          c.packGqa,
          c.strided(),
          static_cast<int32_t>(c.modArgs.size()),
          c.maskMod.empty() ? nullptr : c.maskMod.c_str(),
          c.varlen,
          c.blockSparse,
          c.sinks,
          c.paged,
          c.kvAppend,
          c.tf32,
          c.descaleBlock};
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_kernel_get_mod_arg(const fa_kernel *kernel, int32_t index,
                                fa_mod_arg_info *out) try {
  if (!kernel || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_get_mod_arg: null argument");
  const std::vector<ModArgSpec> &mods = kernel->config.modArgs;
  if (index < 0 || index >= static_cast<int32_t>(mods.size()))
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_get_mod_arg: index " + std::to_string(index) +
                    " is outside kernel '" + kernel->config.tag + "''s " +
                    std::to_string(mods.size()) + " mod_args");
  const ModArgSpec &m = mods[index];
  *out = fa_mod_arg_info{};
  out->dtype = m.dtype;
  out->rank = m.rank;
  for (int d = 0; d < FA_MAX_RANK; ++d) {
    out->extent[d] = m.extent[d];
    out->size[d] = m.size[d];
  }
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
