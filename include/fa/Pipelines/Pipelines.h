//===- Pipelines.h - fa's named pipelines and registration ------*- C++ -*-===//

#ifndef FA_PIPELINES_PIPELINES_H
#define FA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::fa {

/// Options of `fa-lower-to-llvm`.
struct LowerToLLVMOptions : public PassPipelineOptions<LowerToLLVMOptions> {
  PassOptions::Option<int64_t> blockQ{*this, "block-q",
                                      llvm::cl::desc("query rows per tile"),
                                      llvm::cl::init(64)};
  PassOptions::Option<int64_t> blockKV{*this, "block-kv",
                                       llvm::cl::desc("key rows per tile"),
                                       llvm::cl::init(64)};
  PassOptions::Option<bool> deterministic{
      *this, "deterministic",
      llvm::cl::desc("accumulate dQ in a fixed order over key blocks"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> keySplits{
      *this, "key-splits",
      llvm::cl::desc("forward: split the key range over this many workers "
                     "joined by attn.merge (attn-split-kv; 0: no split)"),
      llvm::cl::init(0)};
  PassOptions::Option<bool> packGqa{
      *this, "pack-gqa",
      llvm::cl::desc("forward: tile the query heads of one key head together "
                     "(attn-tile pack-gqa)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> incoherentQk{
      *this, "incoherent-qk",
      llvm::cl::desc("fp8: rotate Q and K by a Hadamard matrix before "
                     "attn.quantize (attn-incoherent-qk)"),
      llvm::cl::init(false)};
};

/// The attn rewrites down to linalg: recompute backward, online softmax,
/// tiling, decomposition, cleanup.
void buildAttnToLinalgPipeline(OpPassManager &pm,
                               const LowerToLLVMOptions &options);

/// attn.attention / attn.attention_backward on tensors → LLVM dialect for the
/// host (bufferised, loops, C interface wrappers for every public function).
void buildLowerToLLVMPipeline(OpPassManager &pm,
                              const LowerToLLVMOptions &options);

/// What `fa-lower-to-nvvm` leaves in its gpu.binary.
enum class BinaryFormat { Isa, Bin, Fatbin };

/// Options of `fa-lower-to-nvvm`.
struct LowerToNVVMOptions : public PassPipelineOptions<LowerToNVVMOptions> {
  PassOptions::Option<int64_t> blockQ{*this, "block-q",
                                      llvm::cl::desc("query rows per CTA (0: default)"),
                                      llvm::cl::init(0)};
  PassOptions::Option<int64_t> blockKV{*this, "block-kv",
                                       llvm::cl::desc("key rows per tile (0: default)"),
                                       llvm::cl::init(0)};
  PassOptions::Option<int64_t> warps{*this, "warps",
                                     llvm::cl::desc("warps per CTA (0: default)"),
                                     llvm::cl::init(0)};
  PassOptions::Option<int64_t> stages{*this, "stages",
                                      llvm::cl::desc("K/V shared buffers"),
                                      llvm::cl::init(2)};
  PassOptions::Option<std::string> target{
      *this, "target", llvm::cl::desc("sm_80, sm_90 or sm_90a"),
      llvm::cl::init("sm_90a")};
  PassOptions::Option<std::string> mma{
      *this, "mma", llvm::cl::desc("mma_sync, or wgmma (sm_90a forward)"),
      llvm::cl::init("mma_sync")};
  PassOptions::Option<bool> deterministic{
      *this, "deterministic",
      llvm::cl::desc("warp-specialised wgmma backward: bit-reproducible dQ "
                     "(key-block order behind semaphores)"),
      llvm::cl::init(false)};
  PassOptions::Option<std::string> grid{
      *this, "grid",
      llvm::cl::desc("wgmma forward: persistent, blocks, or empty (default)"),
      llvm::cl::init("")};
  PassOptions::Option<bool> splitKv{
      *this, "split-kv",
      llvm::cl::desc("mma.sync forward: split-KV decode kernels "
                     "(attn-split-kv; the split count is a run-time "
                     "argument)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> packGqa{
      *this, "pack-gqa",
      llvm::cl::desc("mma.sync forward: packed GQA (the query heads of one "
                     "key head in one CTA's rows)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> blockSparse{
      *this, "block-sparse",
      llvm::cl::desc("wgmma forward with a mask_mod: the key loop runs over "
                     "the blocks of a block mask (docs/ABI.md)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> kvAppend{
      *this, "kv-append",
      llvm::cl::desc("split-KV forward: also emit fa_kv_append (new keys "
                     "and values, rotary optional, into the cache)"),
      llvm::cl::init(false)};
  PassOptions::Option<std::string> quantize{
      *this, "quantize",
      llvm::cl::desc("fp8 forward: also emit fa_quantize_amax and "
                     "fa_quantize for inputs of this type (bf16, f16, f32)"),
      llvm::cl::init("")};
  PassOptions::Option<bool> producerWarp{
      *this, "producer-warp",
      llvm::cl::desc("mma.sync forward: one more warp copies K/V into the "
                     "ring, signalled on mbarriers"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> tma{
      *this, "tma",
      llvm::cl::desc("split-KV forward with a producer warp: K/V loaded by "
                     "TMA from tensor maps (sm_90a)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> tf32{
      *this, "tf32",
      llvm::cl::desc("f32 inputs: one TF32 MMA per product (else three, "
                     "3xTF32, as accurate as f32)"),
      llvm::cl::init(false)};
  PassOptions::Option<int> optLevel{*this, "opt-level",
                                    llvm::cl::desc("LLVM optimisation level"),
                                    llvm::cl::init(3)};
  // An enum, so that any other value is a parse error, not a message from
  // gpu-module-to-binary that leaves the exit status 0.
  PassOptions::Option<BinaryFormat> format{
      *this, "format", llvm::cl::desc("gpu.binary format"),
      llvm::cl::init(BinaryFormat::Isa),
      llvm::cl::values(
          clEnumValN(BinaryFormat::Isa, "isa", "PTX text"),
          clEnumValN(BinaryFormat::Bin, "bin", "a cubin (runs ptxas)"),
          clEnumValN(BinaryFormat::Fatbin, "fatbin",
                     "a fatbin (runs ptxas and fatbinary)"))};
  PassOptions::Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit (libdevice, ptxas); default $CUDA_HOME or /usr/local/cuda"),
      llvm::cl::init("")};
};

/// `fa-attn-to-gpu`: attn ops → their kernel plans (attn-gpu-plan) → the
/// tiled loops of the seed passes (attn-recompute-backward,
/// attn-online-softmax, attn-split-kv for a split-KV plan, attn-tile) → gpu.module kernels (convert-attn-to-gpu).
void buildAttnToGPUPipeline(OpPassManager &pm,
                            const LowerToNVVMOptions &options);

/// attn ops → gpu.module kernels in the NVVM/LLVM dialects with an NVVM
/// target attached (everything of `fa-lower-to-nvvm` but serialisation).
void buildAttnToNVVMDialectPipeline(OpPassManager &pm,
                                    const LowerToNVVMOptions &options);

/// `fa-lower-to-nvvm`: the above, then PTX (or cubin) in a gpu.binary.
void buildLowerToNVVMPipeline(OpPassManager &pm,
                              const LowerToNVVMOptions &options);

/// The CUDA toolkit: $CUDA_HOME, $CUDA_ROOT, $CUDA_PATH or /usr/local/cuda.
std::string defaultCudaToolkit();

/// NVVM target features (PTX ISA version) for a chip.
std::string ptxFeaturesFor(llvm::StringRef target);

/// GPU, NVGPU, NVVM, vector dialects, the NVVM target and translations.
void registerGPUDialects(DialectRegistry &registry);

/// Registers attn-gpu-plan, convert-attn-to-gpu, fa-attn-to-gpu and
/// fa-lower-to-nvvm.
void registerNVVMPipeline();

/// Dialects and interface models that fa's tools and pipelines use.
void registerDialects(DialectRegistry &registry);

/// Registers fa's passes and named pipelines with the global registry.
void registerPassesAndPipelines();

} // namespace mlir::fa

#endif // FA_PIPELINES_PIPELINES_H
