//===- fa-compile-bench.cpp - Latency of the C++ JIT API ---------*- C++ -*-===//
//
// Usage: fa-compile-bench <cache dir> <config>...
// For each config, through GpuCompiler (the C++ JIT API): a cold compile
// (MLIR, LLVM and ptxas seconds, as the compiler measures them), an
// in-memory cache hit (the same compiler again; mean over 2000 calls) and a
// disk-cache hit (a fresh compiler on the same cache directory; median of
// 25). Prints one line per config; a benchmark, not a test.
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/GpuCompiler.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <vector>

using namespace mlir::fa;
using Clock = std::chrono::steady_clock;

static double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

static bool report(const char *what, llvm::Error e) {
  llvm::errs() << "fa-compile-bench: " << what << ": " << toString(std::move(e))
               << "\n";
  return false;
}

static bool bench(llvm::StringRef cacheDir, const KernelConfig &config) {
  GpuCompilerOptions options;
  options.cacheDir = cacheDir.str();
  GpuCompiler compiler(options);
  Clock::time_point t0 = Clock::now();
  auto cold = compiler.compile(config);
  if (!cold)
    return report("cold compile", cold.takeError());
  double coldSeconds = secondsSince(t0);
  const CompiledKernel &k = **cold;

  constexpr int memoryHits = 2000;
  t0 = Clock::now();
  for (int i = 0; i < memoryHits; ++i)
    if (auto hit = compiler.compile(config); !hit)
      return report("memory hit", hit.takeError());
  double memoryMicros = secondsSince(t0) / memoryHits * 1e6;

  std::vector<double> disk;
  for (int i = 0; i < 25; ++i) {
    GpuCompiler fresh(options);
    t0 = Clock::now();
    auto hit = fresh.compile(config);
    disk.push_back(secondsSince(t0) * 1e3);
    if (!hit)
      return report("disk hit", hit.takeError());
    if (!(*hit)->fromCache) {
      llvm::errs() << "fa-compile-bench: " << k.tag
                   << " was compiled again, not read from " << cacheDir << "\n";
      return false;
    }
  }
  std::nth_element(disk.begin(), disk.begin() + disk.size() / 2, disk.end());
  llvm::outs() << k.tag
               << llvm::format(": cold %.3f s (mlir %.3f + llvm %.3f = %.3f s, "
                               "ptxas %.3f s), memory hit %.2f us, disk hit "
                               "%.3f ms\n",
                               coldSeconds, k.mlirSeconds, k.llvmSeconds,
                               k.mlirSeconds + k.llvmSeconds, k.ptxasSeconds,
                               memoryMicros, disk[disk.size() / 2]);
  return true;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    llvm::errs() << "usage: fa-compile-bench <cache dir> <config>...\n";
    return 2;
  }
  bool ok = true;
  for (int i = 2; i < argc; ++i) {
    llvm::Expected<KernelConfig> config = KernelConfig::parse(argv[i]);
    ok = (config ? bench(argv[1], *config)
                 : report("config", config.takeError())) &&
         ok;
  }
  return ok ? 0 : 1;
}
