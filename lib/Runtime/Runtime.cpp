//===- Runtime.cpp - fa runtime C ABI: bundles, modules, launches
//----------===//
//
// Everything here that touches the GPU goes through the CUDA driver API, so a
// deployment needs libcuda and the bundle only.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <unordered_map>

using namespace fa::runtime;

namespace {

thread_local std::string lastError;

/// Kernels use the default 48 KiB of dynamic shared memory unless raised.
constexpr unsigned kDefaultSharedLimit = 48 * 1024;

std::string hex(uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

std::string cuMessage(const char *call, CUresult r) {
  const char *name = nullptr, *text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  std::ostringstream os;
  os << call << " failed: " << (name ? name : "CUDA error") << " ("
     << static_cast<int>(r) << ")";
  if (text)
    os << ": " << text;
  return os.str();
}

fa_status cuFail(const char *call, CUresult r) {
  return fail(FA_ERROR_CUDA, cuMessage(call, r));
}

fa_status initDriver() {
  static CUresult initResult = cuInit(0);
  if (initResult != CUDA_SUCCESS)
    return cuFail("cuInit", initResult);
  return FA_SUCCESS;
}

fa_status readFile(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(FA_ERROR_NOT_FOUND,
                "cannot open '" + path + "': " + std::strerror(errno));
  out.assign(std::istreambuf_iterator<char>(in), {});
  if (in.bad())
    return fail(FA_ERROR_IO, "cannot read '" + path + "'");
  return FA_SUCCESS;
}

fa_status deviceCC(CUdevice dev, int &cc) {
  int major = 0, minor = 0;
  CUresult r = cuDeviceGetAttribute(
      &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (r == CUDA_SUCCESS)
    r = cuDeviceGetAttribute(&minor,
                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (r != CUDA_SUCCESS)
    return cuFail("cuDeviceGetAttribute(compute capability)", r);
  cc = major * 10 + minor;
  return FA_SUCCESS;
}

/// Loads PTX (text) or a cubin/fatbin image into the current context. PTX is
/// JIT-compiled by the driver; its log is kept for the error message.
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

/// Makes a context current for the duration of a call: the caller's, else
/// the one that owns `owner` (PyTorch's autograd threads may have none).
class ContextScope {
public:
  fa_status enter(CUdeviceptr owner) {
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
  ~ContextScope() {
    if (pushed) {
      CUcontext popped;
      cuCtxPopCurrent(&popped);
    }
  }
  CUcontext ctx = nullptr;
  CUdevice device = 0;

private:
  bool pushed = false;
};

/// Each pointer must be device memory of the context's device and hold the
/// whole tensor; a host or foreign-device pointer would fault in the kernel.
fa_status checkPointers(const std::vector<NamedTensor> &tensors,
                        CUdevice device) {
  for (auto &[name, t] : tensors) {
    unsigned memType = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *vals[] = {&memType, &ordinal, &start, &size};
    CUresult r = cuPointerGetAttributes(4, attrs, vals, t->data);
    std::string what = std::string(name) + ".data " + hex(t->data);
    if (r != CUDA_SUCCESS)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  what + " is not CUDA device memory (" +
                      cuMessage("cuPointerGetAttributes", r) + ")");
    if (memType != CU_MEMORYTYPE_DEVICE)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  what +
                      (memType == CU_MEMORYTYPE_HOST
                           ? " is host memory"
                           : " is not CUDA device memory") +
                      "; expected memory on device " + std::to_string(device));
    if (ordinal != static_cast<int>(device))
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  what + " is on device " + std::to_string(ordinal) +
                      ", but the current context is on device " +
                      std::to_string(device));
    uint64_t bytes = tensorBytes(*t);
    if (size && t->data + bytes > start + size)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  what + " needs " + std::to_string(bytes) +
                      " bytes, but its allocation [" + hex(start) + ", +" +
                      std::to_string(size) + ") ends " +
                      std::to_string(start + size - t->data) +
                      " bytes after it");
  }
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

/// Looks up an entry of `kernel` in context `ctx`, loading the module once
/// per (context, file) and raising the shared-memory limit when needed.
fa_status getFunction(const fa_kernel &kernel, const Entry &entry,
                      CUcontext ctx, CUdevice device, CUfunction &out) {
  const KernelConfig &c = kernel.config;
  fa_bundle &bundle = *kernel.bundle;
  int cc = 0;
  if (fa_status s = deviceCC(device, cc))
    return s;
  bool useCubin = !c.cubinPath.empty() && c.target.cc == cc;
  if (!useCubin &&
      (c.ptxPath.empty() ||
       (c.target.archSpecific ? c.target.cc != cc : c.target.cc > cc)))
    return fail(FA_ERROR_UNSUPPORTED, "kernel '" + c.tag + "' (target " +
                                          c.targetName + ") cannot run on sm_" +
                                          std::to_string(cc));
  const std::string &path = useCubin ? c.cubinPath : c.ptxPath;

  std::lock_guard<std::mutex> lock(bundle.mutex);
  CUmodule module = nullptr;
  for (const LoadedModule &m : bundle.modules)
    if (m.ctx == ctx && m.path == path)
      module = m.module;
  if (!module) {
    std::string image;
    if (fa_status s = readFile(path, image))
      return s;
    if (fa_status s = loadImage(image, "'" + path + "'", module))
      return s;
    bundle.modules.push_back({ctx, path, module});
  }
  CUresult r = cuModuleGetFunction(&out, module, entry.name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    return fail(FA_ERROR_NOT_FOUND, "entry '" + entry.name + "' of kernel '" +
                                        c.tag + "' is not in '" + path + "'");
  if (r != CUDA_SUCCESS)
    return cuFail("cuModuleGetFunction", r);
  if (entry.sharedBytes > kDefaultSharedLimit) {
    // The opt-in limit covers static and dynamic shared memory together.
    int optin = 0, staticBytes = 0;
    cuDeviceGetAttribute(
        &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
    cuFuncGetAttribute(&staticBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, out);
    if (entry.sharedBytes + static_cast<unsigned>(staticBytes) >
        static_cast<unsigned>(optin))
      return fail(FA_ERROR_UNSUPPORTED,
                  "entry '" + entry.name + "' needs " +
                      std::to_string(entry.sharedBytes) +
                      " bytes of dynamic shared memory and " +
                      std::to_string(staticBytes) +
                      " static; the device allows " + std::to_string(optin) +
                      " per block");
    r = cuFuncSetAttribute(out, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           static_cast<int>(entry.sharedBytes));
    if (r != CUDA_SUCCESS)
      return cuFail("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r);
  }
  return FA_SUCCESS;
}

fa_status launch(CUfunction f, const Entry &entry, unsigned gx, unsigned gy,
                 unsigned gz, CUstream stream, void **params) {
  CUresult r = cuLaunchKernel(f, gx, gy, gz, entry.threads, 1, 1,
                              entry.sharedBytes, stream, params, nullptr);
  if (r != CUDA_SUCCESS)
    return fail(FA_ERROR_CUDA,
                cuMessage("cuLaunchKernel", r) + " for '" + entry.name + "'");
  return FA_SUCCESS;
}

unsigned ceilDiv(int64_t a, int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

const char *maskName(fa_mask m) {
  switch (m) {
  case FA_MASK_NONE:
    return "none";
  case FA_MASK_CAUSAL:
    return "causal";
  case FA_MASK_CAUSAL_BOTTOM_RIGHT:
    return "causal_bottom_right";
  case FA_MASK_WINDOW:
    return "window";
  }
  return "<invalid mask>";
}

const char *mmaName(fa_mma m) {
  switch (m) {
  case FA_MMA_ANY:
    return "any";
  case FA_MMA_SYNC:
    return "mma_sync";
  case FA_MMA_WGMMA:
    return "wgmma";
  }
  return "<invalid mma>";
}

std::string describe(fa_direction dir, fa_dtype dtype, int d, int dv,
                     fa_mask mask, int wl, int wr, fa_mma mma) {
  std::ostringstream os;
  os << (dir == FA_DIRECTION_FWD ? "fwd" : "bwd") << ' ' << fa_dtype_name(dtype)
     << " d=" << d << " dv=" << dv << " mask=" << maskName(mask);
  if (mask == FA_MASK_WINDOW)
    os << '(' << wl << ',' << wr << ')';
  if (mma != FA_MMA_ANY)
    os << " mma=" << mmaName(mma);
  return os.str();
}

/// Bytes of one slot: the maps of one launch, each 128 B and so 64 B aligned
/// at any slot start (the ring's base is 256 B aligned), then the u32 tile
/// counter of a persistent forward. The ring starts zeroed; such a kernel
/// leaves its counter at 0 again (docs/ABI.md), and launches that share a
/// slot are ordered (same stream, or the slot was idle).
constexpr size_t kMapBytes = FA_MAX_TENSOR_MAPS * sizeof(CUtensorMap);
constexpr size_t kMapSlotBytes = kMapBytes + 64;
/// Slots per context: distinct map sets that stay cached, and launches with
/// maps that may be in flight before one waits.
constexpr int kMapSlots = 128;

std::string mapArgsText(const fa_tensor_map_args &m) {
  std::ostringstream os;
  auto list = [&](const auto *xs, unsigned n) {
    os << '{';
    for (unsigned i = 0; i < n; ++i)
      os << (i ? ", " : "") << xs[i];
    os << '}';
  };
  os << "dataType " << static_cast<int>(m.data_type) << ", rank " << m.rank
     << ", globalAddress " << hex(m.global_address) << ", globalDim ";
  list(m.global_dim, m.rank);
  os << ", globalStrides ";
  list(m.global_strides, m.rank - 1);
  os << ", boxDim ";
  list(m.box_dim, m.rank);
  os << ", elementStrides ";
  list(m.element_strides, m.rank);
  os << ", interleave " << static_cast<int>(m.interleave) << ", swizzle "
     << static_cast<int>(m.swizzle) << ", l2Promotion "
     << static_cast<int>(m.l2_promotion) << ", oobFill "
     << static_cast<int>(m.oob_fill);
  return os.str();
}

fa_status encodeMaps(const std::vector<fa_tensor_map_args> &args,
                     CUtensorMap *out) {
  for (size_t i = 0; i < args.size(); ++i) {
    const fa_tensor_map_args &m = args[i];
    std::memset(&out[i], 0, sizeof(CUtensorMap));
    CUresult r = cuTensorMapEncodeTiled(
        &out[i], m.data_type, m.rank,
        reinterpret_cast<void *>(m.global_address), m.global_dim,
        m.global_strides, m.box_dim, m.element_strides, m.interleave, m.swizzle,
        m.l2_promotion, m.oob_fill);
    if (r != CUDA_SUCCESS)
      return fail(FA_ERROR_CUDA, cuMessage("cuTensorMapEncodeTiled", r) +
                                     " for " + m.tensor + "_map (parameter " +
                                     std::to_string(m.param) +
                                     "): " + mapArgsText(m));
  }
  return FA_SUCCESS;
}

uint64_t hashBytes(const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t h = 1469598103934665603ull; // FNV-1a
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

} // namespace

namespace fa::runtime {

/// A slot holds the maps of one launch. `lastUse` is recorded after every
/// launch that reads the slot, on `stream`; a slot is rewritten only when
/// that event has completed, and it is read without a copy by a launch on
/// the same stream (ordered after the copy) or after it has completed.
struct MapSlot {
  CUtensorMap maps[FA_MAX_TENSOR_MAPS];
  size_t bytes = 0; // 0: holds nothing
  uint64_t hash = 0;
  CUevent lastUse = nullptr;
  unsigned long long stream = 0; // cuStreamGetId of lastUse's stream
};

struct MapRing {
  CUcontext ctx = nullptr;
  CUdeviceptr base = 0;
  std::mutex mutex; // guards everything below; held across a launch
  std::vector<MapSlot> slots;
  std::unordered_map<uint64_t, int> index; // hash -> slot
  int next = 0; // where the search for a free slot starts

  ~MapRing() {
    // Launches may still read the slots; the context may already be gone,
    // in which case it took the memory and events with it.
    if (cuCtxPushCurrent(ctx) != CUDA_SUCCESS)
      return;
    for (MapSlot &s : slots)
      if (s.lastUse) {
        cuEventSynchronize(s.lastUse);
        cuEventDestroy(s.lastUse);
      }
    if (base)
      cuMemFree(base);
    CUcontext popped;
    cuCtxPopCurrent(&popped);
  }

  fa_status init(CUcontext context) {
    ctx = context;
    slots.resize(kMapSlots);
    for (MapSlot &s : slots)
      if (CUresult r = cuEventCreate(&s.lastUse, CU_EVENT_DISABLE_TIMING))
        return cuFail("cuEventCreate (tensor map slots)", r);
    if (CUresult r = cuMemAlloc(&base, kMapSlots * kMapSlotBytes))
      return cuFail("cuMemAlloc (tensor map slots)", r);
    if (CUresult r = cuMemsetD8(base, 0, kMapSlots * kMapSlotBytes))
      return cuFail("cuMemsetD8 (tensor map slots)", r);
    if (base % 64 != 0)
      return fail(FA_ERROR_CUDA, "cuMemAlloc returned " + hex(base) +
                                     ", which is not 64-byte aligned");
    return FA_SUCCESS;
  }

  CUdeviceptr address(int slot) const { return base + slot * kMapSlotBytes; }

  bool idle(const MapSlot &s) const {
    return cuEventQuery(s.lastUse) == CUDA_SUCCESS;
  }

  /// The slot that holds `maps` for a launch on `stream`, copying them into
  /// a free one (in stream order) when none can be reused. Call with mutex
  /// held and call used() after the launch.
  fa_status acquire(const CUtensorMap *maps, size_t bytes, CUstream stream,
                    unsigned long long streamId, int &out) {
    uint64_t h = hashBytes(maps, bytes);
    auto it = index.find(h);
    if (it != index.end()) {
      MapSlot &s = slots[it->second];
      if (s.bytes == bytes && std::memcmp(s.maps, maps, bytes) == 0 &&
          (s.stream == streamId || idle(s))) {
        out = it->second;
        return FA_SUCCESS;
      }
    }
    int victim = -1;
    for (int i = 0; i < kMapSlots && victim < 0; ++i) {
      int j = (next + i) % kMapSlots;
      if (slots[j].bytes == 0 || idle(slots[j]))
        victim = j;
    }
    if (victim < 0) {
      // Every slot is read by a launch in flight: wait for the oldest.
      victim = next;
      if (CUresult r = cuEventSynchronize(slots[victim].lastUse))
        return cuFail("cuEventSynchronize (tensor map slot)", r);
    }
    next = (victim + 1) % kMapSlots;
    MapSlot &s = slots[victim];
    auto old = index.find(s.hash);
    if (s.bytes && old != index.end() && old->second == victim)
      index.erase(old);
    s.bytes = 0;
    // Pageable source: the driver has taken the bytes when this returns.
    if (CUresult r = cuMemcpyHtoDAsync(address(victim), maps, bytes, stream))
      return cuFail("cuMemcpyHtoDAsync (tensor maps)", r);
    std::memcpy(s.maps, maps, bytes);
    s.bytes = bytes;
    s.hash = h;
    s.stream = streamId;
    index[h] = victim;
    out = victim;
    return FA_SUCCESS;
  }

  /// Marks `slot` as read by work just enqueued on `stream`.
  fa_status used(int slot, CUstream stream, unsigned long long streamId) {
    MapSlot &s = slots[slot];
    if (CUresult r = cuEventRecord(s.lastUse, stream)) {
      // Its copy may still be pending; keep it from being reused as is.
      auto it = index.find(s.hash);
      if (it != index.end() && it->second == slot)
        index.erase(it);
      return cuFail("cuEventRecord (tensor map slot)", r);
    }
    s.stream = streamId;
    return FA_SUCCESS;
  }
};

void backwardGrids(const KernelConfig &c, const fa_attention_backward_args &a,
                   unsigned grids[3][3]) {
  unsigned b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1];
  unsigned qBlocks = ceilDiv(a.q.shape[2], c.blockQ);
  unsigned kBlocks = ceilDiv(a.k.shape[2], c.blockKV);
  unsigned out[3][3] = {{qBlocks, h, b},
                        {kBlocks * static_cast<unsigned>(c.dsplit), hkv, b},
                        {qBlocks, h, b}};
  std::copy(&out[0][0], &out[0][0] + 9, &grids[0][0]);
}
} // namespace fa::runtime

namespace {

/// The map ring of `ctx` in `bundle`, made on first use.
fa_status mapRing(fa_bundle &bundle, CUcontext ctx, MapRing *&out) {
  std::lock_guard<std::mutex> lock(bundle.mutex);
  for (auto &r : bundle.mapRings)
    if (r->ctx == ctx) {
      out = r.get();
      return FA_SUCCESS;
    }
  auto ring = std::make_unique<MapRing>();
  if (fa_status s = ring->init(ctx))
    return s;
  out = ring.get();
  bundle.mapRings.push_back(std::move(ring));
  return FA_SUCCESS;
}

/// A launch with tensor maps cannot be captured into a CUDA graph: the
/// captured kernel would keep reading a map slot that later launches reuse.
fa_status rejectCapture(const char *what, const KernelConfig &c,
                        CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CUresult r = cuStreamIsCapturing(stream, &capture))
    return cuFail("cuStreamIsCapturing", r);
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return fail(FA_ERROR_UNSUPPORTED,
                std::string(what) + ": kernel '" + c.tag +
                    "' takes tensor maps in runtime-owned memory and cannot "
                    "be captured into a CUDA graph");
  return FA_SUCCESS;
}

/// Launches `f` (entry `e` of `kernel`) with its tensor maps: encodes
/// `mapArgs`, puts them into a slot of the context's map ring (in stream
/// order) and points parameter mapArgs[i].param of `params` at map i; the
/// other parameters are the caller's. `what` names the API call in errors.
fa_status launchWithMaps(const fa_kernel &kernel, const char *what,
                         const std::vector<fa_tensor_map_args> &mapArgs,
                         CUcontext ctx, CUfunction f, const Entry &e,
                         std::array<unsigned, 3> grid, CUstream stream,
                         void **params, int counterParam = -1) {
  const KernelConfig &c = kernel.config;
  CUtensorMap maps[FA_MAX_TENSOR_MAPS];
  if (fa_status s = encodeMaps(mapArgs, maps))
    return fail(s, std::string(what) + ": kernel '" + c.tag + "': " +
                       lastError);
  if (fa_status s = rejectCapture(what, c, stream))
    return s;
  unsigned long long streamId = 0;
  if (CUresult r = cuStreamGetId(stream, &streamId))
    return cuFail("cuStreamGetId", r);
  MapRing *ring = nullptr;
  if (fa_status s = mapRing(*kernel.bundle, ctx, ring))
    return s;

  std::lock_guard<std::mutex> lock(ring->mutex);
  int slot = 0;
  if (fa_status s = ring->acquire(maps, mapArgs.size() * sizeof(CUtensorMap),
                                  stream, streamId, slot))
    return s;
  CUdeviceptr mapPtrs[FA_MAX_TENSOR_MAPS];
  for (size_t i = 0; i < mapArgs.size(); ++i) {
    mapPtrs[i] = ring->address(slot) + i * sizeof(CUtensorMap);
    params[mapArgs[i].param] = &mapPtrs[i];
  }
  CUdeviceptr counter = ring->address(slot) + kMapBytes;
  if (counterParam >= 0)
    params[counterParam] = &counter;
  fa_status launched =
      launch(f, e, grid[0], grid[1], grid[2], stream, params);
  std::string launchError = lastError;
  // Recorded even when the launch failed: the slot's copy is in the stream.
  fa_status recorded = ring->used(slot, stream, streamId);
  if (launched)
    return fail(launched, launchError);
  if (recorded)
    return recorded;
  return succeed();
}

} // namespace

namespace fa::runtime {

fa_status fail(fa_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

fa_status succeed() {
  lastError.clear();
  return FA_SUCCESS;
}

} // namespace fa::runtime

fa_bundle::~fa_bundle() {
  // The map rings wait for the launches that read them.
  mapRings.clear();
  // Unloading needs the context alive; a context already destroyed took its
  // modules with it, so failures here are harmless.
  for (const LoadedModule &m : modules)
    cuModuleUnload(m.module);
}

struct fa_module {
  CUmodule module = nullptr;
};

namespace {
/// fa_attention_{forward,backward}_tensor_maps: the launch's checks, then the
/// maps the kernel would be given, copied out.
template <typename Args>
fa_status tensorMapsOut(const char *api, const fa_kernel *kernel,
                        const Args *args,
                        fa_status (*check)(const fa_kernel *, const Args *),
                        fa_tensor_map_args out[FA_MAX_TENSOR_MAPS],
                        int32_t *count) {
  if (!out || !count)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + "_tensor_maps: null argument");
  *count = 0;
  if (fa_status s = check(kernel, args))
    return s;
  std::vector<fa_tensor_map_args> maps;
  std::string err = tensorMapArgs(kernel->config, *args, maps);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  std::copy(maps.begin(), maps.end(), out);
  *count = static_cast<int32_t>(maps.size());
  return succeed();
}
} // namespace

extern "C" {

const char *fa_last_error(void) { return lastError.c_str(); }

const char *fa_status_string(fa_status status) {
  switch (status) {
  case FA_SUCCESS:
    return "success";
  case FA_ERROR_INVALID_ARGUMENT:
    return "invalid argument";
  case FA_ERROR_NOT_FOUND:
    return "not found";
  case FA_ERROR_IO:
    return "I/O error";
  case FA_ERROR_BAD_MANIFEST:
    return "bad manifest";
  case FA_ERROR_CUDA:
    return "CUDA error";
  case FA_ERROR_UNSUPPORTED:
    return "unsupported";
  }
  return "unknown status";
}

const char *fa_dtype_name(fa_dtype dtype) {
  switch (dtype) {
  case FA_DTYPE_F16:
    return "f16";
  case FA_DTYPE_BF16:
    return "bf16";
  case FA_DTYPE_F32:
    return "f32";
  }
  return "<invalid dtype>";
}

fa_status fa_bundle_load(const char *dir, fa_bundle **out) {
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
}

void fa_bundle_free(fa_bundle *bundle) { delete bundle; }

int32_t fa_bundle_kernel_count(const fa_bundle *bundle) {
  return bundle ? static_cast<int32_t>(bundle->kernels.size()) : 0;
}

const fa_kernel *fa_bundle_kernel_at(const fa_bundle *bundle, int32_t index) {
  if (!bundle || index < 0 ||
      index >= static_cast<int32_t>(bundle->kernels.size()))
    return nullptr;
  return bundle->kernels[index].get();
}

fa_status fa_kernel_get_info(const fa_kernel *kernel, fa_kernel_info *out) {
  if (!kernel || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_kernel_get_info: null argument");
  const KernelConfig &c = kernel->config;
  *out = {c.tag.c_str(), c.targetName.c_str(),
          c.direction,   c.dtype,
          c.mask,        c.headDim,
          c.headDimV,    c.blockQ,
          c.blockKV,     c.warps,
          c.stages,      c.windowLeft,
          c.windowRight, !c.cubinPath.empty(),
          c.mma,         static_cast<int32_t>(c.tensorMaps.size()),
          c.dsplit,      c.deterministic,
          c.fwd.persistent};
  return succeed();
}

namespace {
/// Modeled cost of one query tile over nk keys, in key columns: each key
/// tile costs its block_kv columns plus a fixed per-tile overhead (the softmax
/// reductions, barriers and the ring handshake). A kernel with one CTA per
/// query tile pays its prologue and epilogue on top, which a persistent grid
/// overlaps with the previous tile, but a persistent grid runs each key tile
/// a little slower (it loses the hardware's balancing of unequal tiles and
/// L2 sharing). Fitted to the H200 wgmma forward (PERF.md): 32 to block_kv
/// 128 vs 192 at N = 1k..8k; 64 and 3% to persistent vs one-CTA kernels at
/// N = 512..16k, where a persistent kernel of the same tile wins up to ~12 key
/// tiles. With nk unknown (0) the cost per key decides (rows taken as long).
///
/// Under a causal mask (Nq taken as Nk) the average query tile reads
/// (Nk + block_q) / 2 keys; its diagonal tile is ragged, on average
/// (1 - gcd(block_q, block_kv) / block_kv) / 2 of a tile beyond the band, and
/// masked, half a tile's columns more. A persistent grid loses 6% per tile
/// there. Fitted to block_kv 128 vs 192 (both head dims: 128 up to 2k keys,
/// 192 from 4k) and persistent vs one-CTA tiles at D = 64 (persistent up to
/// 1k keys).
double keyLoopCost(const KernelConfig &c, int64_t nk) {
  constexpr double kTileOverheadKeys = 32, kCtaOverheadKeys = 64,
                   kPersistentTileFactor = 1.03,
                   kCausalPersistentTileFactor = 1.06, kMaskedTiles = 0.5;
  const bool causal =
      c.mask == FA_MASK_CAUSAL || c.mask == FA_MASK_CAUSAL_BOTTOM_RIGHT;
  double bkv = c.blockKV;
  double perTile =
      (bkv + kTileOverheadKeys) *
      (!c.fwd.persistent ? 1.0
       : causal          ? kCausalPersistentTileFactor
                         : kPersistentTileFactor);
  if (nk <= 0)
    return perTile / bkv;
  double cta = c.fwd.persistent ? 0 : kCtaOverheadKeys;
  if (!causal)
    return static_cast<double>((nk + c.blockKV - 1) / c.blockKV) * perTile +
           cta;
  double ragged = (1.0 - static_cast<double>(std::gcd(c.blockQ, c.blockKV)) /
                             bkv) /
                  2;
  double tiles = (static_cast<double>(nk) + c.blockQ) / (2 * bkv) + ragged;
  return tiles * perTile + cta + kMaskedTiles * bkv;
}

/// fa_kernel_find_for_keys over the bundle's deterministic kernels only, or
/// over the others only.
fa_status findKernel(const fa_bundle *bundle, const fa_kernel_query *query,
                     int64_t nk, bool deterministic, const fa_kernel **out);
} // namespace

fa_status fa_kernel_find(const fa_bundle *bundle, const fa_kernel_query *query,
                         const fa_kernel **out) {
  return findKernel(bundle, query, 0, false, out);
}

fa_status fa_kernel_find_for_keys(const fa_bundle *bundle,
                                  const fa_kernel_query *query, int64_t nk,
                                  const fa_kernel **out) {
  return findKernel(bundle, query, nk, false, out);
}

fa_status fa_kernel_find_deterministic(const fa_bundle *bundle,
                                       const fa_kernel_query *query,
                                       int64_t nk, const fa_kernel **out) {
  return findKernel(bundle, query, nk, true, out);
}

namespace {
fa_status findKernel(const fa_bundle *bundle, const fa_kernel_query *query,
                     int64_t nk, bool deterministic, const fa_kernel **out) {
  if (!bundle || !query || !out)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_kernel_find: null argument");
  if (nk < 0)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find_for_keys: nk is " + std::to_string(nk) +
                    "; expected the number of keys, or 0 if unknown");
  *out = nullptr;
  const fa_kernel_query &q = *query;
  if (q.mma != FA_MMA_ANY && q.mma != FA_MMA_SYNC && q.mma != FA_MMA_WGMMA)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_kernel_find: mma is " + std::to_string(q.mma) +
                    "; expected FA_MMA_ANY, FA_MMA_SYNC or FA_MMA_WGMMA");
  int dv = q.head_dim_v ? q.head_dim_v : q.head_dim;
  int cc = q.compute_capability;
  if (cc == 0) {
    if (fa_status s = initDriver())
      return s;
    CUdevice dev;
    CUresult r = cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
      return fail(FA_ERROR_CUDA,
                  cuMessage("cuCtxGetDevice", r) +
                      "; make a context current or set compute_capability");
    if (fa_status s = deviceCC(dev, cc))
      return s;
  }
  const fa_kernel *best = nullptr;
  int bestRank = 0;
  std::vector<std::string> matchingTargets;
  for (const auto &k : bundle->kernels) {
    const KernelConfig &c = k->config;
    if (c.direction != q.direction || c.dtype != q.dtype ||
        c.headDim != q.head_dim || c.headDimV != dv || c.mask != q.mask)
      continue;
    if (q.mask == FA_MASK_WINDOW &&
        (c.windowLeft != q.window_left || c.windowRight != q.window_right))
      continue;
    if (q.mma != FA_MMA_ANY && c.mma != q.mma)
      continue;
    if (c.deterministic != deterministic)
      continue;
    matchingTargets.push_back(c.targetName);
    int rank = kernelRank(c, cc, q.mma);
    // Kernels of one rank differ in their tiles or grid: take the cheapest.
    if (rank > bestRank ||
        (rank == bestRank && rank > 0 &&
         keyLoopCost(c, nk) < keyLoopCost(best->config, nk))) {
      best = k.get();
      bestRank = rank;
    }
  }
  std::string want = describe(q.direction, q.dtype, q.head_dim, dv, q.mask,
                              q.window_left, q.window_right, q.mma) +
                     (deterministic ? " (deterministic)" : "");
  if (best) {
    *out = best;
    return succeed();
  }
  if (!matchingTargets.empty()) {
    std::string targets;
    for (const std::string &t : matchingTargets)
      targets += (targets.empty() ? "" : ", ") + t;
    return fail(FA_ERROR_UNSUPPORTED,
                "bundle '" + bundle->dir + "' has " + want +
                    " only for targets " + targets +
                    ", none of which runs on sm_" + std::to_string(cc));
  }
  std::string have;
  for (const auto &k : bundle->kernels) {
    const KernelConfig &c = k->config;
    have += "\n  " +
            describe(c.direction, c.dtype, c.headDim, c.headDimV, c.mask,
                     c.windowLeft, c.windowRight,
                     c.mma == FA_MMA_WGMMA ? FA_MMA_WGMMA : FA_MMA_ANY) +
            (c.deterministic ? " (deterministic)" : "") + " (" +
            c.targetName + ")";
  }
  std::string hint;
  if (deterministic)
    hint = "; deterministic kernels are built with the 'det' config field "
           "(e.g. bwd:bf16:d128:causal:wgmma:det), for warp-specialised "
           "wgmma backwards only";
  return fail(FA_ERROR_NOT_FOUND,
              "bundle '" + bundle->dir + "' has no " +
                  (deterministic ? "deterministic " : "") + "kernel for " +
                  want + hint + "; it has:" + (have.empty() ? " none" : have));
}
} // namespace

fa_status fa_attention_forward_check(const fa_kernel *kernel,
                                     const fa_attention_args *args) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_attention_forward: kernel or args is null");
  std::string err = checkForward(kernel->config, *args);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_attention_forward: " + err);
  return succeed();
}

fa_status fa_attention_forward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count) {
  return tensorMapsOut("fa_attention_forward", kernel, args,
                       fa_attention_forward_check, out, count);
}

fa_status fa_attention_backward_check(const fa_kernel *kernel,
                                      const fa_attention_backward_args *args) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_attention_backward: kernel or args is null");
  std::string err = checkBackward(kernel->config, *args);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_attention_backward: " + err);
  return succeed();
}

fa_status fa_attention_forward(const fa_kernel *kernel,
                               const fa_attention_args *args, CUstream stream) {
  if (fa_status s = fa_attention_forward_check(kernel, args))
    return s;
  const fa_attention_args &a = *args;
  ContextScope scope;
  if (fa_status s = scope.enter(a.q.data))
    return s;
  if (fa_status s = checkPointers(tensorsOf(a), scope.device))
    return fail(s, "fa_attention_forward: " + lastError);
  if (fa_status s = checkStream(stream, scope.ctx))
    return fail(s, "fa_attention_forward: " + lastError);
  const KernelConfig &c = kernel->config;
  CUfunction f;
  if (fa_status s = getFunction(*kernel, c.fwd, scope.ctx, scope.device, f))
    return s;
  int32_t b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1],
          nq = a.q.shape[2], nk = a.k.shape[2];
  float scale = a.scale;
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, o = a.o.data,
              lse = a.lse.data;
  unsigned gx = ceilDiv(nq, c.blockQ), gy = h, gz = b;
  if (c.fwd.persistent) {
    // One CTA per SM walks the tiles (docs/ABI.md); never more CTAs than
    // tiles. The kernel counts tiles in 32 bits.
    uint64_t tiles = uint64_t(gx) * uint64_t(h) * uint64_t(b);
    if (tiles >= (uint64_t(1) << 31))
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "fa_attention_forward: " + std::to_string(tiles) +
                      " query tiles for a persistent grid; at most 2^31 - 1");
    int sms = 0;
    if (CUresult r = cuDeviceGetAttribute(
            &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, scope.device))
      return cuFail("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", r);
    gx = static_cast<unsigned>(std::min<uint64_t>(tiles, std::max(sms, 1)));
    gy = gz = 1;
  }
  if (c.tensorMaps.empty()) {
    void *params[] = {&q, &k, &v, &o, &lse, &b, &h, &hkv, &nq, &nk, &scale};
    if (fa_status s = launch(f, c.fwd, gx, gy, gz, stream, params))
      return s;
    return succeed();
  }

  std::vector<fa_tensor_map_args> mapArgs;
  std::string err = tensorMapArgs(c, a, mapArgs);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_attention_forward: " + err);
  // The kernel's map parameters follow the 11 of fa_fwd, then a persistent
  // grid's tile counter.
  void *params[11 + FA_MAX_TENSOR_MAPS + 1] = {&q, &k,   &v,  &o,  &lse,  &b,
                                               &h, &hkv, &nq, &nk, &scale};
  return launchWithMaps(
      *kernel, "fa_attention_forward", mapArgs, scope.ctx, f, c.fwd,
      {gx, gy, gz}, stream, params,
      c.fwd.persistent ? 11 + static_cast<int>(mapArgs.size()) : -1);
}

fa_status fa_attention_backward(const fa_kernel *kernel,
                                const fa_attention_backward_args *args,
                                CUstream stream) {
  if (fa_status s = fa_attention_backward_check(kernel, args))
    return s;
  const fa_attention_backward_args &a = *args;
  ContextScope scope;
  if (fa_status s = scope.enter(a.q.data))
    return s;
  if (fa_status s = checkPointers(tensorsOf(a), scope.device))
    return fail(s, "fa_attention_backward: " + lastError);
  if (fa_status s = checkStream(stream, scope.ctx))
    return fail(s, "fa_attention_backward: " + lastError);
  const KernelConfig &c = kernel->config;
  CUfunction pre, main, post;
  if (fa_status s =
          getFunction(*kernel, c.bwdPre, scope.ctx, scope.device, pre))
    return s;
  if (fa_status s = getFunction(*kernel, c.bwd, scope.ctx, scope.device, main))
    return s;
  if (fa_status s =
          getFunction(*kernel, c.bwdPost, scope.ctx, scope.device, post))
    return s;
  int32_t b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1],
          nq = a.q.shape[2], nk = a.k.shape[2];
  float scale = a.scale;
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, o = a.o.data,
              dO = a.d_o.data, lse = a.lse.data, delta = a.delta.data,
              dqAccum = a.dq_accum.data, dq = a.dq.data, dk = a.dk.data,
              dv = a.dv.data;
  void *preParams[] = {&o, &dO, &delta, &dqAccum, &b, &h, &nq};
  void *mainParams[] = {&q,  &k, &v, &dO,  &lse, &delta, &dqAccum, &dk,
                        &dv, &b, &h, &hkv, &nq,  &nk,    &scale};
  void *postParams[] = {&dqAccum, &dq, &b, &h, &nq};
  unsigned grids[3][3];
  backwardGrids(c, a, grids);
  auto grid = [&](const Entry &e, CUfunction f, unsigned *g, void **params) {
    return launch(f, e, g[0], g[1], g[2], stream, params);
  };
  if (fa_status s = grid(c.bwdPre, pre, grids[0], preParams))
    return s;
  if (c.tensorMaps.empty()) {
    if (fa_status s = grid(c.bwd, main, grids[1], mainParams))
      return s;
  } else {
    // The warp-specialised wgmma backward: its maps follow fa_bwd's 15.
    std::vector<fa_tensor_map_args> mapArgs;
    std::string err = tensorMapArgs(c, a, mapArgs);
    if (!err.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, "fa_attention_backward: " + err);
    void *params[15 + FA_MAX_TENSOR_MAPS + 1];
    std::copy(std::begin(mainParams), std::end(mainParams), params);
    // The deterministic kernel's semaphores: zeroed, used and freed in
    // stream order, so concurrent launches on other streams get their own.
    CUdeviceptr sems = 0;
    if (c.deterministic) {
      // Checked before launchWithMaps does, so that nothing is allocated
      // into a capture that is then rejected.
      if (fa_status s = rejectCapture("fa_attention_backward", c, stream))
        return s;
      uint64_t bytes = semaphoreBytes(a);
      if (CUresult r = cuMemAllocAsync(&sems, bytes, stream))
        return fail(FA_ERROR_CUDA,
                    "fa_attention_backward: " +
                        cuMessage("cuMemAllocAsync", r) + " for the " +
                        std::to_string(bytes) +
                        "-byte semaphore workspace of deterministic kernel '" +
                        c.tag + "'");
      if (CUresult r = cuMemsetD32Async(sems, 0, bytes / 4, stream)) {
        cuMemFreeAsync(sems, stream);
        return cuFail("cuMemsetD32Async", r);
      }
      params[c.semaphoreParam] = &sems;
    }
    fa_status launched = launchWithMaps(
        *kernel, "fa_attention_backward", mapArgs, scope.ctx, main, c.bwd,
        {grids[1][0], grids[1][1], grids[1][2]}, stream, params);
    if (sems) {
      // Freed whatever the launch did; its error, if any, is the one reported.
      std::string launchError = lastError;
      CUresult r = cuMemFreeAsync(sems, stream);
      if (launched)
        return fail(launched, launchError);
      if (r)
        return cuFail("cuMemFreeAsync", r);
    }
    if (launched)
      return launched;
  }
  if (fa_status s = grid(c.bwdPost, post, grids[2], postParams))
    return s;
  return succeed();
}

fa_status fa_attention_backward_tensor_maps(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count) {
  return tensorMapsOut("fa_attention_backward", kernel, args,
                       fa_attention_backward_check, out, count);
}

fa_status fa_attention_backward_grids(const fa_kernel *kernel,
                                      const fa_attention_backward_args *args,
                                      unsigned grids[3][3]) {
  if (fa_status s = fa_attention_backward_check(kernel, args))
    return s;
  if (!grids)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "fa_attention_backward_grids: grids is null");
  backwardGrids(kernel->config, *args, grids);
  return succeed();
}

fa_status fa_module_load_data(const void *image, size_t size, fa_module **out) {
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
}

fa_status fa_module_load_file(const char *path, fa_module **out) {
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
    return fail(s, lastError + " (from '" + path + "')");
  return s;
}

fa_status fa_module_get_function(fa_module *module, const char *name,
                                 CUfunction *out) {
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
}

fa_status fa_module_launch(CUfunction function, const unsigned grid[3],
                           const unsigned block[3], unsigned shared_bytes,
                           CUstream stream, void **params) {
  if (!function || !grid || !block)
    return fail(FA_ERROR_INVALID_ARGUMENT, "fa_module_launch: null argument");
  if (shared_bytes > kDefaultSharedLimit) {
    CUresult r = cuFuncSetAttribute(
        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        static_cast<int>(shared_bytes));
    if (r != CUDA_SUCCESS)
      return cuFail("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r);
  }
  CUresult r =
      cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                     block[2], shared_bytes, stream, params, nullptr);
  if (r != CUDA_SUCCESS)
    return cuFail("cuLaunchKernel", r);
  return succeed();
}

void fa_module_free(fa_module *module) {
  if (module && module->module)
    cuModuleUnload(module->module);
  delete module;
}

} // extern "C"
