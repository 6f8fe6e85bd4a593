//===- GpuCompiler.h - KernelConfig → PTX / cubin, cached -------*- C++ -*-===//
//
// Builds the attn IR of a config, runs fa's NVVM pipeline, serialises PTX
// through the NVVM target and assembles a cubin with ptxas. Results are
// cached in memory and on disk, keyed by config and compiler version; a disk
// entry whose content hash does not match is rebuilt.
//
//===----------------------------------------------------------------------===//

#ifndef FA_COMPILER_GPUCOMPILER_H
#define FA_COMPILER_GPUCOMPILER_H

#include "fa/Compiler/KernelConfig.h"
#include "fa/Conversion/KernelParamIndices.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mlir::fa {

/// The compiler version that keys caches and is written to manifests.
constexpr const char *kCompilerVersion = "fa 0.1.0";

/// The linker's build id of the binary holding the compiler (hex), or
/// "unknown": it changes whenever the compiler is rebuilt differently.
std::string compilerBuildId();
/// kCompilerVersion with the LLVM version and the build id: what
/// `fa-aot --version` prints and what keys caches of compiled kernels.
std::string compilerVersion();

/// One kernel entry point and its launch shape.
struct KernelEntry {
  std::string role; // fwd | bwd_pre | bwd | bwd_post
  std::string name;
  int64_t threads = 0;
  int64_t sharedBytes = 0;
  /// Launched on min(SMs, query tiles) CTAs (manifest "grid": "persistent")
  /// instead of one CTA per tile.
  bool persistent = false;
  /// Waits for the kernel before it in the stream (griddepcontrol.wait)
  /// before any access to memory, so the runtime may launch it with
  /// programmatic stream serialization (manifest "launch": "dependent").
  bool dependent = false;
};

/// A tensor its score_mod reads, passed after the other kernel parameters
/// (docs/ABI.md "mod_args"): element type (f32, f16, bf16, i32, i64), rank
/// and what each extent must be: a fixed size ("8191"), a problem size
/// ("batch", "heads", "kv_heads", "nq", "nk", "nq+nk-1") or "any".
struct ModArgInfo {
  std::string dtype;
  int64_t rank = 0;
  std::vector<std::string> dims;
};

/// A compiled config.
struct CompiledKernel {
  KernelConfig config;     // with defaults resolved
  std::string tag;
  std::vector<KernelEntry> entries;
  std::vector<ModArgInfo> modArgs; // in parameter order
  KernelParamIndices params;       // where fa_fwd's / fa_bwd's groups start
  std::string ptx;
  std::string cubin;       // empty when ptxas is missing
  int64_t registers = -1;  // from ptxas -v (max over entries)
  int64_t spillBytes = -1; // spill stores + loads (sum over entries)
  double mlirSeconds = 0, llvmSeconds = 0, ptxasSeconds = 0;
  bool fromCache = false;
};

struct GpuCompilerOptions {
  std::string cacheDir;    // empty: no disk cache
  std::string cudaToolkit; // empty: $CUDA_HOME or /usr/local/cuda
  bool runPtxas = true;
  /// A .mlir file of score_mod functions, each
  /// `func.func @name(%score: f32, %b: index, %h: index, %q: index,
  /// %kv: index) -> f32`, that configs name with "mod=<name>".
  std::string scoreModFile;
};

/// Compiles configs; thread-safe; keeps an in-memory cache.
class GpuCompiler {
public:
  explicit GpuCompiler(GpuCompilerOptions options);
  ~GpuCompiler();

  llvm::Expected<std::shared_ptr<const CompiledKernel>>
  compile(const KernelConfig &config);

  /// The attn IR of a config (one func with attn.attention on dynamic
  /// batch/heads/lengths), as text.
  static llvm::Expected<std::string> buildAttnIR(const KernelConfig &config);

private:
  /// `scoreModLibrary`: the text of options.scoreModFile where the config
  /// names a score_mod (read once by compile(), which keys the cache on it).
  llvm::Expected<CompiledKernel>
  compileUncached(const KernelConfig &config, llvm::StringRef scoreModLibrary);
  GpuCompilerOptions options;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const CompiledKernel>> memory;
};

} // namespace mlir::fa

#endif // FA_COMPILER_GPUCOMPILER_H
