//===- KernelConfig.h - what selects one GPU kernel -------------*- C++ -*-===//

#ifndef FA_COMPILER_KERNELCONFIG_H
#define FA_COMPILER_KERNELCONFIG_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace mlir::fa {

/// One kernel of the config space: (direction, dtype, D, Dv, tiles, mask,
/// target). Zero tile fields take the per-head-dim defaults.
struct KernelConfig {
  std::string direction = "fwd"; // fwd | bwd
  std::string dtype = "bf16"; // bf16 | f16 | f32 | f8e4m3 (wgmma forward)
  int64_t headDim = 128;
  int64_t headDimV = 0; // 0: = headDim
  int64_t blockQ = 0, blockKV = 0, warps = 0, stages = 2;
  std::string mask = "none"; // none | causal | causal_bottom_right | window
  /// A window's sizes; a window without them ("window" alone) takes its
  /// sizes at run time: one kernel serves every window (-1: unbounded).
  int64_t windowLeft = -1, windowRight = -1;
  std::string target = "sm_90a";
  /// "mma_sync", or "wgmma" (the sm_90a TMA + warp-specialised forward).
  std::string mma = "mma_sync";
  /// "det": the deterministic warp-specialised wgmma backward (dQ summed in
  /// key-block order through a semaphore workspace; docs/ABI.md).
  bool deterministic = false;
  /// wgmma forward grid: "persistent", "blocks" (one CTA per query tile),
  /// or "" for the compiler's default (-fa-wgmma-persistent).
  std::string grid;
  /// "mod=<name>": the score_mod function @<name> of the compiler's
  /// score-mod library (GpuCompilerOptions::scoreModFile), applied to every
  /// score (fwd) and differentiated (bwd); empty: none. Part of the tag.
  std::string scoreMod;
  /// "maskmod=<name>": the mask_mod function @<name> of the same library
  /// ((b, h, q_idx, kv_idx: index, [tensors...]) -> i1), masking every
  /// element it returns false for; empty: none. Part of the tag.
  std::string maskMod;
  /// "splitkv": the mma.sync split-KV decode kernels (a split forward and a
  /// merge; the split count is a launch argument). Part of the tag.
  bool splitKv = false;
  /// "packgqa": the mma.sync forward with packed GQA rows. Part of the tag.
  bool packGqa = false;
  /// "varlen": the wgmma forward of a varlen batch (packed [T, H, D]
  /// tensors, cu_seqlens; docs/ABI.md). Part of the tag.
  bool varlen = false;
  /// "paged": the mma.sync split-KV forward over a paged KV cache (K, V
  /// pools of pages, a page table and seqused_k; docs/ABI.md "Paged KV
  /// cache"); needs "splitkv". Part of the tag (`_paged`).
  bool paged = false;
  /// "append": the split-KV forward's module also holds fa_kv_append, which
  /// writes new keys and values (rotary on the keys and q optional) into
  /// the cache before the decode (docs/ABI.md "Appending to a KV cache");
  /// needs "splitkv". Part of the tag (`_append`).
  bool kvAppend = false;
  /// "blocksparse": the wgmma forward of a mask_mod whose key loop runs over
  /// a block mask, with the entries that build it (docs/ABI.md "Block
  /// sparsity"). Part of the tag.
  bool blockSparse = false;
  /// "sinks": attention sinks, a logit per query head (f32 [H]) in every
  /// row's denominator; the forward takes them as its last parameter, the
  /// backward adds the d_sinks entry `bwd_sink` (docs/ABI.md). Part of the
  /// tag (`_sink`).
  bool sinks = false;
  /// "pw": the mma.sync forward with a producer warp filling the K/V ring
  /// (attn-gpu-warp-specialize). Part of the tag (`_pw`).
  bool producerWarp = false;
  /// "tma": with "pw" and "splitkv", the producer warp loads K/V by TMA
  /// (tensor maps as parameters). Part of the tag (`_tma`).
  bool tma = false;
  /// "tf32": f32 inputs multiplied in TF32, one MMA per product (opt-in,
  /// as PyTorch's allow_tf32); without it an f32 kernel takes three
  /// (3xTF32), as accurate as f32 math. Part of the tag (`_tf32`).
  bool tf32 = false;
  /// "blockscale": an fp8 forward whose Q and K descale factors are per 64
  /// rows ([B, H, ceil(Nq/64)], [B, Hkv, ceil(Nk/64)]; V's [B, Hkv]);
  /// manifest "descale_block": 64. Part of the tag (`_bs64`).
  bool blockScale = false;
  /// "quant=<bf16|f16|f32>": an fp8 forward whose module also holds the
  /// quantiser of inputs of that type (fa_quantize_amax, fa_quantize:
  /// attn.quantize on the GPU, Hadamard rotation optional); manifest
  /// "quantize". Part of the tag (`_quant<type>`).
  std::string quantize;
  /// Resolved by the compiler, never parsed: backward CTAs per key block,
  /// each owning a column slice of dK, dV and dQ (docs/ABI.md).
  int64_t dsplit = 1;

  /// Parses "fwd:bf16:d128:causal" with optional further fields
  /// "v64" (Dv), "bq64", "bkv64", "w4", "s2", "l128", "r0" (window), "sm_80",
  /// "wgmma" / "mma_sync", "det", "persistent" / "blocks", "mod=<name>",
  /// "maskmod=<name>",
  /// "splitkv", "packgqa", "varlen", "paged", "append", "blocksparse", "sinks",
  /// "pw", "tma", "tf32", "blockscale", "quant=<type>".
  static llvm::Expected<KernelConfig> parse(llvm::StringRef text);
  /// Whether the window's sizes are kernel parameters (no l/r fields).
  bool runtimeWindow() const { return mask == "window" && windowLeft < 0; }
  /// The canonical text form ("fwd:bf16:d128:...") used in cache keys.
  std::string str() const;
};

} // namespace mlir::fa

#endif // FA_COMPILER_KERNELCONFIG_H
