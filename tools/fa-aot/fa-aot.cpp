//===- fa-aot.cpp - compile kernel configs into a bundle --------*- C++ -*-===//
//
// Compiles kernel configs and writes them as a bundle (docs/ABI.md,
// fa/Compiler/Bundle.h); prints each kernel's registers, spills, shared
// memory and compile times.
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/Bundle.h"
#include "fa/Compiler/GpuCompiler.h"
#include "fa/Conversion/AttnToGPU.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <optional>
#include <thread>

using namespace llvm;
using namespace mlir::fa;

static cl::OptionCategory aotOptions("fa-aot options");
static cl::list<std::string>
    configs("config", cl::cat(aotOptions),
            cl::desc("kernel config, e.g. fwd:bf16:d128:causal"));
static cl::opt<std::string>
    configFile("config-file", cl::cat(aotOptions),
               cl::desc("file with one config per line"));
static cl::opt<bool> defaults(
    "defaults", cl::cat(aotOptions),
    cl::desc("the default set: d in {64,128} x masks {none,causal} "
             "x fwd/bwd, as mma.sync and as sm_90a wgmma kernels, plus "
             "block_kv 192 wgmma forwards, 192-row d64 wgmma forwards, "
             "persistent-grid wgmma "
             "forwards for short rows (d128 maskless and causal, "
             "d64 causal), packed-GQA split-KV decode forwards (d64 and "
             "d128 maskless, 16- and 32-row tiles; d128 "
             "causal_bottom_right), run-time window kernels, and the "
             "deterministic wgmma backwards"));
static cl::opt<std::string> outDir("o", cl::cat(aotOptions),
                                   cl::desc("bundle directory"), cl::Required);
static cl::opt<std::string> cacheDir("cache-dir", cl::cat(aotOptions),
                                     cl::desc("disk cache (none by default)"));
static cl::opt<unsigned>
    jobs("j", cl::cat(aotOptions),
         cl::desc("configs compiled in parallel (0: one per hardware thread)"),
         cl::init(0));
static cl::opt<std::string>
    scoreMods("score-mods", cl::cat(aotOptions),
              cl::desc("a .mlir file of score_mod and mask_mod functions "
                       "that configs name with mod=<name> and "
                       "maskmod=<name>"),
              cl::value_desc("file"));

/// The configs of --defaults.
static std::vector<std::string> defaultConfigs() {
  std::vector<std::string> texts;
  for (const char *dir : {"fwd", "bwd"})
    for (const char *d : {"d64", "d128"})
      for (const char *m : {"none", "causal"})
        texts.push_back(std::string(dir) + ":bf16:" + d + ":" + m);
  // The d64 backward on 128-row query tiles (FA3's tile there; PERF.md,
  // 2026-12-07).
  for (const char *dir : {"fwd", "bwd"})
    for (const char *d : {"d64", "d128"})
      for (const char *m : {"none", "causal"})
        texts.push_back(std::string(dir) + ":bf16:" + d + ":" + m + ":wgmma" +
                        (std::string(dir) == "bwd" && std::string(d) == "d64"
                             ? ":bq128"
                             : ""));
  // Wider key tiles for the wgmma forward: fewer softmax rounds per key,
  // +4-8% from N = 2k on without a mask and from 4k on under a causal one
  // (PERF.md); the runtime takes them by Nk.
  for (const char *d : {"d64", "d128"})
    for (const char *m : {"none", "causal"})
      texts.push_back(std::string("fwd:bf16:") + d + ":" + m + ":wgmma:bkv192");
  // 192-row query tiles (three consumer warpgroups, FA3's tile for small
  // head dims) at d64: 1.01-1.04x the 128-row kernels from 2k keys on, with
  // and without a causal mask (PERF.md); the runtime takes them by Nk.
  for (const char *m : {"none", "causal"})
    texts.push_back(std::string("fwd:bf16:d64:") + m + ":wgmma:bq192");
  // Persistent-grid forwards where the default grid is one CTA per tile:
  // +4-14% for rows of at most ~1k keys (PERF.md); the runtime takes them
  // by Nk.
  texts.push_back("fwd:bf16:d128:none:wgmma:bkv176:persistent");
  texts.push_back("fwd:bf16:d64:causal:wgmma:persistent");
  texts.push_back("fwd:bf16:d128:causal:wgmma:persistent");
  // Decode with GQA (Nq < 64): the packed split-KV forwards, which read
  // each K/V block once per key head, 3x faster than the plain kernel at
  // 1 x 64k, 8 x 16k and 64 x 4k keys (PERF.md); fa.attention takes them
  // for GQA calls with short query rows. Without a mask a 32-row tile of
  // two warps: a decode step fills few rows, and the smaller tile is 9%
  // faster where the grid is full (64 x 4k) and equal elsewhere (PERF.md,
  // decode tile A/B); under the mask it spills (24 B), so 64 rows there.
  // Without a mask, K/V loaded by TMA from a producer warp: 0.94-1.02x the
  // cp.async kernel's time over the decode grid at d128, 0.83-0.95x at d64
  // where >= 64k keys are read (PERF.md, sixteenth session); d64 gets the
  // packed kernel too. Beside them a 16-row tile of one consumer warp,
  // which the runtime takes where a key head's rows fit 16 (one query row of
  // up to 16 heads, four of 4): 0.54-1.02x the 32-row tile's time there
  // (PERF.md, eighteenth session).
  for (const char *d : {"d128", "d64"})
    for (const char *tile : {"bq32:w2", "bq16:w1"})
      texts.push_back(std::string("fwd:bf16:") + d +
                      ":none:packgqa:splitkv:" + tile + ":pw:tma");
  texts.push_back("fwd:bf16:d128:causal_bottom_right:packgqa:splitkv");
  // Sliding windows of any size (-1: unbounded side), given at run time:
  // one kernel per direction and head dim serves every window (PERF.md);
  // the runtime prefers a kernel compiled for the query's exact window.
  for (const char *dir : {"fwd", "bwd"})
    for (const char *d : {"d64", "d128"})
      texts.push_back(std::string(dir) + ":bf16:" + d + ":window:wgmma");
  // The deterministic backward, chosen only on request
  // (fa_kernel_find_deterministic).
  for (const char *d : {"d64", "d128"})
    for (const char *m : {"none", "causal"})
      texts.push_back(std::string("bwd:bf16:") + d + ":" + m + ":wgmma:det");
  return texts;
}

/// Appends the configs of a --config-file (one per line, # comments).
static bool readConfigFile(StringRef path, std::vector<std::string> &texts) {
  // Not a device or a pipe that never ends (/dev/zero), nor a huge file.
  sys::fs::file_status status;
  if (std::error_code ec = sys::fs::status(path, status)) {
    errs() << "fa-aot: cannot read --config-file " << path << ": "
           << ec.message() << "\n";
    return false;
  }
  if (!sys::fs::is_regular_file(status) || status.getSize() > (1u << 20)) {
    errs() << "fa-aot: expected --config-file to name a regular file of at "
              "most 1 MiB, got "
           << path << "\n";
    return false;
  }
  auto buf = MemoryBuffer::getFile(path);
  if (!buf) {
    errs() << "fa-aot: cannot read --config-file " << path << ": "
           << buf.getError().message() << "\n";
    return false;
  }
  size_t before = texts.size();
  SmallVector<StringRef> lines;
  (*buf)->getBuffer().split(lines, '\n', -1, false);
  for (StringRef l : lines)
    if (!l.trim().empty() && !l.trim().starts_with("#"))
      texts.push_back(l.trim().str());
  if (texts.size() == before) {
    errs() << "fa-aot: --config-file " << path
           << " holds no configs (only blank lines and # comments)\n";
    return false;
  }
  return true;
}

/// Checks before compiling that -o can become the bundle directory: an
/// existing directory we may write into, or a path whose nearest existing
/// ancestor is one.
static bool checkOutputDir(StringRef dir) {
  auto fail = [&](const Twine &why) {
    errs() << "fa-aot: cannot write the bundle to -o '" << dir << "': " << why
           << "\n";
    return false;
  };
  if (dir.empty())
    return fail("the path is empty");
  SmallString<256> existing(dir);
  while (!sys::fs::exists(existing)) {
    StringRef parent = sys::path::parent_path(existing);
    existing = parent.empty() ? StringRef(".") : parent;
  }
  if (!sys::fs::is_directory(existing))
    return fail(existing == dir ? Twine("it exists and is not a directory")
                                : "'" + existing + "' is not a directory");
  if (sys::fs::access(existing, sys::fs::AccessMode::Write))
    return fail("'" + existing + "' is not writable");
  return true;
}

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions({&aotOptions, &codegenOptionCategory()});
  // The JIT of python/fa keys its disk cache by this line.
  cl::SetVersionPrinter(
      [](raw_ostream &os) { os << "fa-aot " << compilerVersion() << "\n"; });
  cl::ParseCommandLineOptions(
      argc, argv,
      "fa ahead-of-time kernel compiler: configs -> a bundle (manifest.json, "
      "<tag>.ptx, <tag>.cubin, fa_bundle.h)\n\n"
      "  config = direction:dtype:dHEAD[:vHEAD_V]:mask[:lLEFT:rRIGHT]"
      "[:mma][:bqN][:bkvN][:wN][:sN][:sm_XX][:det][:persistent|blocks]"
      "[:mod=NAME][:maskmod=NAME]\n"
      "    fwd:bf16:d128:causal            mma.sync forward, sm_90a\n"
      "    bwd:f16:d64:none:wgmma          sm_90a wgmma backward\n"
      "    fwd:bf16:d128:none:wgmma:bkv192 a wider key tile\n"
      "    fwd:bf16:d96:window:l128:r0     a sliding window\n"
      "    fwd:bf16:d128:causal:mod=softcap30 --score-mods mods.mlir\n"
      "    fwd:bf16:d128:causal:maskmod=document --score-mods mods.mlir\n");
  std::vector<std::string> texts(configs.begin(), configs.end());
  if (defaults) {
    std::vector<std::string> more = defaultConfigs();
    texts.insert(texts.end(), more.begin(), more.end());
  }
  if (!configFile.empty() && !readConfigFile(configFile, texts))
    return 1;
  if (texts.empty()) {
    errs() << "fa-aot: nothing to compile: give --config, --config-file or "
              "--defaults\n";
    return 1;
  }
  if (!checkOutputDir(outDir))
    return 1;
  GpuCompilerOptions options;
  options.cacheDir = cacheDir;
  options.scoreModFile = scoreMods;
  GpuCompiler compiler(options);
  // Each config compiles in a context of its own, `jobs` at a time; results
  // are reported and written in the order given, whatever finished first.
  std::vector<std::optional<Expected<CompiledKernelRef>>> results(texts.size());
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next++) < texts.size();) {
        Expected<KernelConfig> cfg = KernelConfig::parse(texts[i]);
        results[i].emplace(cfg ? compiler.compile(*cfg)
                               : Expected<CompiledKernelRef>(cfg.takeError()));
      }
    };
    unsigned threads =
        jobs ? jobs : std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::min<size_t>(threads, texts.size()); ++t)
      pool.emplace_back(work);
    work();
    for (std::thread &t : pool)
      t.join();
  }
  std::vector<CompiledKernelRef> kernels;
  int failures = 0;
  for (auto &result : results) {
    Expected<CompiledKernelRef> &kernel = *result;
    if (!kernel) {
      errs() << "fa-aot: " << toString(kernel.takeError()) << "\n";
      ++failures;
      continue;
    }
    const CompiledKernel &k = **kernel;
    int64_t shared = 0;
    for (const KernelEntry &e : k.entries)
      shared = std::max(shared, e.sharedBytes);
    outs() << k.tag << ": registers " << k.registers << ", spill bytes "
           << k.spillBytes << ", shared bytes " << shared
           << format(", mlir %.3f s, llvm %.3f s, ptxas %.3f s", k.mlirSeconds,
                     k.llvmSeconds, k.ptxasSeconds)
           << (k.fromCache ? " (cached)" : "") << "\n";
    kernels.push_back(std::move(*kernel));
  }
  // A bundle missing some configs would load and then lack kernels the
  // caller asked for: nothing is written unless every config compiled.
  if (failures) {
    errs() << "fa-aot: " << failures << " of " << texts.size()
           << " configs failed; no bundle written to " << outDir << "\n";
    return 1;
  }
  if (Error e = writeBundle(outDir, kernels)) {
    errs() << "fa-aot: " << toString(std::move(e)) << "\n";
    return 1;
  }
  return failures ? 1 : 0;
}
