//===- CpuRunner.h - compile and run attn IR on the host --------*- C++ -*-===//

#ifndef FA_COMPILER_CPURUNNER_H
#define FA_COMPILER_CPURUNNER_H

#include "fa/Pipelines/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
class ExecutionEngine;
} // namespace mlir

namespace mlir::fa {

/// A host array in f64, whatever the element type of the argument it feeds;
/// values are rounded to that type on the way in.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  int64_t numElements() const;
};

/// Element kinds the runner converts to and from. The integer kinds serve
/// index tensors a score_mod reads (mod_args); a double converts to them by
/// truncation toward zero. F8E4M3 is OCP e4m3 "FN" (f8E4M3FN): rounded to
/// nearest even and saturated to ±448, as cvt.rn.satfinite does.
enum class ElemKind { F16, BF16, F32, F64, I32, I64, F8E4M3 };

/// Rounds `v` to `kind` and back (what the kernel sees of an input).
double roundTo(ElemKind kind, double v);

/// One entry function of a module, lowered with fa-lower-to-llvm and JIT
/// compiled by MLIR's ExecutionEngine.
class CpuFunction {
public:
  struct Signature {
    std::vector<std::vector<int64_t>> argShapes, resultShapes; // -1: dynamic
    std::vector<ElemKind> argKinds, resultKinds;
  };

  /// Compiles `entry` of `module` (which is lowered in place). On failure the
  /// diagnostics have been reported and `error` says what failed.
  static std::unique_ptr<CpuFunction> compile(ModuleOp module, StringRef entry,
                                              const LowerToLLVMOptions &options,
                                              std::string &error);
  ~CpuFunction();

  const Signature &signature() const { return sig; }

  /// Checks `inputs` against the signature, runs, and returns the results
  /// (converted to f64). Returns false with `error` set on bad inputs.
  bool run(const std::vector<HostTensor> &inputs,
           std::vector<HostTensor> &results, std::string &error);

private:
  CpuFunction() = default;
  /// Checks dynamically shaped inputs against the ops' rules by verifying a
  /// copy of the source module with the entry's arguments made static.
  bool checkDynamicShapes(const std::vector<HostTensor> &inputs,
                          std::string &error);
  /// Checks the cu_seqlens inputs of varlen ops: offsets from 0 that never
  /// decrease and end at the packed tensor's token count.
  bool checkSequenceOffsets(const std::vector<HostTensor> &inputs,
                            std::string &error);

  std::string entry;
  Signature sig;
  OwningOpRef<ModuleOp> source; // the module before lowering
  std::unique_ptr<ExecutionEngine> engine;
};

/// Parses `source` as a module in a context set up with fa's dialects.
OwningOpRef<ModuleOp> parseModule(MLIRContext &context, StringRef source,
                                  StringRef bufferName = "<input>");

/// Reads a NumPy .npy file (f16, f32 or f64, little-endian, C order).
bool readNpy(const std::string &path, HostTensor &out, std::string &error);
/// Writes `t` as an f32 .npy file.
bool writeNpy(const std::string &path, const HostTensor &t, std::string &error);

} // namespace mlir::fa

#endif // FA_COMPILER_CPURUNNER_H
