//===- BlockSparse.cpp - Block masks and block-sparse kernels ---*- C++ -*-===//
//
// A block-sparse kernel's module has two more entries that build its block
// mask in caller-owned memory: block_mask classifies each (query block, key
// block) by evaluating the mask_mod, block_lists turns the classes into the
// count and index lists the forward walks, and their transposed lists
// (per key block) the backward walks (docs/ABI.md "Block sparsity").
// Everything here checks the mask's description before any launch.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <algorithm>
#include <sstream>

using namespace fa::runtime;

namespace {

constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxSize = (int64_t(1) << 31) - 1;

/// Why `kernel` cannot build or use block masks ("" if it can).
std::string checkKernel(const fa_kernel *kernel) {
  if (!kernel)
    return "kernel is null";
  if (!kernel->config.blockSparse)
    return "kernel '" + kernel->config.tag +
           "' is not block-sparse (fa_kernel_info.block_sparse is 0)";
  return "";
}

/// The i32 words of a block mask (BlockMask.h's layout), or -1 when a size
/// is out of range; `why` then says which.
int64_t blockMaskWords(const KernelConfig &c, int64_t batch, int64_t maskHeads,
                       int64_t nq, int64_t nk, std::string &why) {
  auto bad = [&](const char *name, int64_t v, const char *want) {
    why = std::string(name) + " is " + std::to_string(v) + "; expected " + want;
    return -1;
  };
  if (batch < 1 || batch > kMaxSize)
    return bad("batch", batch, "1 to 2^31 - 1");
  if (maskHeads < 1 || maskHeads > kMaxSize)
    return bad("mask_heads", maskHeads, "1 or the query head count");
  if (nq < 1 || nq > kMaxSize)
    return bad("nq", nq, "1 to 2^31 - 1");
  if (nk < 1 || nk > kMaxSize)
    return bad("nk", nk, "1 to 2^31 - 1");
  int64_t rows = batch * maskHeads;
  if (rows > kMaxGridYZ)
    return bad("batch * mask_heads", rows, "at most 65535 (a grid dimension)");
  int64_t nqb = ceilDiv(nq, c.blockQ), nkb = ceilDiv(nk, c.blockKV);
  if (nqb > kMaxGridYZ)
    return bad("ceil(nq / block_q)", nqb, "at most 65535 (a grid dimension)");
  // rows ≤ 2^16, nqb ≤ 2^16, nkb ≤ 2^24: the product stays below 2^59.
  // The grid order (kv_order, q_order) follows the classes where the kernel
  // has its builder (bundle version 23).
  int64_t lineWords = c.blockOrder.name.empty() ? 2 : 3;
  return rows * (lineWords * (nqb + nkb) + 5 * nqb * nkb);
}

/// Why `m` does not describe a usable block mask of `c` ("" if it does).
std::string checkMask(const KernelConfig &c, const fa_block_mask &m) {
  std::string why;
  if (m.heads < 1 || m.heads > kMaxSize)
    return "mask.heads is " + std::to_string(m.heads) +
           "; expected the query head count (1 to 2^31 - 1)";
  if (m.kv_heads < 1 || m.heads % m.kv_heads)
    return "mask.kv_heads is " + std::to_string(m.kv_heads) +
           "; expected a divisor of heads (" + std::to_string(m.heads) + ")";
  if (m.mask_heads != 1 && m.mask_heads != m.heads)
    return "mask.mask_heads is " + std::to_string(m.mask_heads) +
           "; expected 1 (one mask for every head) or heads (" +
           std::to_string(m.heads) + ")";
  int64_t words = blockMaskWords(c, m.batch, m.mask_heads, m.nq, m.nk, why);
  if (words < 0)
    return "mask." + why;
  if (!m.data || m.data % 4)
    return "mask.data is " + std::to_string(m.data) +
           "; expected a non-null 4-byte aligned device address";
  if (m.bytes < uint64_t(words) * 4)
    return "mask.bytes is " + std::to_string(m.bytes) + ", but the block mask "
           "of kernel '" + c.tag + "' for batch " + std::to_string(m.batch) +
           ", mask_heads " + std::to_string(m.mask_heads) + ", nq " +
           std::to_string(m.nq) + ", nk " + std::to_string(m.nk) + " needs " +
           std::to_string(words * 4) + " (fa_block_mask_bytes)";
  return "";
}

/// Shapes standing in for q and k where mod_args name problem sizes.
std::pair<fa_tensor, fa_tensor> problemShapes(const KernelConfig &c,
                                              const fa_block_mask &m) {
  fa_tensor q{}, k{};
  q.rank = k.rank = 4;
  int64_t qs[4] = {m.batch, m.heads, m.nq, c.headDim};
  int64_t ks[4] = {m.batch, m.kv_heads, m.nk, c.headDim};
  std::copy(qs, qs + 4, q.shape);
  std::copy(ks, ks + 4, k.shape);
  return {q, k};
}

fa_status invalid(const char *api, const std::string &why) {
  return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + why);
}

} // namespace

namespace fa::runtime {

/// Why the mask was not described for the call with these q and k ("" if
/// it was).
static std::string checkMaskShapes(const KernelConfig &c,
                                   const fa_block_mask &m, const fa_tensor &q,
                                   const fa_tensor &k) {
  std::string why = checkMask(c, m);
  if (!why.empty())
    return why;
  const int64_t call[5] = {q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                           k.shape[2]};
  const int64_t built[5] = {m.batch, m.heads, m.kv_heads, m.nq, m.nk};
  static const char *const kNames[5] = {"batch", "heads", "kv_heads", "nq",
                                        "nk"};
  for (int i = 0; i < 5; ++i)
    if (call[i] != built[i])
      return std::string("the block mask is for ") + kNames[i] + " " +
             std::to_string(built[i]) + ", the call has " + kNames[i] + " " +
             std::to_string(call[i]) + " (q.shape and k.shape)";
  return "";
}

std::string checkBlockMaskFor(const KernelConfig &c, const fa_block_mask &m,
                              const fa_attention_args &a) {
  return checkMaskShapes(c, m, a.q, a.k);
}

std::string checkBlockMaskFor(const KernelConfig &c, const fa_block_mask &m,
                              const fa_attention_backward_args &a) {
  std::string why = checkMaskShapes(c, m, a.q, a.k);
  if (why.empty() && m.mask_heads != 1 && m.heads != m.kv_heads)
    why = "mask.mask_heads is " + std::to_string(m.mask_heads) +
          " with heads " + std::to_string(m.heads) + " and kv_heads " +
          std::to_string(m.kv_heads) +
          "; the block-sparse backward walks one mask row per key head, so "
          "a per-head mask needs heads = kv_heads (use mask_heads 1 or the "
          "dense mask_mod backward)";
  return why;
}

std::string checkBlockMaskPresence(const fa_kernel &kernel,
                                   const fa_block_mask *blockMask) {
  if (kernel.config.blockSparse == (blockMask != nullptr))
    return "";
  return "kernel '" + kernel.config.tag +
         (blockMask ? "' is not block-sparse: launch it without a block mask"
                    : "' is block-sparse: launch it with its block mask "
                      "(the _block_sparse entry points)");
}

fa_tensor blockMaskTensor(const KernelConfig &c, const fa_block_mask &m) {
  std::string why;
  fa_tensor t{};
  t.data = m.data;
  t.dtype = FA_DTYPE_I32;
  t.rank = 1;
  t.shape[0] = blockMaskWords(c, m.batch, m.mask_heads, m.nq, m.nk, why);
  t.strides[0] = 1;
  return t;
}

} // namespace fa::runtime

extern "C" {

fa_status fa_block_mask_bytes(const fa_kernel *kernel, int64_t batch,
                              int64_t mask_heads, int64_t nq, int64_t nk,
                              uint64_t *bytes) try {
  constexpr const char *kApi = "fa_block_mask_bytes";
  if (!bytes)
    return invalid(kApi, "bytes is null");
  *bytes = 0;
  std::string why = checkKernel(kernel);
  if (!why.empty())
    return invalid(kApi, why);
  int64_t words =
      blockMaskWords(kernel->config, batch, mask_heads, nq, nk, why);
  if (words < 0)
    return invalid(kApi, why);
  *bytes = uint64_t(words) * 4;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_block_mask_build(const fa_kernel *kernel,
                              const fa_block_mask *mask,
                              const fa_tensor *mod_args, int32_t mod_arg_count,
                              CUstream stream) try {
  constexpr const char *kApi = "fa_block_mask_build";
  std::string why = checkKernel(kernel);
  if (why.empty() && !mask)
    why = "mask is null";
  if (!why.empty())
    return invalid(kApi, why);
  const KernelConfig &c = kernel->config;
  const fa_block_mask &m = *mask;
  if (!(why = checkMask(c, m)).empty())
    return invalid(kApi, why);
  ModArgList mods{mod_args, mod_arg_count};
  auto [q, k] = problemShapes(c, m);
  if (!(why = checkModArgs(c, mods, q, k)).empty())
    return invalid(kApi, why);

  ContextScope scope;
  if (fa_status s = scope.enter(m.data))
    return s;
  fa_tensor words = blockMaskTensor(c, m);
  std::vector<NamedTensor> tensors{{"mask.data", &words}};
  appendModArgs(tensors, mods);
  if (fa_status s =
          checkLaunchDevice(kApi, tensors, stream, scope.device, scope.ctx))
    return s;
  CUfunction classify, lists, order = nullptr;
  if (fa_status s = kernelFunction(*kernel, c.blockMask, scope.ctx,
                                   scope.device, classify))
    return s;
  if (fa_status s = kernelFunction(*kernel, c.blockLists, scope.ctx,
                                   scope.device, lists))
    return s;
  if (!c.blockOrder.name.empty())
    if (fa_status s = kernelFunction(*kernel, c.blockOrder, scope.ctx,
                                     scope.device, order))
      return s;

  CUdeviceptr data = m.data;
  int32_t sizes[4] = {static_cast<int32_t>(m.batch),
                      static_cast<int32_t>(m.mask_heads),
                      static_cast<int32_t>(m.nq), static_cast<int32_t>(m.nk)};
  void *params[5 + ModArgParams::kMaxParams] = {&data, &sizes[0], &sizes[1],
                                                &sizes[2], &sizes[3]};
  ModArgParams modParams;
  modParams.place(params, 5, mods);
  unsigned rows = static_cast<unsigned>(m.batch * m.mask_heads);
  unsigned nqb = static_cast<unsigned>(ceilDiv(m.nq, c.blockQ));
  unsigned nkb = static_cast<unsigned>(ceilDiv(m.nk, c.blockKV));
  if (fa_status s =
          launch(classify, c.blockMask, Grid{nkb, nqb, rows}, stream, params))
    return s;
  if (fa_status s = launch(lists, c.blockLists, Grid{nqb + nkb, rows, 1},
                           stream, params))
    return s;
  if (order)
    if (fa_status s = launch(order, c.blockOrder, Grid{2, rows, 1}, stream,
                             params))
      return s;
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_forward_block_sparse(const fa_kernel *kernel,
                                            const fa_attention_args *args,
                                            const fa_block_mask *mask,
                                            const fa_tensor *mod_args,
                                            int32_t mod_arg_count,
                                            CUstream stream) try {
  std::string why = checkKernel(kernel);
  if (why.empty() && !mask)
    why = "mask is null";
  if (!why.empty())
    return invalid("fa_attention_forward_block_sparse", why);
  return launchForward(kernel, args, ModArgList{mod_args, mod_arg_count}, mask,
                       {}, stream);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_block_sparse_check(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_block_mask *mask, const fa_tensor *mod_args,
    int32_t mod_arg_count) try {
  constexpr const char *kApi = "fa_attention_backward_block_sparse_check";
  std::string why = checkKernel(kernel);
  if (why.empty() && !mask)
    why = "mask is null";
  if (why.empty() && kernel->config.direction != FA_DIRECTION_BWD)
    why = "kernel '" + kernel->config.tag + "' is not a backward";
  if (!why.empty())
    return invalid(kApi, why);
  if (fa_status s = fa_attention_backward_check_ex(kernel, args, mod_args,
                                                   mod_arg_count))
    return s;
  if (!(why = checkBlockMaskFor(kernel->config, *mask, *args)).empty())
    return invalid(kApi, why);
  return succeed();
} catch (...) {
  return failedResult<fa_status>(__func__);
}

fa_status fa_attention_backward_block_sparse(
    const fa_kernel *kernel, const fa_attention_backward_args *args,
    const fa_block_mask *mask, const fa_tensor *mod_args,
    int32_t mod_arg_count, CUstream stream) try {
  std::string why = checkKernel(kernel);
  if (why.empty() && !mask)
    why = "mask is null";
  if (why.empty() && kernel->config.direction != FA_DIRECTION_BWD)
    why = "kernel '" + kernel->config.tag + "' is not a backward";
  if (!why.empty())
    return invalid("fa_attention_backward_block_sparse", why);
  return launchBackward(kernel, args, ModArgList{mod_args, mod_arg_count}, {},
                        stream, mask);
} catch (...) {
  return failedResult<fa_status>(__func__);
}

} // extern "C"
