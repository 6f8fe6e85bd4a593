//===- Internal.h - fa runtime internals ------------------------*- C++ -*-===//
//
// Types shared by the manifest parser, the argument validation, the kernel
// choice and the launcher, and the error reporting they all use. None of this
// needs a GPU; the CUDA driver calls are declared in Driver.h and
// TensorMaps.h.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_RUNTIME_INTERNAL_H
#define FA_LIB_RUNTIME_INTERNAL_H

#include "fa/Runtime/fa_runtime.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fa::runtime {

/// One launchable entry point of a kernel (fwd, bwd_pre, bwd, bwd_post).
struct Entry {
  std::string name;
  unsigned threads = 0;
  unsigned sharedBytes = 0;
  /// "grid": "persistent": min(SMs, query tiles) CTAs that walk the tiles,
  /// instead of (ceil(nq / block_q), heads, batch).
  bool persistent = false;
  /// "launch": "dependent": the entry waits for the kernel before it in the
  /// stream (griddepcontrol.wait) before it touches memory; launch() starts
  /// it with programmatic stream serialization where the driver allows.
  bool dependent = false;
};

/// A target such as "sm_90a": compute capability 90, arch-specific.
struct Target {
  int cc = 0;
  bool archSpecific = false;
};

/// Parses "sm_<digits>[a]"; false if malformed.
bool parseTarget(const std::string &text, Target &out);

/// Whether `name` can name a score_mod: a non-empty C identifier
/// ([A-Za-z_][A-Za-z0-9_]*), as a kernel's tag carries it (`_mod_<name>`).
bool isScoreModName(const std::string &name);

/// One CUtensorMap parameter of a kernel (manifest "tensor_maps"). The
/// global dims and strides follow from the tensor's shape; the rest is the
/// manifest's.
struct TensorMapSpec {
  std::string tensor; // "q", "k", "v" or "do" (backward)
  int param = 0;
  /// 3: (D, N, B·H) over a contiguous tensor; 4: (D, N, H, B) over the
  /// caller's strides (strided kernels, bundle version 7).
  int rank = 3;
  int box[4] = {0, 0, 0, 0}; // innermost first
  int swizzleBytes = 128;
  int l2PromotionBytes = 256; // 0 = none
  /// A paged kernel's map of a pool [pages, page_size, Hkv, D]: (D,
  /// page_size, Hkv, pages) over its strides.
  bool pool = false;
};

/// One tensor a kernel's score_mod reads (manifest "mod_args"): fwd and bwd
/// take its address and then its extents as i32 (docs/ABI.md).
struct ModArgSpec {
  fa_dtype dtype = FA_DTYPE_F32;
  int rank = 1;
  fa_extent extent[FA_MAX_RANK] = {};
  int64_t size[FA_MAX_RANK] = {}; // FA_EXTENT_FIXED only
};

struct KernelConfig {
  std::string tag;
  fa_direction direction = FA_DIRECTION_FWD;
  fa_dtype dtype = FA_DTYPE_BF16;
  int headDim = 0, headDimV = 0;
  int blockQ = 0, blockKV = 0, warps = 0, stages = 0;
  /// Registers per thread of the kernel's entries (ptxas; their maximum),
  /// or 0 where the manifest does not say: occupancy then assumes 256.
  int registers = 0;
  int dsplit = 1; // backward: CTAs per key block (column slices of dK/dV/dQ)
  fa_mask mask = FA_MASK_NONE;
  /// A window's sizes: compile-time ones, or, for a run-time window kernel
  /// found for a query's window (fa_bundle::windowView), the sizes it
  /// passes at windowParam; -1 is unbounded.
  int windowLeft = -1, windowRight = -1;
  /// Run-time window kernel (bundle version 17): fwd (bwd) takes the window
  /// sizes, i32 left and right, as its last two parameters from windowParam.
  bool windowRuntime = false;
  int windowParam = -1;
  std::string targetName;
  Target target;
  fa_mma mma = FA_MMA_SYNC;
  std::vector<TensorMapSpec> tensorMaps; // in parameter order
  /// The deterministic wgmma backward: fa_bwd takes its dQ semaphores at
  /// parameter semaphoreParam (after the tensor maps).
  bool deterministic = false;
  int semaphoreParam = -1;
  /// The score_mod function compiled into the kernel ("softcap30"); empty
  /// for plain attention. The kernel's parameters are the same either way.
  std::string scoreMod;
  /// The mask_mod function compiled into the kernel ("document"); empty for
  /// none. Its tensors are mod_args too, after the score_mod's.
  std::string maskMod;
  /// Split-KV decode kernel: fwd is the split forward, merge joins its
  /// partials; only fa_attention_forward_splitkv launches it.
  bool splitKv = false;
  /// Packed-GQA forward: a CTA's rows are the query heads of one key head
  /// (queryTiles, grid y = key heads).
  bool packGqa = false;
  /// A forward that takes the batch, head and row strides (i64, elements)
  /// of q, k, v and o as its last parameters, from strideParam (a split
  /// forward: q, k, v; its merge takes o's after heads and nq), so q, k, v
  /// and o may be any views with a unit last stride; or a backward whose
  /// fa_bwd takes those of q, k, v, do, dk and dv from strideParam, its
  /// fa_bwd_pre those of o and do (kBackwardPreStrideParam) and fa_bwd_post
  /// those of dq (kBackwardPostStrideParam). -1: contiguous only.
  int strideParam = -1;
  bool strided() const { return strideParam >= 0; }
  /// The score_mod's tensors, in parameter order from modArgParam (after
  /// every other parameter of fwd or bwd); empty for most kernels.
  std::vector<ModArgSpec> modArgs;
  int modArgParam = -1;
  /// Varlen forward (bundle version 10): packed [T, H, D] tensors, the
  /// sequences' offsets cu_seqlens_q, cu_seqlens_k at cuSeqlensParam and the
  /// one after it (after the strides); only fa_attention_forward_varlen
  /// launches it (Varlen.cpp).
  bool varlen = false;
  int cuSeqlensParam = -1;
  /// Block-sparse forward (bundle version 11): fwd takes a block mask and
  /// its head count at blockMaskParam (after the strides); blockMask and
  /// blockLists build one (fa_block_mask_build, docs/ABI.md), and since
  /// bundle version 23 blockOrder its grid order (empty name before: the
  /// mask then has no order arrays).
  bool blockSparse = false;
  int blockMaskParam = -1;
  /// fp8 forwards: the parameter of descale_q (descale_k, descale_v follow),
  /// after the tensor maps; -1 for other kernels.
  int descaleParam = -1;
  /// fp8 forwards with block descales (bundle version 21): the query and key
  /// rows one factor of descale_q [B,H,ceil(Nq/64)] and descale_k
  /// [B,Hkv,ceil(Nk/64)] covers (64); 0 for per-(batch, key head) descales
  /// and every other kernel.
  int descaleBlock = 0;
  /// Attention sinks (bundle version 13): fwd takes the sinks (f32 [H]) at
  /// sinksParam, its last parameter (a split-KV kernel's merge does, bundle
  /// version 15); a backward has the bwd_sink entry (d_sinks). Only the
  /// _sinks launches run these.
  bool sinks = false;
  int sinksParam = -1;
  /// Paged-KV split forward (bundle version 14): fwd takes the page table,
  /// seqused_k and the i32 max_pages, page_size, num_pages from
  /// pageTableParam (after the strides); only fa_attention_forward_paged
  /// launches it (Paged.cpp).
  bool paged = false;
  int pageTableParam = -1;
  /// A split forward whose module also holds fa_kv_append (entry
  /// "kv_append"), launched only by fa_kv_append (KvAppend.cpp).
  bool kvAppend = false;
  /// An f32 kernel that multiplies in TF32 (manifest "tf32"): chosen only
  /// by queries that allow it (fa_kernel_query.allow_tf32).
  bool tf32 = false;
  /// An fp8 forward whose module also holds the quantiser of inputs of this
  /// dtype (manifest "quantize"; entries quantAmax and quant), launched by
  /// fa_quantize (Quantize.cpp); `quantizer` false for the others.
  fa_dtype quantizeDtype = FA_DTYPE_F16;
  bool quantizer = false;
  Entry fwd, bwdPre, bwd, bwdPost, merge, blockMask, blockLists, blockOrder,
      bwdSink, append, quantAmax, quant;
  std::string ptxPath,
      cubinPath; // absolute-ish (bundle dir joined); may be empty
};

/// The first stride parameter of a strided backward's fa_bwd_pre (after o,
/// do, delta, dq_accum, batch, heads, nq) and fa_bwd_post (after dq_accum,
/// dq, batch, heads, nq); docs/ABI.md.
constexpr int kBackwardPreStrideParam = 7;
constexpr int kBackwardPostStrideParam = 5;
/// The first stride parameter of a strided split-KV kernel's fa_merge (after
/// o_part, lse_part, o, lse, rows, splits, heads, nq); docs/ABI.md.
constexpr int kMergeStrideParam = 8;

/// The batch, head and row strides (elements) of a strided kernel's
/// [B,H,N,D] tensors, in the order it takes them (docs/ABI.md): the values
/// a launch's parameter pointers point at.
struct StrideParams {
  int64_t values[6 * 3] = {};
  int count = 0;
  /// Appends t's batch, head and row strides.
  void add(const fa_tensor &t) {
    for (int i = 0; i < 3; ++i)
      values[count++] = t.strides[i];
  }
  /// Appends a paged pool's [num_pages, page_size, Hkv, E] strides as the
  /// kernel takes them: page, head, row.
  void addPages(const fa_tensor &t) {
    for (int i : {0, 2, 1})
      values[count++] = t.strides[i];
  }
  /// Points params[first], params[first + 1], ... at the values.
  void place(void **params, int first) {
    for (int i = 0; i < count; ++i)
      params[first + i] = &values[i];
  }
};

/// The mod_args of one call (the _ex entry points), as the caller gave them.
/// `checked` false: a query that does not launch (tensor maps, grids) and
/// so does not need them.
struct ModArgList {
  const fa_tensor *tensors = nullptr;
  int32_t count = 0;
  bool checked = true;
  static ModArgList unchecked() { return {nullptr, 0, false}; }
};

/// The mod_arg parameters of a launch: per mod_arg its address, then its
/// extents (i32), which the kernel parameter pointers point at.
struct ModArgParams {
  CUdeviceptr pointers[FA_MAX_MOD_ARGS] = {};
  int32_t extents[FA_MAX_MOD_ARGS * FA_MAX_RANK] = {};
  /// Most parameters all mod_args take (a pointer and 4 extents each).
  static constexpr int kMaxParams = FA_MAX_MOD_ARGS * (1 + FA_MAX_RANK);
  /// Points params[first], ... at the mod_args of valid (checked) `mods`.
  void place(void **params, int first, const ModArgList &mods) {
    int next = first;
    for (int i = 0; i < mods.count; ++i) {
      const fa_tensor &t = mods.tensors[i];
      pointers[i] = t.data;
      params[next++] = &pointers[i];
      for (int d = 0; d < t.rank; ++d) {
        extents[i * FA_MAX_RANK + d] = static_cast<int32_t>(t.shape[d]);
        params[next++] = &extents[i * FA_MAX_RANK + d];
      }
    }
  }
};

/// A run-time window kernel's sizes (KernelConfig::windowRuntime), bound by
/// the query it was found for, as fa_fwd's or fa_bwd's last parameters.
struct WindowParams {
  /// The parameters the sizes add to a launch's array.
  static constexpr int kMaxParams = 2;
  int32_t left = -1, right = -1;
  /// Points params[c.windowParam], params[c.windowParam + 1] at the sizes of
  /// kernel `c`; nothing for a kernel without run-time sizes.
  void place(void **params, const KernelConfig &c) {
    if (!c.windowRuntime)
      return;
    left = c.windowLeft, right = c.windowRight;
    params[c.windowParam] = &left;
    params[c.windowParam + 1] = &right;
  }
};

/// The attention sinks of one call (the _sinks entry points): sinks f32
/// [H] and a backward's d_sinks output f32 [H]; null members for a call
/// without sinks.
struct SinkArgs {
  const fa_tensor *sinks = nullptr;
  const fa_tensor *dSinks = nullptr;
  /// Whether the call is a _sinks launch (its pointers may still be null,
  /// which the checks refuse).
  bool called = false;
  bool given() const { return called; }
};

/// A module loaded into one context, shared by the kernels of a bundle that
/// name the same file.
struct LoadedModule {
  CUcontext ctx = nullptr;
  std::string path;
  CUmodule module = nullptr;
};

/// An entry's function in one context, with its shared-memory limit raised:
/// what every later launch of the entry in that context reuses.
struct LoadedFunction {
  CUcontext ctx = nullptr;
  const void *entry = nullptr; // the kernel config's Entry
  CUfunction function = nullptr;
};

} // namespace fa::runtime

struct fa_kernel {
  fa::runtime::KernelConfig config;
  fa_bundle *bundle = nullptr;
};

struct fa_bundle {
  std::string dir;
  std::vector<std::unique_ptr<fa_kernel>> kernels;
  mutable std::mutex mutex; // guards modules, functions and windowViews
  std::vector<fa::runtime::LoadedModule> modules;
  std::vector<fa::runtime::LoadedFunction> functions;
  /// Run-time window kernels bound to the sizes queries asked for, by
  /// (tag, left, right): what fa_kernel_find returns for them (owned here,
  /// like kernels; one KernelConfig each).
  mutable std::map<std::tuple<std::string, int, int>,
                   std::unique_ptr<fa_kernel>>
      windowViews;
  ~fa_bundle();

  /// `kernel` (a run-time window kernel of this bundle) with the window
  /// (left, right): one view per distinct window, made on first use.
  const fa_kernel *windowView(const fa_kernel &kernel, int left,
                              int right) const;
};

namespace fa::runtime {

/// Records `message` as the thread's last error and returns `status`.
fa_status fail(fa_status status, std::string message);
/// Clears the thread's last error and returns FA_SUCCESS.
fa_status succeed();
/// The thread's last error (fa_last_error).
const std::string &lastErrorMessage();
/// The handler of every C entry point (each is a function-try-block whose
/// `catch (...)` calls this): records the C++ exception in flight as the
/// thread's last error, naming `api`, and returns FA_ERROR_INTERNAL. Never
/// throws, even when there is no memory left for the message.
fa_status failFromException(const char *api) noexcept;
/// failFromException for an entry point returning `R`: its status, or for
/// the functions without one their "nothing" value (0, NULL).
template <typename R> R failedResult(const char *api) noexcept {
  fa_status status = failFromException(api);
  if constexpr (std::is_same_v<R, fa_status>)
    return status;
  else if constexpr (!std::is_void_v<R>)
    return R{};
}
/// Puts `prefix` before the thread's last error (the API call and kernel a
/// lower-level failure happened in) and returns `status`.
fa_status failWithPrefix(fa_status status, const std::string &prefix);

/// Runs `cleanUp` (returning an fa_status) after an operation that returned
/// `status`, which must happen whatever the operation did. The operation's
/// failure is the one reported, with its message, even if cleanUp fails too;
/// otherwise cleanUp's.
template <typename CleanUp>
fa_status cleanUpAfter(fa_status status, CleanUp cleanUp) {
  std::string message = lastErrorMessage();
  fa_status cleaned = cleanUp();
  if (status != FA_SUCCESS)
    return fail(status, std::move(message));
  return cleaned != FA_SUCCESS ? cleaned : succeed();
}

/// Parses a manifest's text; `dir` is joined to the module file names.
/// On failure returns FA_ERROR_BAD_MANIFEST with the reason in `error`.
fa_status parseManifest(const std::string &text, const std::string &dir,
                        std::vector<std::unique_ptr<fa_kernel>> &kernels,
                        std::string &error);

/// Whether a kernel built for its target can run on a device of compute
/// capability `cc`, and how well (higher is better; 0 = cannot run).
int targetRank(const KernelConfig &config, int cc);
/// targetRank for a query that asks for `want`: 0 for kernels of other
/// instructions; with FA_MMA_ANY, runnable wgmma kernels above all others.
int kernelRank(const KernelConfig &config, int cc, fa_mma want);

/// GPU-free checks of the launch arguments of a forward or a backward
/// kernel; "" if they are valid.
/// A checked call (mods.checked) must give sinks exactly when the kernel
/// has them (`sinks`: the _sinks launches).
std::string checkArguments(const KernelConfig &config,
                           const fa_attention_args &args,
                           const ModArgList &mods,
                           const SinkArgs &sinks = {});
/// A backward's `args` may be the dense view of a varlen call only with
/// `varlenView` (fa_attention_backward_varlen); a varlen kernel refuses
/// dense ones.
/// An fp8 backward takes `descales` (descale_q, _k, _v, _do;
/// fa_attention_backward_fp8), every other kernel none.
std::string checkArguments(const KernelConfig &config,
                           const fa_attention_backward_args &args,
                           const ModArgList &mods, const SinkArgs &sinks = {},
                           bool varlenView = false,
                           const fa_tensor *descales = nullptr);

/// The checks of `mods` against the kernel's mod_args and the sizes of
/// valid q and k (ModArgs.cpp); "" if they pass or are not `checked`.
std::string checkModArgs(const KernelConfig &config, const ModArgList &mods,
                         const fa_tensor &q, const fa_tensor &k);
/// "f32 [heads], f32 [heads, any]": the kernel's mod_args, for messages.
std::string describeModArgs(const KernelConfig &config);
/// The manifest's name of an extent ("heads", "nq+nk-1"), or nullptr.
const char *extentName(fa_extent extent);
/// Bytes of one element of `dtype`; 0 for an invalid one.
int64_t elementSize(fa_dtype dtype);

/// ceil(a / b) for a >= 0, b > 0.
inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Query tiles of a forward's grid x for q [B,H,Nq,D] and Hkv key heads:
/// ceil(Nq / block_q), or for a packed-GQA kernel ceil(Nq / n) with
/// n = max(block_q / G, 1) queries of each of the G = H / Hkv heads a tile
/// holds; its grid y is then Hkv, not H (docs/ABI.md).
inline int64_t queryTiles(const KernelConfig &c, int64_t h, int64_t hkv,
                          int64_t nq) {
  int64_t perTile = c.blockQ;
  if (c.packGqa && hkv > 0)
    perTile = std::max<int64_t>(c.blockQ / std::max<int64_t>(h / hkv, 1), 1);
  return ceilDiv(nq, perTile);
}
/// The heads of a forward's grid y: Hkv for a packed-GQA kernel, else H.
inline int64_t gridHeads(const KernelConfig &c, int64_t h, int64_t hkv) {
  return c.packGqa ? hkv : h;
}

/// The caller's workspace of a split-KV launch and its split count.
struct SplitKvWorkspace {
  CUdeviceptr workspace = 0;
  uint64_t bytes = 0;
  int32_t splits = 0;
};

/// GPU-free checks of a split-KV launch: the forward's, then the splits and
/// the workspace (size, 16-byte alignment, no overlap), then the sinks of a
/// kernel with sinks (given exactly then: `sinks`, the _sinks launch); ""
/// if valid.
std::string checkSplitKvArguments(const KernelConfig &config,
                                  const fa_attention_args &args,
                                  const SplitKvWorkspace &workspace,
                                  const ModArgList &mods,
                                  const SinkArgs &sinks = {});
/// Bytes of a split-KV workspace: o_part [S,B,H,Nq,Dv] and lse_part
/// [S,B,H,Nq], f32.
uint64_t splitKvWorkspaceBytes(int64_t b, int64_t h, int64_t nq, int64_t dv,
                               int64_t splits);
/// The workspace's first `bytes` as an f32 tensor, for the pointer checks.
fa_tensor splitKvWorkspaceTensor(CUdeviceptr workspace, uint64_t bytes);
/// The part of `w` that a split-KV (or paged) call of `a`'s sizes uses, as
/// splitKvWorkspaceTensor's view.
fa_tensor usedSplitKvWorkspace(const fa_attention_args &a,
                               const SplitKvWorkspace &w);

/// Checks and launches a backward: bwd_pre, a sink kernel's bwd_sink, bwd,
/// bwd_post.
/// A block-sparse kernel needs `blockMask`, any other refuses one.
fa_status launchBackward(const fa_kernel *kernel,
                         const fa_attention_backward_args *args,
                         const ModArgList &mods, const SinkArgs &sinks,
                         CUstream stream,
                         const fa_block_mask *blockMask = nullptr);

/// A varlen backward's sequences: its offsets (device pointers), their count
/// and the longest key sequence (the main kernel's grid x).
struct VarlenBatch {
  CUdeviceptr cuSeqlensQ = 0, cuSeqlensK = 0;
  int32_t batch = 0, maxSeqlenK = 0;
};
class ContextScope;
/// Launches a checked backward in the context of `scope`: its three entries
/// (and a sink kernel's bwd_sink); `args` is the dense view of a varlen
/// call with `varlen`, whose offsets and grid the main kernel then takes.
fa_status launchCheckedBackward(const fa_kernel &kernel,
                                const fa_attention_backward_args &args,
                                const ModArgList &mods, const SinkArgs &sinks,
                                const fa_block_mask *blockMask,
                                const VarlenBatch *varlen,
                                const ContextScope &scope, CUstream stream,
                                const fa_tensor *descales = nullptr);

/// The named tensors of an argument struct, for the device-side checks.
using NamedTensor = std::pair<const char *, const fa_tensor *>;
std::vector<NamedTensor> tensorsOf(const fa_attention_args &args);
/// The page table [B, max_pages] and seqused_k [B] of a paged launch as
/// i32 tensors, for the overlap and device checks.
struct PagedTables {
  fa_tensor pageTable, sequsedK;
};
/// q, k, v, o, lse, then page_table and seqused_k (held by `tables`).
std::vector<NamedTensor> tensorsOfPaged(const fa_attention_args &args,
                                        const fa_paged_kv &paged,
                                        PagedTables &tables);
/// The tensor maps of a paged launch (none for a cp.async kernel), after
/// the checks of the cache and the pools; "" if they pass.
std::string pagedTensorMapArgs(const KernelConfig &config,
                               const fa_attention_args &args,
                               const fa_paged_kv *paged,
                               std::vector<fa_tensor_map_args> &out);
/// GPU-free checks of a paged launch (fa_attention_forward_paged_check,
/// _check_ex with the mod_args `mods`; with `sinks` given,
/// fa_attention_forward_paged_sinks_check). A mod_arg's "nk" extent is the
/// page table's capacity, its "kv_heads" the pools' heads.
std::string
checkPagedArguments(const KernelConfig &config, const fa_attention_args &args,
                    const fa_paged_kv *paged, const SplitKvWorkspace &workspace,
                    const ModArgList &mods, const SinkArgs &sinks = {});
/// Whether a call gives sinks exactly when the kernel has them (calls that
/// launch nothing, mods unchecked, may omit them); "" if so.
std::string checkSinkKind(const KernelConfig &config, const ModArgList &mods,
                          const SinkArgs &sinks);
/// The sinks (and a backward's d_sinks) of valid q (its shape[1] the query
/// heads): f32 [H], contiguous, 16-byte aligned; the call's `outputs`
/// (d_sinks added) overlapping no other tensor of `all`.
std::string checkSinkTensors(const KernelConfig &config, const SinkArgs &sinks,
                             const fa_tensor &q,
                             const std::vector<NamedTensor> &all,
                             std::vector<const char *> outputs);
/// An fp8 forward's tensors: tensorsOf's, then descale_q, _k, _v.
std::vector<NamedTensor> tensorsOfFp8(const fa_attention_args &args,
                                      const fa_tensor descales[3]);
/// The checks of an fp8 forward (fa_attention_forward_fp8): those of a
/// plain forward with o in bf16, then the descale tensors.
std::string checkFp8Arguments(const KernelConfig &config,
                              const fa_attention_args &args,
                              const fa_tensor descales[3]);
std::vector<NamedTensor> tensorsOf(const fa_attention_backward_args &args);
/// An fp8 backward's tensors: tensorsOf's, then descale_q, _k, _v, _do.
std::vector<NamedTensor> tensorsOfFp8(const fa_attention_backward_args &args,
                                      const fa_tensor descales[4]);
/// Appends the call's mod_args, named "mod_args[i]".
inline void appendModArgs(std::vector<NamedTensor> &all,
                          const ModArgList &mods) {
  static const char *const kNames[FA_MAX_MOD_ARGS] = {
      "mod_args[0]", "mod_args[1]", "mod_args[2]", "mod_args[3]",
      "mod_args[4]", "mod_args[5]", "mod_args[6]", "mod_args[7]"};
  for (int i = 0; i < mods.count && i < FA_MAX_MOD_ARGS; ++i)
    all.push_back({kNames[i], &mods.tensors[i]});
}
/// tensorsOf with the call's mod_args ("mod_args[i]") after the others.
template <typename Args>
std::vector<NamedTensor> tensorsOf(const Args &args, const ModArgList &mods) {
  std::vector<NamedTensor> all = tensorsOf(args);
  appendModArgs(all, mods);
  return all;
}
/// tensorsOf with the mod_args and then the call's sinks and d_sinks.
template <typename Args>
std::vector<NamedTensor> tensorsOf(const Args &args, const ModArgList &mods,
                                   const SinkArgs &sinks) {
  std::vector<NamedTensor> all = tensorsOf(args, mods);
  if (sinks.sinks)
    all.push_back({"sinks", sinks.sinks});
  if (sinks.dSinks)
    all.push_back({"d_sinks", sinks.dSinks});
  return all;
}

/// Validate.cpp's single-tensor checks, for the varlen launch (Varlen.cpp):
/// checkTensor of a packed tensor with rows of `cols` elements (a strided
/// kernel's layout: any positive strides with a unit last one, distinct
/// elements for an `output`), or, with cols 0, of a contiguous one.
std::string checkTensorFor(const KernelConfig &c, const char *name,
                           const fa_tensor &t, fa_dtype dtype, int rank,
                           int64_t cols, bool output);
/// checkShape: "<name>.shape is [..], expected [..] (<meaning>)" or "".
std::string checkShapeFor(const char *name, const fa_tensor &t,
                          const std::vector<int64_t> &want,
                          const char *meaning);
std::string checkScaleValue(float scale);
/// No output of `outputs` overlaps another tensor of `all`; "" if none.
std::string checkOutputOverlap(const std::vector<NamedTensor> &all,
                               const std::vector<const char *> &outputs);

/// A launch grid: x, y, z.
using Grid = std::array<unsigned, 3>;

/// The grids of bwd_pre, bwd and bwd_post for valid (checkArguments)
/// arguments, as docs/ABI.md gives them.
std::array<Grid, 3> backwardGrids(const KernelConfig &config,
                                  const fa_attention_backward_args &args);

/// Bytes of the semaphore workspace of a deterministic backward launch:
/// one u32 per (batch, head, 64-row query tile).
uint64_t semaphoreBytes(const fa_attention_backward_args &args);

/// Bytes of a persistent forward's tile counter workspace (one u32).
constexpr uint64_t kTileCounterBytes = 4;

/// Bytes of a tensor (shape product times element size); 0 if malformed.
uint64_t tensorBytes(const fa_tensor &t);

/// The cuTensorMapEncodeTiled arguments of every map of `config` for valid
/// (checkArguments) arguments; "" on success, else what TMA cannot address.
std::string tensorMapArgs(const KernelConfig &config,
                          const fa_attention_args &args,
                          std::vector<fa_tensor_map_args> &out);
/// The same for a backward launch.
std::string tensorMapArgs(const KernelConfig &config,
                          const fa_attention_backward_args &args,
                          std::vector<fa_tensor_map_args> &out);

/// Checks and launches the forward of `kernel` (Launch.cpp): the plain,
/// _ex, _block_sparse and _sinks entry points. A block-sparse kernel needs
/// `blockMask`, any other refuses one; a kernel with sinks needs `sinks`.
fa_status launchForward(const fa_kernel *kernel, const fa_attention_args *args,
                        const ModArgList &mods, const fa_block_mask *blockMask,
                        const SinkArgs &sinks, CUstream stream);
/// Why `mask` cannot be the block mask of `config` for the call `args`
/// (empty: it can); BlockSparse.cpp.
std::string checkBlockMaskFor(const KernelConfig &config,
                              const fa_block_mask &mask,
                              const fa_attention_args &args);
/// The same for a backward launch; a block-sparse backward walks one mask
/// row per GQA group, so a per-head mask (mask_heads = heads) needs
/// heads = kv_heads.
std::string checkBlockMaskFor(const KernelConfig &config,
                              const fa_block_mask &mask,
                              const fa_attention_backward_args &args);
/// Why the presence of `blockMask` does not fit `kernel` (empty: it does).
std::string checkBlockMaskPresence(const fa_kernel &kernel,
                                   const fa_block_mask *blockMask);
/// The block mask's words as an i32 tensor (for checkPointers).
fa_tensor blockMaskTensor(const KernelConfig &config, const fa_block_mask &mask);

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_INTERNAL_H
