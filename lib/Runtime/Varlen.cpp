//===- Varlen.cpp - the varlen forward and backward and their checks -----===//
//
// A varlen batch packs B sequences along the token axis: q [Tq,H,D],
// k [Tk,Hkv,D], v [Tk,Hkv,Dv], o [Tq,H,Dv], lse [H,Tq]. Its kernel is the
// strided wgmma forward with one batch: the runtime views each packed tensor
// as [1,H,T,D] (the dense 4-D maps and strides, docs/ABI.md "Varlen wgmma
// forward"), passes B as the batch and the token totals as nq, nk, and
// cu_seqlens_q, cu_seqlens_k after the strides. Each CTA of the grid
// (ceil(max_seqlen_q / block_q), H, B) reads its own sequence's offsets.
// The backward (mma.sync) runs bwd_pre and bwd_post on the same view as one
// batch of Tq rows (Delta, dq_accum and dQ are per row) and bwd on the grid
// (ceil(max_seqlen_k / block_kv)·dsplit, Hkv, B) with the offsets.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"

#include <cstring>
#include <sstream>

using namespace fa::runtime;

namespace {

constexpr const char *kApi = "fa_attention_forward_varlen";
/// Grid y and z are limited to 65535 blocks.
constexpr int64_t kMaxGridYZ = 65535;
/// Parameters before the tensor maps (fa_fwd's 11).
constexpr int kForwardParams = 11;
/// A launch's maps, strides (q, k, v, o: 3 each), two cu_seqlens, the
/// sinks.
constexpr int kMaxParams = kForwardParams + FA_MAX_TENSOR_MAPS + 12 + 2 + 1 +
                           WindowParams::kMaxParams;

/// The packed tensors' sizes, from q, k and v.
struct PackedSizes {
  int64_t tq = 0, tk = 0, h = 0, hkv = 0, d = 0, dv = 0;
};

std::string shapeText(const fa_tensor &t) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < t.rank && i < FA_MAX_RANK; ++i)
    os << (i ? "," : "") << t.shape[i];
  os << ']';
  return os.str();
}

/// Checks one packed tensor: its dtype, rank, strides and alignment as
/// checkTensorFor does (`cols` 0: contiguous), then its shape `want`. A
/// tensor with no tokens (dimension `tokenDim` 0) addresses no memory: only
/// its dtype, rank and shape are checked, and its data may be null.
std::string checkPacked(const KernelConfig &c, const char *name,
                        const fa_tensor &t, fa_dtype dtype, int rank,
                        int tokenDim, int64_t cols, bool output,
                        const std::vector<int64_t> &want, const char *meaning) {
  if (t.rank == rank && t.shape[tokenDim] == 0) {
    if (t.dtype != dtype)
      return std::string(name) + ".dtype is " +
             (fa_dtype_name(t.dtype) ? fa_dtype_name(t.dtype) : "?") +
             ", expected " + fa_dtype_name(dtype);
  } else {
    std::string err = checkTensorFor(c, name, t, dtype, rank, cols, output);
    if (!err.empty())
      return err;
  }
  return checkShapeFor(name, t, want, meaning);
}

/// Checks q, k, v against each other and the kernel; fills `s`.
std::string checkInputs(const KernelConfig &c, const fa_tensor &q,
                        const fa_tensor &k, const fa_tensor &v,
                        PackedSizes &s) {
  std::string err;
  if (q.rank != 3 || k.rank != 3 || v.rank != 3)
    return "q, k and v must be packed [T,H,D] tensors (rank 3), got ranks " +
           std::to_string(q.rank) + ", " + std::to_string(k.rank) + ", " +
           std::to_string(v.rank);
  s = {q.shape[0], k.shape[0], q.shape[1], k.shape[1], q.shape[2], v.shape[2]};
  if (!(err = checkPacked(c, "q", q, c.dtype, 3, 0, c.headDim, false,
                          {s.tq, s.h, c.headDim},
                          "[Tq,H,D] with the kernel's head dim"))
           .empty())
    return err;
  if (s.h < 1 || s.h > kMaxGridYZ)
    return "q.shape " + shapeText(q) + " has " + std::to_string(s.h) +
           " heads; expected 1 to " + std::to_string(kMaxGridYZ) +
           " (the grid's y)";
  if (!(err = checkPacked(c, "k", k, c.dtype, 3, 0, c.headDim, false,
                          {s.tk, s.hkv, c.headDim}, "[Tk,Hkv,D] with D of q"))
           .empty())
    return err;
  if (s.hkv < 1 || s.h % s.hkv != 0)
    return "q has " + std::to_string(s.h) + " heads and k has " +
           std::to_string(s.hkv) +
           "; the query head count must be a multiple of the key head count";
  return checkPacked(c, "v", v, c.dtype, 3, 0, c.headDimV, false,
                     {s.tk, s.hkv, c.headDimV},
                     "[Tk,Hkv,Dv] with Tk, Hkv of k and the kernel's Dv");
}

/// The cu_seqlens arrays as i32 [batch + 1] tensors (pointer and overlap
/// checks).
fa_tensor offsetsTensor(CUdeviceptr data, int32_t batch) {
  fa_tensor t{};
  t.data = data;
  t.dtype = FA_DTYPE_I32;
  t.rank = 1;
  t.shape[0] = int64_t(batch) + 1;
  t.strides[0] = 1;
  return t;
}

/// Every tensor of the launch that addresses memory, with the offsets.
struct LaunchTensors {
  fa_tensor cuQ, cuK;
  std::vector<NamedTensor> all;
  LaunchTensors(const fa_attention_varlen_args &a, const SinkArgs &sinks)
      : cuQ(offsetsTensor(a.cu_seqlens_q, a.batch)),
        cuK(offsetsTensor(a.cu_seqlens_k, a.batch)) {
    for (auto [name, t] : std::initializer_list<NamedTensor>{
             {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}, {"lse", &a.lse}})
      if (tensorBytes(*t) != 0)
        all.push_back({name, t});
    all.push_back({"cu_seqlens_q", &cuQ});
    all.push_back({"cu_seqlens_k", &cuK});
    if (sinks.sinks)
      all.push_back({"sinks", sinks.sinks});
  }
};

/// What a valid call does: nothing (no query row or max_seqlen_q 0), fill
/// o and lse (no key), or launch the kernel.
enum class Work { None, Fill, Launch };

Work workOf(const fa_attention_varlen_args &a) {
  if (a.q.shape[0] == 0 || a.max_seqlen_q == 0)
    return Work::None;
  return a.k.shape[0] == 0 ? Work::Fill : Work::Launch;
}

/// [T,H,D] with strides (row, head, 1) as the dense kernel's [1,H,T,D]; the
/// batch stride, never stepped, is the tensor's extent (a multiple of the
/// row stride, so TMA's 16-byte rule holds).
fa_tensor batchOfOne(const fa_tensor &t) {
  fa_tensor v{};
  v.data = t.data;
  v.dtype = t.dtype;
  v.rank = 4;
  int64_t shape[4] = {1, t.shape[1], t.shape[0], t.shape[2]};
  int64_t strides[4] = {t.strides[0] * t.shape[0], t.strides[1], t.strides[0],
                        t.strides[2]};
  std::memcpy(v.shape, shape, sizeof shape);
  std::memcpy(v.strides, strides, sizeof strides);
  return v;
}

/// The dense forward's arguments the kernel sees (its maps and strides).
fa_attention_args denseView(const fa_attention_varlen_args &a) {
  fa_attention_args d{};
  d.q = batchOfOne(a.q);
  d.k = batchOfOne(a.k);
  d.v = batchOfOne(a.v);
  d.o = batchOfOne(a.o);
  d.lse = a.lse;
  d.scale = a.scale;
  return d;
}

/// The GPU-free checks; "" if the arguments are valid.
/// The checks of a varlen call's kernel kind, batch, longest sequence and
/// offsets pointers; "" if they pass.
std::string checkBatch(const KernelConfig &c, fa_direction direction,
                       int32_t batch, const char *maxName, int32_t maxSeqlen,
                       CUdeviceptr cuQ, CUdeviceptr cuK) {
  bool forward = direction == FA_DIRECTION_FWD;
  if (!c.varlen || c.direction != direction)
    return "kernel '" + c.tag + "' is not a varlen " +
           (forward ? "forward" : "backward") + "; find one with "
           "fa_kernel_find_varlen (fa-aot config field 'varlen')";
  if (batch < 1 || batch > kMaxGridYZ)
    return "batch is " + std::to_string(batch) + "; expected 1 to " +
           std::to_string(kMaxGridYZ) + " sequences (the grid's z)";
  if (maxSeqlen < 0)
    return std::string(maxName) + " is " + std::to_string(maxSeqlen) +
           "; expected the longest " + (forward ? "query" : "key") +
           " sequence's length (>= 0)";
  for (auto [name, p] :
       {std::pair{"cu_seqlens_q", cuQ}, std::pair{"cu_seqlens_k", cuK}})
    if (p == 0 || p % 4 != 0) {
      std::ostringstream os;
      os << name << " 0x" << std::hex << p << std::dec
         << " must be a non-null, 4-byte aligned device address of "
         << batch + 1 << " int32 offsets";
      return os.str();
    }
  return "";
}

/// `mods` unchecked: a call that launches nothing (maps, grid), which may
/// omit a sink kernel's sinks.
std::string checkVarlen(const KernelConfig &c,
                        const fa_attention_varlen_args &a,
                        const ModArgList &mods, const SinkArgs &sinks) {
  std::string err =
      checkBatch(c, FA_DIRECTION_FWD, a.batch, "max_seqlen_q", a.max_seqlen_q,
                 a.cu_seqlens_q, a.cu_seqlens_k);
  if (!err.empty() || !(err = checkSinkKind(c, mods, sinks)).empty())
    return err;
  PackedSizes s;
  if (!(err = checkInputs(c, a.q, a.k, a.v, s)).empty())
    return err;
  if (!(err = checkPacked(c, "o", a.o, c.dtype, 3, 0, c.headDimV, true,
                          {s.tq, s.h, s.dv}, "[Tq,H,Dv] from q and v"))
           .empty() ||
      !(err = checkPacked(c, "lse", a.lse, FA_DTYPE_F32, 2, 1, 0, true,
                          {s.h, s.tq}, "[H,Tq] from q"))
           .empty() ||
      !(err = checkScaleValue(a.scale)).empty())
    return err;
  // With sinks, their rules and the outputs' overlap with every tensor.
  LaunchTensors tensors(a, sinks);
  err = sinks.given()
            ? checkSinkTensors(c, sinks, a.q, tensors.all, {"o", "lse"})
            : checkOutputOverlap(tensors.all, {"o", "lse"});
  if (!err.empty())
    return err;
  switch (workOf(a)) {
  case Work::None:
    return "";
  case Work::Fill:
    if (a.o.strides[1] != s.dv)
      return "k has no tokens, so o is filled with zeros, which needs its "
             "heads adjacent in each row: o.strides[1] is " +
             std::to_string(a.o.strides[1]) + ", expected Dv = " +
             std::to_string(s.dv);
    return "";
  case Work::Launch:
    break;
  }
  std::vector<fa_tensor_map_args> maps;
  return tensorMapArgs(c, denseView(a), maps);
}

fa_status checkCall(const fa_kernel *kernel,
                    const fa_attention_varlen_args *args, const char *api,
                    const ModArgList &mods, const SinkArgs &sinks) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel or args is null");
  std::string err = checkVarlen(kernel->config, *args, mods, sinks);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return succeed();
}

Grid gridOf(const KernelConfig &c, const fa_attention_varlen_args &a) {
  if (workOf(a) != Work::Launch)
    return {0, 0, 0};
  return {static_cast<unsigned>((int64_t(a.max_seqlen_q) + c.blockQ - 1) /
                                c.blockQ),
          static_cast<unsigned>(a.q.shape[1]),
          static_cast<unsigned>(a.batch)};
}

/// Every row of lse [H, Tq] set to its head's sink, in stream order:
/// sinks[h] into each row's first column, then the filled columns copied
/// after themselves, doubling them (ceil(log2 Tq) + 1 copies).
fa_status fillWithSinks(const fa_tensor &lse, CUdeviceptr sinks,
                        CUstream stream) {
  size_t rows = static_cast<size_t>(lse.shape[1]);
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = sinks;
  copy.srcPitch = sizeof(float);
  copy.dstDevice = lse.data;
  copy.dstPitch = rows * sizeof(float);
  copy.WidthInBytes = sizeof(float);
  copy.Height = static_cast<size_t>(lse.shape[0]);
  for (size_t filled = 0; filled < rows;) {
    if (CUresult r = cuMemcpy2DAsync(&copy, stream))
      return cuFail("cuMemcpy2DAsync (lse = sinks)", r);
    filled += copy.WidthInBytes / sizeof(float);
    copy.srcDevice = lse.data;
    copy.srcPitch = copy.dstPitch;
    copy.dstDevice = lse.data + filled * sizeof(float);
    copy.WidthInBytes = std::min(filled, rows - filled) * sizeof(float);
  }
  return FA_SUCCESS;
}

/// Zeroes each token row of packed t [T, H, E] (its heads adjacent), in
/// stream order, in words of t's element size (the checks align its rows
/// to at least that).
CUresult zeroTokenRows(const fa_tensor &t, CUstream stream) {
  size_t elem = static_cast<size_t>(elementSize(t.dtype));
  size_t pitch = static_cast<size_t>(t.strides[0]) * elem;
  size_t width = static_cast<size_t>(t.shape[1] * t.shape[2]);
  size_t rows = static_cast<size_t>(t.shape[0]);
  if (elem == 4)
    return cuMemsetD2D32Async(t.data, pitch, 0, width, rows, stream);
  if (elem == 2)
    return cuMemsetD2D16Async(t.data, pitch, 0, width, rows, stream);
  return cuMemsetD2D8Async(t.data, pitch, 0, width * elem, rows, stream);
}

/// Every query row sees no key: O = 0, LSE = -inf (what the kernel writes
/// for such rows), or with sinks LSE = sinks[h], in stream order.
fa_status fillEmpty(const fa_attention_varlen_args &a, const SinkArgs &sinks,
                    CUstream stream) {
  if (CUresult r = zeroTokenRows(a.o, stream))
    return cuFail("cuMemsetD2D (o = 0)", r);
  if (sinks.given())
    return fillWithSinks(a.lse, sinks.sinks->data, stream);
  constexpr unsigned kMinusInfinity = 0xff800000u;
  if (CUresult r = cuMemsetD32Async(
          a.lse.data, kMinusInfinity,
          static_cast<size_t>(a.lse.shape[0] * a.lse.shape[1]), stream))
    return cuFail("cuMemsetD32Async (lse = -inf)", r);
  return FA_SUCCESS;
}

fa_status launchVarlen(const fa_kernel &kernel,
                       const fa_attention_varlen_args &a, const SinkArgs &sinks,
                       const ContextScope &scope, CUstream stream,
                       const char *api) {
  const KernelConfig &c = kernel.config;
  CUfunction f;
  if (fa_status s = kernelFunction(kernel, c.fwd, scope.ctx, scope.device, f))
    return s;
  fa_attention_args view = denseView(a);
  std::vector<fa_tensor_map_args> maps;
  std::string err = tensorMapArgs(c, view, maps);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  CUdeviceptr q = a.q.data, k = a.k.data, v = a.v.data, o = a.o.data,
              lse = a.lse.data, cuQ = a.cu_seqlens_q, cuK = a.cu_seqlens_k;
  // batch: the sequences; nq, nk: the token totals (docs/ABI.md).
  int32_t b = a.batch, h = static_cast<int32_t>(a.q.shape[1]),
          hkv = static_cast<int32_t>(a.k.shape[1]),
          nq = static_cast<int32_t>(a.q.shape[0]),
          nk = static_cast<int32_t>(a.k.shape[0]);
  float scale = a.scale;
  void *params[kMaxParams] = {&q, &k,   &v,  &o,  &lse, &b,
                              &h, &hkv, &nq, &nk, &scale};
  StrideParams strides;
  for (const fa_tensor *t : {&view.q, &view.k, &view.v, &view.o})
    strides.add(*t);
  strides.place(params, c.strideParam);
  params[c.cuSeqlensParam] = &cuQ;
  params[c.cuSeqlensParam + 1] = &cuK;
  CUdeviceptr sinksData = c.sinks ? sinks.sinks->data : 0;
  if (c.sinks)
    params[c.sinksParam] = &sinksData;
  WindowParams window;
  window.place(params, c);
  Grid grid = gridOf(c, a);
  return launchWithMaps(api, c.tag, maps, f, c.fwd, grid, stream, params);
}

/// fa_attention_forward_varlen{,_sinks} after the C API's guard.
fa_status forwardVarlen(const fa_kernel *kernel,
                        const fa_attention_varlen_args *args,
                        const SinkArgs &sinks, CUstream stream,
                        const char *api) {
  if (fa_status s = checkCall(kernel, args, api, ModArgList{}, sinks))
    return s;
  const fa_attention_varlen_args &a = *args;
  Work work = workOf(a);
  if (work == Work::None)
    return succeed();
  ContextScope scope;
  if (fa_status s = scope.enter(work == Work::Launch ? a.q.data : a.o.data))
    return s;
  LaunchTensors tensors(a, sinks);
  if (fa_status s =
          checkLaunchDevice(api, tensors.all, stream, scope.device, scope.ctx))
    return s;
  fa_status s = work == Work::Fill
                    ? fillEmpty(a, sinks, stream)
                    : launchVarlen(*kernel, a, sinks, scope, stream, api);
  if (s != FA_SUCCESS)
    return failWithPrefix(s, std::string(api) + ": ");
  return succeed();
}

//===----------------------------------------------------------------------===//
// The varlen backward: the mma.sync backward with one batch of all tokens
// for bwd_pre and bwd_post, and the sequences for bwd.
//===----------------------------------------------------------------------===//

constexpr const char *kBackwardApi = "fa_attention_backward_varlen";

/// A contiguous f32 [H,T(,D)] row-statistics tensor as the dense [1,H,T(,D)].
fa_tensor rowsOfOne(const fa_tensor &t) {
  fa_tensor v{};
  v.data = t.data;
  v.dtype = t.dtype;
  v.rank = t.rank + 1;
  v.shape[0] = 1;
  v.strides[0] = t.shape[0] * t.strides[0];
  for (int i = 0; i < t.rank; ++i)
    v.shape[i + 1] = t.shape[i], v.strides[i + 1] = t.strides[i];
  return v;
}

/// The dense backward's arguments the kernels see.
fa_attention_backward_args denseView(const fa_attention_backward_varlen_args &a) {
  fa_attention_backward_args d{};
  d.q = batchOfOne(a.q);
  d.k = batchOfOne(a.k);
  d.v = batchOfOne(a.v);
  d.o = batchOfOne(a.o);
  d.d_o = batchOfOne(a.d_o);
  d.dq = batchOfOne(a.dq);
  d.dk = batchOfOne(a.dk);
  d.dv = batchOfOne(a.dv);
  d.lse = rowsOfOne(a.lse);
  d.delta = rowsOfOne(a.delta);
  d.dq_accum = rowsOfOne(a.dq_accum);
  d.scale = a.scale;
  return d;
}

/// What a valid backward call does: nothing (no query and no key), zero dk
/// and dv (no query: no key gets a gradient), zero dq (no key: no query
/// gets one), or launch.
enum class BackwardWork { None, ZeroKeys, ZeroQueries, Launch };

BackwardWork backwardWorkOf(const fa_attention_backward_varlen_args &a) {
  if (a.q.shape[0] == 0)
    return a.k.shape[0] == 0 ? BackwardWork::None : BackwardWork::ZeroKeys;
  return a.k.shape[0] == 0 ? BackwardWork::ZeroQueries : BackwardWork::Launch;
}

/// The tensors of a varlen backward that address memory (with the sinks
/// and d_sinks of a _sinks call); `held` keeps the offsets' tensors.
std::vector<NamedTensor> backwardTensors(
    const fa_attention_backward_varlen_args &a, const SinkArgs &sinks,
    fa_tensor held[2] = nullptr) {
  std::vector<NamedTensor> all;
  for (auto [name, t] : std::initializer_list<NamedTensor>{
           {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}, {"d_o", &a.d_o},
           {"lse", &a.lse}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv},
           {"delta", &a.delta}, {"dq_accum", &a.dq_accum}})
    if (tensorBytes(*t) != 0)
      all.push_back({name, t});
  if (held) {
    held[0] = offsetsTensor(a.cu_seqlens_q, a.batch);
    held[1] = offsetsTensor(a.cu_seqlens_k, a.batch);
    all.push_back({"cu_seqlens_q", &held[0]});
    all.push_back({"cu_seqlens_k", &held[1]});
  }
  if (sinks.sinks)
    all.push_back({"sinks", sinks.sinks});
  if (sinks.dSinks)
    all.push_back({"d_sinks", sinks.dSinks});
  return all;
}

/// The GPU-free checks of a varlen backward; "" if valid.
std::string checkVarlenBackward(const KernelConfig &c,
                                const fa_attention_backward_varlen_args &a,
                                const SinkArgs &sinks) {
  std::string err = checkBatch(c, FA_DIRECTION_BWD, a.batch, "max_seqlen_k",
                               a.max_seqlen_k, a.cu_seqlens_q, a.cu_seqlens_k);
  PackedSizes s;
  if (!err.empty() || !(err = checkSinkKind(c, ModArgList{}, sinks)).empty() ||
      !(err = checkInputs(c, a.q, a.k, a.v, s)).empty())
    return err;
  struct Packed {
    const char *name;
    const fa_tensor &t;
    fa_dtype dtype;
    int rank, tokenDim;
    int64_t cols;
    bool output;
    std::vector<int64_t> shape;
    const char *meaning;
  };
  const Packed all[] = {
      {"o", a.o, c.dtype, 3, 0, c.headDimV, false, {s.tq, s.h, s.dv},
       "[Tq,H,Dv] from q and v"},
      {"d_o", a.d_o, c.dtype, 3, 0, c.headDimV, false, {s.tq, s.h, s.dv},
       "[Tq,H,Dv] from q and v"},
      {"lse", a.lse, FA_DTYPE_F32, 2, 1, 0, false, {s.h, s.tq},
       "[H,Tq] from q"},
      {"dq", a.dq, c.dtype, 3, 0, c.headDim, true, {s.tq, s.h, s.d},
       "the shape of q"},
      {"dk", a.dk, c.dtype, 3, 0, c.headDim, true, {s.tk, s.hkv, s.d},
       "the shape of k"},
      {"dv", a.dv, c.dtype, 3, 0, c.headDimV, true, {s.tk, s.hkv, s.dv},
       "the shape of v"},
      {"delta", a.delta, FA_DTYPE_F32, 2, 1, 0, true, {s.h, s.tq},
       "workspace [H,Tq] from q"},
      {"dq_accum", a.dq_accum, FA_DTYPE_F32, 3, 1, 0, true, {s.h, s.tq, s.d},
       "workspace [H,Tq,D] from q"}};
  for (const Packed &p : all)
    if (!(err = checkPacked(c, p.name, p.t, p.dtype, p.rank, p.tokenDim,
                            p.cols, p.output, p.shape, p.meaning))
             .empty())
      return err;
  fa_tensor offsets[2];
  if (sinks.given() &&
      !(err = checkSinkTensors(c, sinks, a.q, backwardTensors(a, sinks, offsets),
                               {"dq", "dk", "dv", "delta", "dq_accum"}))
           .empty())
    return err;
  if (backwardWorkOf(a) == BackwardWork::ZeroKeys &&
      (a.dk.strides[1] != s.d || a.dv.strides[1] != s.dv))
    return "q has no tokens, so dk and dv are filled with zeros, which needs "
           "their heads adjacent in each row: dk.strides[1] is " +
           std::to_string(a.dk.strides[1]) + " and dv.strides[1] is " +
           std::to_string(a.dv.strides[1]) + ", expected D = " +
           std::to_string(s.d) + " and Dv = " + std::to_string(s.dv);
  if (backwardWorkOf(a) == BackwardWork::ZeroQueries && a.dq.strides[1] != s.d)
    return "k has no tokens, so dq is filled with zeros, which needs its "
           "heads adjacent in each row: dq.strides[1] is " +
           std::to_string(a.dq.strides[1]) + ", expected D = " +
           std::to_string(s.d);
  if (backwardWorkOf(a) != BackwardWork::Launch)
    return "";
  // The dense view's checks: strides, alignment, overlap, the scale (the
  // kernel's sinks were checked above, with the offsets among the tensors;
  // varlen kernels take no mod_args).
  return checkArguments(c, denseView(a), ModArgList::unchecked(), SinkArgs{},
                        /*varlenView=*/true);
}

fa_status checkBackwardCall(const fa_kernel *kernel,
                            const fa_attention_backward_varlen_args *args,
                            const SinkArgs &sinks, const char *api) {
  if (!kernel || !args)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": kernel or args is null");
  std::string err = checkVarlenBackward(kernel->config, *args, sinks);
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return succeed();
}

/// dk = dv = 0 (no query) or dq = 0 (no key): rows of heads adjacent, one
/// 2-D memset each.
fa_status zeroGradients(std::initializer_list<const fa_tensor *> grads,
                        CUstream stream) {
  for (const fa_tensor *t : grads)
    if (CUresult r = zeroTokenRows(*t, stream))
      return cuFail("cuMemsetD2D (gradients = 0)", r);
  return FA_SUCCESS;
}

/// fa_attention_backward_varlen{,_sinks} after the C API's guard.
fa_status backwardVarlen(const fa_kernel *kernel,
                         const fa_attention_backward_varlen_args *args,
                         const SinkArgs &sinks, CUstream stream,
                         const char *api) {
  if (fa_status s = checkBackwardCall(kernel, args, sinks, api))
    return s;
  const fa_attention_backward_varlen_args &a = *args;
  BackwardWork work = backwardWorkOf(a);
  if (work == BackwardWork::None && !sinks.given())
    return succeed();
  ContextScope scope;
  if (fa_status s = scope.enter(a.q.data    ? a.q.data
                                : a.dk.data ? a.dk.data
                                            : sinks.dSinks->data))
    return s;
  fa_tensor offsets[2];
  if (fa_status s = checkLaunchDevice(api, backwardTensors(a, sinks, offsets),
                                      stream, scope.device, scope.ctx))
    return s;
  auto prefix = std::string(api) + ": ";
  if (work != BackwardWork::Launch) {
    fa_status s = FA_SUCCESS;
    if (work == BackwardWork::ZeroKeys)
      s = zeroGradients({&a.dk, &a.dv}, stream);
    else if (work == BackwardWork::ZeroQueries)
      s = zeroGradients({&a.dq}, stream);
    // No query, or no key (O = 0, so Delta = 0): d_sinks = 0.
    if (s == FA_SUCCESS && sinks.given())
      if (CUresult r = cuMemsetD32Async(sinks.dSinks->data, 0,
                                        size_t(sinks.dSinks->shape[0]), stream))
        s = cuFail("cuMemsetD32Async (d_sinks = 0)", r);
    if (s != FA_SUCCESS)
      return failWithPrefix(s, prefix);
    return succeed();
  }
  VarlenBatch batch{a.cu_seqlens_q, a.cu_seqlens_k, a.batch, a.max_seqlen_k};
  if (fa_status s = launchCheckedBackward(*kernel, denseView(a), ModArgList{},
                                          sinks, nullptr, &batch, scope,
                                          stream))
    return failWithPrefix(s, prefix);
  return succeed();
}

/// One offsets array against its total and longest sequence; "" if valid.
std::string checkOffsets(const char *name, const int32_t *cu, int32_t batch,
                         int64_t total, int32_t maxLength, const char *maxName) {
  std::ostringstream os;
  if (cu[0] != 0) {
    os << name << "[0] is " << cu[0] << "; the first sequence starts at 0";
    return os.str();
  }
  for (int32_t b = 0; b < batch; ++b) {
    int64_t length = int64_t(cu[b + 1]) - cu[b];
    if (length < 0) {
      os << name << "[" << b + 1 << "] = " << cu[b + 1] << " is below " << name
         << "[" << b << "] = " << cu[b] << ": offsets must not decrease";
      return os.str();
    }
    if (maxLength >= 0 && length > maxLength) {
      os << "sequence " << b << " has " << length << " tokens (" << name
         << "[" << b << "] = " << cu[b] << ", [" << b + 1
         << "] = " << cu[b + 1] << "), more than " << maxName << " = "
         << maxLength;
      return os.str();
    }
  }
  if (cu[batch] > total) {
    os << name << "[" << batch << "] = " << cu[batch]
       << " is past the packed tensor's " << total << " tokens";
    return os.str();
  }
  return "";
}

} // namespace

extern "C" {

fa_status fa_attention_forward_varlen_check(
    const fa_kernel *kernel, const fa_attention_varlen_args *args) try {
  return checkCall(kernel, args, "fa_attention_forward_varlen_check",
                   ModArgList{}, SinkArgs{});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_varlen_sinks_check(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    const fa_tensor *sinks) try {
  return checkCall(kernel, args, "fa_attention_forward_varlen_sinks_check",
                   ModArgList{}, SinkArgs{sinks, nullptr, true});
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_varlen_tensor_maps(
    const fa_kernel *kernel, const fa_attention_varlen_args *args,
    fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count) try {
  const char *api = "fa_attention_forward_varlen_tensor_maps";
  if (!out || !count)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": null argument");
  *count = 0;
  if (fa_status s =
          checkCall(kernel, args, api, ModArgList::unchecked(), SinkArgs{}))
    return s;
  if (workOf(*args) != Work::Launch)
    return succeed();
  std::vector<fa_tensor_map_args> maps;
  return mapsOut(api, tensorMapArgs(kernel->config, denseView(*args), maps),
                 maps, out, count);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_varlen_grid(const fa_kernel *kernel,
                                           const fa_attention_varlen_args *args,
                                           unsigned grid[3]) try {
  const char *api = "fa_attention_forward_varlen_grid";
  if (!grid)
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": grid is null");
  if (fa_status s =
          checkCall(kernel, args, api, ModArgList::unchecked(), SinkArgs{}))
    return s;
  Grid g = gridOf(kernel->config, *args);
  std::copy(g.begin(), g.end(), grid);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_varlen(const fa_kernel *kernel,
                                      const fa_attention_varlen_args *args,
                                      CUstream stream) try {
  return forwardVarlen(kernel, args, SinkArgs{}, stream, kApi);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_varlen_sinks(const fa_kernel *kernel,
                                            const fa_attention_varlen_args *args,
                                            const fa_tensor *sinks,
                                            CUstream stream) try {
  return forwardVarlen(kernel, args, SinkArgs{sinks, nullptr, true}, stream,
                       "fa_attention_forward_varlen_sinks");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_varlen_check(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args) try {
  return checkBackwardCall(kernel, args, SinkArgs{},
                           "fa_attention_backward_varlen_check");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_varlen_sinks_check(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    const fa_tensor *sinks, const fa_tensor *d_sinks) try {
  return checkBackwardCall(kernel, args, SinkArgs{sinks, d_sinks, true},
                           "fa_attention_backward_varlen_sinks_check");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_varlen(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    CUstream stream) try {
  return backwardVarlen(kernel, args, SinkArgs{}, stream, kBackwardApi);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_varlen_sinks(
    const fa_kernel *kernel, const fa_attention_backward_varlen_args *args,
    const fa_tensor *sinks, const fa_tensor *d_sinks, CUstream stream) try {
  return backwardVarlen(kernel, args, SinkArgs{sinks, d_sinks, true}, stream,
                        "fa_attention_backward_varlen_sinks");
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_varlen_check_seqlens(const int32_t *cu_seqlens_q,
                                  const int32_t *cu_seqlens_k, int32_t batch,
                                  int64_t total_q, int64_t total_k,
                                  int32_t max_seqlen_q,
                                  int32_t max_seqlen_k) try {
  const char *api = "fa_varlen_check_seqlens";
  if (!cu_seqlens_q || !cu_seqlens_k)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": cu_seqlens_q or cu_seqlens_k is null");
  if (batch < 1 || total_q < 0 || total_k < 0)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                std::string(api) + ": batch " + std::to_string(batch) +
                    ", total_q " + std::to_string(total_q) + ", total_k " +
                    std::to_string(total_k) +
                    "; expected batch >= 1 and totals >= 0");
  std::string err = checkOffsets("cu_seqlens_q", cu_seqlens_q, batch, total_q,
                                 max_seqlen_q, "max_seqlen_q");
  if (err.empty())
    err = checkOffsets("cu_seqlens_k", cu_seqlens_k, batch, total_k,
                       max_seqlen_k, "max_seqlen_k");
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
