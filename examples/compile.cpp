//===- compile.cpp - Compile a kernel config with fa's C++ API --*- C++ -*-===//
//
// Usage: fa-example-compile <config> [<bundle dir>]
// Compiles one config (e.g. fwd:bf16:d64:causal) through fa::compiler,
// prints its tag, registers, spills and compile times, and writes it as a
// bundle when a directory is given (what fa-aot does for many configs).
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/Bundle.h"
#include "fa/Compiler/GpuCompiler.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir::fa;

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    llvm::errs() << "usage: fa-example-compile <config> [<bundle dir>]\n";
    return 2;
  }
  llvm::Expected<KernelConfig> config = KernelConfig::parse(argv[1]);
  if (!config) {
    llvm::errs() << toString(config.takeError()) << "\n";
    return 1;
  }
  GpuCompiler compiler(GpuCompilerOptions{});
  llvm::Expected<CompiledKernelRef> kernel = compiler.compile(*config);
  if (!kernel) {
    llvm::errs() << toString(kernel.takeError()) << "\n";
    return 1;
  }
  const CompiledKernel &k = **kernel;
  llvm::outs() << k.tag << ": " << k.ptx.size() << " bytes of PTX, "
               << k.cubin.size() << " of cubin, registers " << k.registers
               << ", spill bytes " << k.spillBytes << " (" << compilerVersion()
               << ")\n";
  if (argc == 3)
    if (llvm::Error e = writeBundle(argv[2], {*kernel})) {
      llvm::errs() << toString(std::move(e)) << "\n";
      return 1;
    }
  return 0;
}
