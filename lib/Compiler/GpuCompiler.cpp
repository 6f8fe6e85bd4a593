//===- GpuCompiler.cpp - KernelConfig → PTX / cubin, cached -----*- C++ -*-===//

#include "fa/Compiler/GpuCompiler.h"
#include "fa/Conversion/AttnToGPU.h"
#include "fa/Dialect/Attn/IR/Attn.h"
#include "fa/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/xxhash.h"

#include <array>
#include <chrono>

using namespace mlir;
using namespace mlir::fa;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

//===----------------------------------------------------------------------===//
// KernelConfig
//===----------------------------------------------------------------------===//

llvm::Expected<KernelConfig> KernelConfig::parse(llvm::StringRef text) {
  KernelConfig c;
  if (text.trim().empty())
    return err("empty config: expected direction:dtype:dHEAD:mask, e.g. "
               "fwd:bf16:d128:causal");
  llvm::SmallVector<llvm::StringRef> parts;
  text.trim().split(parts, ':');
  auto num = [&](llvm::StringRef field, llvm::StringRef prefix,
                 int64_t &out) -> bool {
    return field.consume_front(prefix) && !field.getAsInteger(10, out);
  };
  // Which kind of field each part sets: a second one of a kind is an error,
  // not "the last one wins".
  llvm::StringMap<llvm::StringRef> seen;
  for (llvm::StringRef p : parts) {
    int64_t n;
    llvm::StringRef kind;
    if (p == "fwd" || p == "bwd")
      c.direction = p.str(), kind = "direction";
    else if (p == "bf16" || p == "f16" || p == "f32" || p == "f8e4m3")
      c.dtype = p.str(), kind = "dtype";
    else if (p == "none" || p == "causal" || p == "causal_bottom_right" ||
             p == "window")
      c.mask = p.str(), kind = "mask";
    else if (p.starts_with("sm_"))
      c.target = p.str(), kind = "target";
    else if (p == "wgmma" || p == "mma_sync")
      c.mma = p.str(), kind = "mma";
    else if (p == "det")
      c.deterministic = true, kind = "det";
    else if (p == "persistent" || p == "blocks")
      c.grid = p.str(), kind = "grid";
    else if (p == "splitkv")
      c.splitKv = true, kind = "splitkv";
    else if (p == "packgqa")
      c.packGqa = true, kind = "packgqa";
    else if (p == "varlen")
      c.varlen = true, kind = "varlen";
    else if (p == "paged")
      c.paged = true, kind = "paged";
    else if (p == "append")
      c.kvAppend = true, kind = "append";
    else if (p == "blocksparse")
      c.blockSparse = true, kind = "blocksparse";
    else if (p == "sinks")
      c.sinks = true, kind = "sinks";
    else if (p == "pw")
      c.producerWarp = true, kind = "pw";
    else if (p == "tma")
      c.tma = true, kind = "tma";
    else if (p == "tf32")
      c.tf32 = true, kind = "tf32";
    else if (p == "blockscale")
      c.blockScale = true, kind = "blockscale";
    else if (p.starts_with("quant=") && p.size() > 6)
      c.quantize = p.drop_front(6).str(), kind = "quantize";
    else if (p.starts_with("mod=") && p.size() > 4)
      c.scoreMod = p.drop_front(4).str(), kind = "score_mod";
    else if (p.starts_with("maskmod=") && p.size() > 8)
      c.maskMod = p.drop_front(8).str(), kind = "mask_mod";
    else if (num(p, "bkv", n))
      c.blockKV = n, kind = "block_kv";
    else if (num(p, "bq", n))
      c.blockQ = n, kind = "block_q";
    else if (num(p, "d", n))
      c.headDim = n, kind = "head dim";
    else if (num(p, "v", n))
      c.headDimV = n, kind = "value head dim";
    else if (num(p, "w", n))
      c.warps = n, kind = "warps";
    else if (num(p, "s", n))
      c.stages = n, kind = "stages";
    else if (num(p, "l", n))
      c.windowLeft = n, kind = "window left";
    else if (num(p, "r", n))
      c.windowRight = n, kind = "window right";
    else
      return err("unknown config field '" + p + "' in '" + text + "'");
    auto [it, fresh] = seen.try_emplace(kind, p);
    if (!fresh)
      return err("config '" + text + "' gives the " + kind + " twice: '" +
                 it->second + "' and '" + p + "'");
  }
  if (c.headDimV == 0)
    c.headDimV = c.headDim;
  if (c.blockScale && c.dtype != "f8e4m3")
    return err("blockscale applies to f8e4m3 inputs, got dtype " + c.dtype +
               " in '" + text + "'");
  if (!c.quantize.empty() &&
      (c.dtype != "f8e4m3" ||
       (c.quantize != "bf16" && c.quantize != "f16" && c.quantize != "f32")))
    return err("quant=<bf16|f16|f32> applies to f8e4m3 forwards, got quant=" +
               c.quantize + " with dtype " + c.dtype + " in '" + text + "'");
  if (c.tf32 && c.dtype != "f32")
    return err("tf32 applies to f32 inputs, got dtype " + c.dtype + " in '" +
               text + "'");
  bool window = c.mask == "window";
  // A window without sizes takes them at run time (one kernel, any window).
  if (window && ((c.windowLeft < 0) != (c.windowRight < 0)))
    return err("a window config needs both l<left> and r<right>, or neither "
               "(sizes given at run time): '" + text + "'");
  if (!window && (seen.count("window left") || seen.count("window right")))
    return err("window sizes apply to the window mask only, got mask " +
               c.mask + " in '" + text + "'");
  // The kernels take the window as i32 offsets.
  if (window && (c.windowLeft >= (int64_t(1) << 31) ||
                 c.windowRight >= (int64_t(1) << 31)))
    return err("expected window sizes below 2^31, got l" +
               llvm::Twine(c.windowLeft) + " and r" +
               llvm::Twine(c.windowRight) + " in '" + text + "'");
  return c;
}

std::string KernelConfig::str() const {
  std::string s = direction + ":" + dtype + ":d" + std::to_string(headDim) +
                  ":v" + std::to_string(headDimV ? headDimV : headDim) + ":" +
                  mask + ":bq" + std::to_string(blockQ) + ":bkv" +
                  std::to_string(blockKV) + ":w" + std::to_string(warps) +
                  ":s" + std::to_string(stages) + ":" + target;
  if (mask == "window" && !runtimeWindow())
    s += ":l" + std::to_string(windowLeft) + ":r" + std::to_string(windowRight);
  if (mma != "mma_sync")
    s += ":" + mma;
  if (deterministic)
    s += ":det";
  if (!scoreMod.empty())
    s += ":mod=" + scoreMod;
  if (!maskMod.empty())
    s += ":maskmod=" + maskMod;
  if (!grid.empty())
    s += ":" + grid;
  if (splitKv)
    s += ":splitkv";
  if (packGqa)
    s += ":packgqa";
  if (varlen)
    s += ":varlen";
  if (paged)
    s += ":paged";
  if (kvAppend)
    s += ":append";
  if (blockSparse)
    s += ":blocksparse";
  if (sinks)
    s += ":sinks";
  if (producerWarp)
    s += ":pw";
  if (tma)
    s += ":tma";
  if (tf32)
    s += ":tf32";
  if (blockScale)
    s += ":blockscale";
  if (!quantize.empty())
    s += ":quant=" + quantize;
  return s;
}

//===----------------------------------------------------------------------===//
// IR of a config
//===----------------------------------------------------------------------===//

llvm::Expected<std::string> GpuCompiler::buildAttnIR(const KernelConfig &c) {
  if (c.direction != "fwd" && c.direction != "bwd")
    return err("expected direction fwd or bwd, got '" + c.direction + "'");
  int64_t dv = c.headDimV ? c.headDimV : c.headDim;
  std::string t = c.dtype;
  auto ty = [&](int64_t d) {
    return "tensor<?x?x?x" + std::to_string(d) + "x" + t + ">";
  };
  std::string attrs = "mask = #attn.mask<" + c.mask + ">";
  if (c.mask == "window" && !c.runtimeWindow())
    attrs += ", window_left = " + std::to_string(c.windowLeft) +
             " : i64, window_right = " + std::to_string(c.windowRight) + " : i64";
  std::string q = ty(c.headDim), v = ty(dv), lse = "tensor<?x?x?xf32>";
  // Sinks: one more parameter and operand, and the backward's d_sinks.
  const std::string sinksType = "tensor<?xf32>";
  std::string sinksParam = c.sinks ? ", %sinks: " + sinksType : "";
  std::string sinksOperand =
      c.sinks ? " sinks(%sinks : " + sinksType + ")" : "";
  // Run-time window sizes: two i64 parameters and the window operands.
  std::string winParams = c.runtimeWindow() ? ", %wl: i64, %wr: i64" : "";
  std::string win = c.runtimeWindow() ? " window(%wl, %wr)" : "";
  if (c.dtype == "f8e4m3" && c.varlen)
    return err("f8e4m3 kernels take dense batches, got '" + c.str() + "'");
  if (c.varlen) {
    // Packed [T, H, D] tensors, LSE [H, T], the offsets i32 [B+1].
    q = "tensor<?x?x" + std::to_string(c.headDim) + "x" + t + ">";
    v = "tensor<?x?x" + std::to_string(dv) + "x" + t + ">";
    lse = "tensor<?x?xf32>";
    std::string cu = "tensor<?xi32>";
    std::string offsets = " varlen(%cuq, %cuk : " + cu + ", " + cu + ")";
    if (c.direction == "bwd") {
      std::string grads = q + ", " + q + ", " + v;
      std::string names = "%dq, %dk, %dv";
      if (c.sinks) {
        grads += ", " + sinksType;
        names += ", %dsinks";
      }
      return "func.func @attention_backward(%q: " + q + ", %k: " + q +
             ", %v: " + v + ", %o: " + v + ", %do: " + v + ", %lse: " + lse +
             ", %cuq: " + cu + ", %cuk: " + cu + sinksParam + winParams +
             ") -> (" + grads + ") {\n  " + names +
             " = attn.attention_backward %q, %k, %v, %o, %do, %lse" + offsets +
             sinksOperand + win + " {" + attrs + "} : " + q + ", " + q + ", " +
             v + ", " + v + ", " + v + ", " + lse + " -> " + grads +
             "\n  return " + names + " : " + grads + "\n}\n";
    }
    return "func.func @attention(%q: " + q + ", %k: " + q + ", %v: " + v +
           ", %cuq: " + cu + ", %cuk: " + cu + sinksParam + winParams +
           ") -> (" + v + ", " + lse +
           ") {\n  %o, %lse = attn.attention %q, %k, %v" + offsets +
           sinksOperand + win + " {" + attrs + "} : " + q + ", " + q + ", " +
           v + " -> " + v + ", " + lse + "\n  return %o, %lse : " + v + ", " +
           lse + "\n}\n";
  }
  if (c.paged) {
    if (c.direction != "fwd" || c.varlen || c.dtype == "f8e4m3")
      return err("a paged KV cache has a bf16/f16 forward only, without "
                 "varlen, got '" + c.str() + "'");
    // K, V pools [pages, page_size, Hkv, D], the page table i32
    // [B, max_pages] and seqused_k i32 [B].
    std::string k = "tensor<?x?x?x" + std::to_string(c.headDim) + "x" + t + ">";
    std::string vp = "tensor<?x?x?x" + std::to_string(dv) + "x" + t + ">";
    std::string table = "tensor<?x?xi32>", used = "tensor<?xi32>";
    return "func.func @attention(%q: " + q + ", %k: " + k + ", %v: " + vp +
           ", %pt: " + table + ", %used: " + used + sinksParam + winParams +
           ") -> (" + v + ", " + lse + ") {\n  %o, %lse = attn.attention %q, "
           "%k, %v" + sinksOperand + " paged(%pt, %used : " +
           table + ", " + used + ")" + win + " {" + attrs + "} : " + q + ", " + k + ", " +
           vp + " -> " + v + ", " + lse + "\n  return %o, %lse : " + v + ", " +
           lse + "\n}\n";
  }
  if (c.dtype == "f8e4m3" && c.direction != "fwd") {
    if (c.blockScale)
      return err("the f8e4m3 backward takes descales per key head, got '" +
                 c.str() + "'");
    // Q, K, V and dO in e4m3 with their descale factors [B, Hkv]; O and the
    // gradients in bf16.
    std::string q8 = "tensor<?x?x?x" + std::to_string(c.headDim) + "xf8E4M3FN>";
    std::string v8 = "tensor<?x?x?x" + std::to_string(dv) + "xf8E4M3FN>";
    std::string qb = "tensor<?x?x?x" + std::to_string(c.headDim) + "xbf16>";
    std::string vb = "tensor<?x?x?x" + std::to_string(dv) + "xbf16>";
    std::string ds = "tensor<?x?xf32>";
    std::string grads = qb + ", " + qb + ", " + vb;
    return "func.func @attention_backward(%q: " + q8 + ", %k: " + q8 +
           ", %v: " + v8 + ", %o: " + vb + ", %do: " + v8 + ", %lse: " + lse +
           ", %sq: " + ds + ", %sk: " + ds + ", %sv: " + ds + ", %sdo: " + ds +
           winParams + ") -> (" + grads +
           ") {\n  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, "
           "%do, %lse descale(%sq, %sk, %sv, %sdo : " +
           ds + ", " + ds + ", " + ds + ", " + ds + ")" + win + " {" + attrs +
           "} : " + q8 + ", " + q8 + ", " + v8 + ", " + vb + ", " + v8 + ", " +
           lse + " -> " + grads + "\n  return %dq, %dk, %dv : " + grads +
           "\n}\n";
  }
  if (c.dtype == "f8e4m3") {
    // Q, K, V in e4m3 with their descale factors [B, Hkv], or Q's and K's
    // per 64-row block; O in bf16.
    q = "tensor<?x?x?x" + std::to_string(c.headDim) + "xf8E4M3FN>";
    v = "tensor<?x?x?x" + std::to_string(dv) + "xf8E4M3FN>";
    std::string o = "tensor<?x?x?x" + std::to_string(dv) + "xbf16>";
    std::string ds = "tensor<?x?xf32>";
    std::string dqk = c.blockScale ? "tensor<?x?x?xf32>" : ds;
    return "func.func @attention(%q: " + q + ", %k: " + q + ", %v: " + v +
           ", %dq: " + dqk + ", %dk: " + dqk + ", %dv: " + ds + winParams +
           ") -> (" + o + ", " + lse +
           ") {\n  %o, %lse = attn.attention %q, %k, %v "
           "descale(%dq, %dk, %dv : " +
           dqk + ", " + dqk + ", " + ds + ")" + win + " {" + attrs +
           "} : " + q + ", " + q + ", " + v + " -> " + o + ", " + lse +
           "\n  return %o, %lse : " + o + ", " + lse + "\n}\n";
  }
  if (c.direction == "fwd")
    return "func.func @attention(%q: " + q + ", %k: " + q + ", %v: " + v +
           sinksParam + winParams + ") -> (" + v + ", " + lse +
           ") {\n  %o, %lse = attn.attention %q, %k, %v" + sinksOperand +
           win + " {" + attrs + "} : " + q + ", " + q + ", " + v + " -> " + v +
           ", " + lse + "\n  return %o, %lse : " + v + ", " + lse + "\n}\n";
  std::string grads = q + ", " + q + ", " + v;
  std::string names = "%dq, %dk, %dv";
  if (c.sinks) {
    grads += ", " + sinksType;
    names += ", %dsinks";
  }
  return "func.func @attention_backward(%q: " + q + ", %k: " + q + ", %v: " +
         v + ", %o: " + v + ", %do: " + v + ", %lse: " + lse + sinksParam +
         winParams + ") -> (" + grads + ") {\n  " + names +
         " = attn.attention_backward %q, %k, %v, %o, %do, %lse" +
         sinksOperand + win + " {" + attrs + "} : " + q + ", " + q + ", " + v +
         ", " + v + ", " + v + ", " + lse + " -> " + grads + "\n  return " +
         names + " : " + grads + "\n}\n";
}

//===----------------------------------------------------------------------===//
// ptxas
//===----------------------------------------------------------------------===//

namespace {
struct PtxasResult {
  std::string cubin;
  int64_t registers = -1, spillBytes = 0;
};
} // namespace

static llvm::Expected<PtxasResult> runPtxas(llvm::StringRef ptxas,
                                            llvm::StringRef arch,
                                            llvm::StringRef ptx) {
  llvm::SmallString<128> in, out, log;
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(in);
    llvm::sys::fs::remove(out);
    llvm::sys::fs::remove(log);
  });
  using TempFile = std::pair<llvm::SmallString<128> *, const char *>;
  for (auto [path, ext] :
       {TempFile{&in, "ptx"}, TempFile{&out, "cubin"}, TempFile{&log, "log"}})
    if (auto ec = llvm::sys::fs::createTemporaryFile("fa", ext, *path))
      return err(std::string("cannot create a temporary .") + ext +
                 " file: " + ec.message());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    if (ec)
      return err("cannot write " + in.str().str() + ": " + ec.message());
    os << ptx;
  }
  std::string archFlag = ("-arch=" + arch).str();
  llvm::SmallVector<llvm::StringRef> args{ptxas, archFlag, "-v", "-o", out, in};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log, log};
  std::string msg;
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                     &msg);
  auto logBuf = llvm::MemoryBuffer::getFile(log);
  std::string logText = logBuf ? (*logBuf)->getBuffer().str() : "";
  if (rc != 0)
    return err("ptxas failed (" + llvm::Twine(rc) + "): " + msg + "\n" + logText);
  PtxasResult r;
  auto cubin = llvm::MemoryBuffer::getFile(out, /*IsText=*/false);
  if (!cubin)
    return err("ptxas wrote no cubin");
  r.cubin = (*cubin)->getBuffer().str();
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(logText).split(lines, '\n');
  llvm::Regex regs("Used ([0-9]+) registers"),
      spill("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef> m;
    int64_t a = 0, b = 0;
    if (regs.match(line, &m) && !m[1].getAsInteger(10, a))
      r.registers = std::max(r.registers, a);
    if (spill.match(line, &m) && !m[1].getAsInteger(10, a) &&
        !m[2].getAsInteger(10, b))
      r.spillBytes += a + b;
  }
  return r;
}

//===----------------------------------------------------------------------===//
// GpuCompiler
//===----------------------------------------------------------------------===//

GpuCompiler::GpuCompiler(GpuCompilerOptions opts) : options(std::move(opts)) {
  if (options.cudaToolkit.empty())
    options.cudaToolkit = defaultCudaToolkit();
}
GpuCompiler::~GpuCompiler() = default;

using Clock = std::chrono::steady_clock;
static double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

//===----------------------------------------------------------------------===//
// The score-mod library
//===----------------------------------------------------------------------===//

/// The text of the score-mod library, or an error naming the file.
static llvm::Expected<std::string> readScoreModLibrary(llvm::StringRef path) {
  if (path.empty())
    return err("a config names a score_mod or mask_mod but no score-mod "
               "library was given (fa-aot --score-mods FILE)");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return err("cannot read the score-mod library " + path + ": " +
               buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

/// Whether `fn` has a score_mod's signature: (f32, index × 4, then one
/// ranked tensor per mod_arg) -> f32.
static bool isScoreModSignature(func::FuncOp fn) {
  FunctionType type = fn.getFunctionType();
  Builder b(fn.getContext());
  if (type.getNumInputs() < attn::ScoreSpec::kScoreModPositionArgs ||
      type.getNumResults() != 1 || type.getResult(0) != b.getF32Type() ||
      type.getInput(0) != b.getF32Type())
    return false;
  for (unsigned i = 1; i < attn::ScoreSpec::kScoreModPositionArgs; ++i)
    if (!type.getInput(i).isIndex())
      return false;
  return llvm::all_of(
      type.getInputs().drop_front(attn::ScoreSpec::kScoreModPositionArgs),
      [](Type t) { return isa<RankedTensorType>(t); });
}

/// Whether `fn` has a mask_mod's signature: (index × 4, then one ranked
/// tensor per mod_arg) -> i1.
static bool isMaskModSignature(func::FuncOp fn) {
  FunctionType type = fn.getFunctionType();
  if (type.getNumInputs() < attn::ScoreSpec::kMaskModPositionArgs ||
      type.getNumResults() != 1 || !type.getResult(0).isInteger(1))
    return false;
  for (unsigned i = 0; i < attn::ScoreSpec::kMaskModPositionArgs; ++i)
    if (!type.getInput(i).isIndex())
      return false;
  return llvm::all_of(
      type.getInputs().drop_front(attn::ScoreSpec::kMaskModPositionArgs),
      [](Type t) { return isa<RankedTensorType>(t); });
}

/// Appends `arg` to the mod_args of an attn.attention or attention_backward
/// (through the op's accessor, which keeps its operand segments right).
static void appendModArg(Operation *op, Value arg) {
  if (auto fwd = dyn_cast<attn::AttentionOp>(op))
    return fwd.getModArgsMutable().append(arg);
  cast<attn::AttentionBackwardOp>(op).getModArgsMutable().append(arg);
}

static ValueRange modArgsOf(Operation *op) {
  if (auto fwd = dyn_cast<attn::AttentionOp>(op))
    return fwd.getModArgs();
  return cast<attn::AttentionBackwardOp>(op).getModArgs();
}

/// What distinguishes the two kinds of mod a library function may be.
struct ModKind {
  const char *what;      // "score_mod" or "mask_mod"
  const char *signature; // the expected type, for the diagnostic
  unsigned region;       // the attn op's region it fills
  unsigned positionArgs; // leading non-tensor arguments
  llvm::StringLiteral nameAttr;
  bool (*hasSignature)(func::FuncOp);
};

static const ModKind kScoreModKind{
    "score_mod",
    "(f32, index, index, index, index, [mod_arg tensors...]) -> f32",
    0,
    attn::ScoreSpec::kScoreModPositionArgs,
    kScoreModNameAttr,
    isScoreModSignature};
static const ModKind kMaskModKind{
    "mask_mod", "(index, index, index, index, [mod_arg tensors...]) -> i1", 1,
    attn::ScoreSpec::kMaskModPositionArgs, kMaskModNameAttr,
    isMaskModSignature};

/// Makes library function @name the `kind` mod of `op`: its body fills the
/// op's region (attn.yield takes its return value) and the region is named
/// after it. Its tensors become mod_args after those attached already; both
/// regions take every mod_arg, so each region gets block arguments for the
/// other's tensors (docs/ABI.md "mod_args": the kernel's parameters).
static llvm::Error attachMod(Operation *op, ModuleOp library,
                             llvm::StringRef name, const ModKind &kind) {
  auto fn = library.lookupSymbol<func::FuncOp>(name);
  if (!fn)
    return err("the score-mod library has no function @" + name);
  if (!kind.hasSignature(fn) || fn.getBody().getBlocks().size() != 1) {
    std::string got;
    llvm::raw_string_ostream os(got);
    os << fn.getFunctionType();
    return err(std::string("expected ") + kind.what + " function @" +
               name.str() + " of type " + kind.signature +
               " with one block, got " + got);
  }
  unsigned own = kind.positionArgs;
  SmallVector<Type> earlier(modArgsOf(op).getTypes());
  Block &body = fn.getBody().front();
  SmallVector<Type> argTypes;
  for (BlockArgument arg : body.getArguments().take_front(own))
    argTypes.push_back(arg.getType());
  llvm::append_range(argTypes, earlier);
  for (BlockArgument arg : body.getArguments().drop_front(own))
    argTypes.push_back(arg.getType());
  OpBuilder b(op->getContext());
  Block *block = b.createBlock(&op->getRegion(kind.region), {}, argTypes,
                               SmallVector<Location>(argTypes.size(),
                                                     fn.getLoc()));
  IRMapping map;
  for (auto [i, arg] : llvm::enumerate(body.getArguments()))
    map.map(arg, block->getArgument(i < own ? i : i + earlier.size()));
  for (Operation &inner : body.without_terminator())
    b.clone(inner, map);
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  attn::YieldOp::create(b, ret.getLoc(),
                        ValueRange{map.lookup(ret.getOperand(0))});
  Region &other = op->getRegion(1 - kind.region);
  auto parent = op->getParentOfType<func::FuncOp>();
  for (Type t : fn.getFunctionType().getInputs().drop_front(own)) {
    unsigned index = parent.getNumArguments();
    if (failed(parent.insertArgument(index, t, {}, fn.getLoc())))
      return err("cannot add mod_arg parameter to the attention function");
    appendModArg(op, parent.getArgument(index));
    if (!other.empty())
      other.front().addArgument(t, fn.getLoc());
  }
  op->setAttr(kind.nameAttr, b.getStringAttr(name));
  return llvm::Error::success();
}

/// The argument attribute of a score-mod library function that binds its
/// mod_arg's dynamic extents to problem sizes (docs/ABI.md "mod_args").
static constexpr llvm::StringLiteral kModArgDimsAttr = "fa.dims";

/// The problem sizes a mod_arg's extent may be bound to (docs/ABI.md).
static bool isExtentName(llvm::StringRef name) {
  return llvm::is_contained(
      {"any", "batch", "heads", "kv_heads", "nq", "nk", "nq+nk-1"}, name);
}

/// The extents of mod_arg `index`, argument `arg` of library function `fn`
/// (null: none bound): a static
/// extent of its type, else the entry of its `fa.dims` argument attribute
/// (`tensor<?xf32> {fa.dims = ["heads"]}`), else "any".
static llvm::Expected<std::vector<std::string>>
modArgDims(func::FuncOp fn, unsigned index, unsigned arg,
           RankedTensorType type) {
  auto named =
      fn ? fn.getArgAttrOfType<ArrayAttr>(arg, kModArgDimsAttr) : ArrayAttr();
  if (named && named.size() != static_cast<size_t>(type.getRank()))
    return err("@" + fn.getName().str() + " mod_arg " + std::to_string(index) +
               ": " + kModArgDimsAttr + " has " +
               std::to_string(named.size()) + " entries for a rank-" +
               std::to_string(type.getRank()) + " tensor");
  std::vector<std::string> dims;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    std::string fixed = type.isDynamicDim(d)
                            ? std::string()
                            : std::to_string(type.getDimSize(d));
    auto name = named ? dyn_cast<StringAttr>(named[d]) : StringAttr();
    if (named && (!name || !isExtentName(name.getValue())))
      return err("@" + fn.getName().str() + " mod_arg " +
                 std::to_string(index) + ": " + kModArgDimsAttr + "[" +
                 std::to_string(d) + "] must be one of \"any\", \"batch\", "
                 "\"heads\", \"kv_heads\", \"nq\", \"nk\", \"nq+nk-1\"");
    if (name && !fixed.empty() && name.getValue() != "any")
      return err("@" + fn.getName().str() + " mod_arg " +
                 std::to_string(index) + ": dimension " + std::to_string(d) +
                 " is static (" + fixed + ") but " + kModArgDimsAttr +
                 " binds it to " + name.getValue().str());
    dims.push_back(!fixed.empty() ? fixed
                   : name         ? name.getValue().str()
                                  : std::string("any"));
  }
  return dims;
}

/// The mod_args of `spec` as the manifest lists them, their extents from
/// the library functions they came from: the score_mod's `scoreFn` first,
/// then the mask_mod's `maskFn` (either null where there is none).
static llvm::Expected<std::vector<ModArgInfo>>
modArgInfo(const attn::ScoreSpec &spec, func::FuncOp scoreFn,
           func::FuncOp maskFn) {
  std::vector<ModArgInfo> infos;
  unsigned fromScoreMod =
      scoreFn ? scoreFn.getNumArguments() - attn::ScoreSpec::kScoreModPositionArgs
              : 0;
  for (Value arg : spec.modArgs) {
    auto type = cast<RankedTensorType>(arg.getType());
    std::string dtype;
    llvm::raw_string_ostream os(dtype);
    os << type.getElementType();
    unsigned index = static_cast<unsigned>(infos.size());
    bool ofScoreMod = index < fromScoreMod;
    auto dims = modArgDims(
        ofScoreMod ? scoreFn : maskFn, index,
        ofScoreMod ? attn::ScoreSpec::kScoreModPositionArgs + index
                   : attn::ScoreSpec::kMaskModPositionArgs + index -
                         fromScoreMod,
        type);
    if (!dims)
      return dims.takeError();
    infos.push_back({dtype, type.getRank(), std::move(*dims)});
  }
  return infos;
}

llvm::Expected<CompiledKernel>
GpuCompiler::compileUncached(const KernelConfig &config,
                             llvm::StringRef scoreModLibrary) {
  llvm::Expected<std::string> ir = buildAttnIR(config);
  if (!ir)
    return ir.takeError();
  DialectRegistry registry;
  registerDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::string diag;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diag += d.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(*ir, &ctx);
  if (!module)
    return err("cannot build the attn IR: " + diag);

  Operation *attention = nullptr;
  module->walk([&](Operation *op) {
    if (isa<attn::AttentionOp, attn::AttentionBackwardOp>(op))
      attention = op;
  });
  OwningOpRef<ModuleOp> library;
  if (!config.scoreMod.empty() || !config.maskMod.empty()) {
    library = parseSourceString<ModuleOp>(scoreModLibrary, &ctx);
    if (!library)
      return err("cannot parse the score-mod library " +
                 options.scoreModFile + ": " + diag);
  }
  if (!config.scoreMod.empty())
    if (llvm::Error e =
            attachMod(attention, *library, config.scoreMod, kScoreModKind))
      return e;
  if (!config.maskMod.empty())
    if (llvm::Error e =
            attachMod(attention, *library, config.maskMod, kMaskModKind))
      return e;

  // The plan the pass will resolve, for the manifest and the tag.
  bool backward = config.direction == "bwd";
  GpuTileOptions tiles{config.blockQ, config.blockKV, config.warps,
                       config.stages, config.target, config.mma,
                       config.deterministic, config.grid};
  tiles.splitKv = config.splitKv;
  tiles.packGqa = config.packGqa;
  tiles.varlen = config.varlen;
  tiles.paged = config.paged;
  tiles.kvAppend = config.kvAppend;
  tiles.blockSparse = config.blockSparse;
  tiles.sinks = config.sinks;
  tiles.producerWarp = config.producerWarp;
  tiles.tma = config.tma;
  tiles.tf32 = config.tf32;
  tiles.quantize = config.quantize;
  std::string planError;
  FailureOr<KernelPlan> plan = resolveKernelPlanFor(attention, tiles, planError);
  if (failed(plan))
    return err(config.str() + ": " + planError);

  CompiledKernel out;
  auto lookup = [&](const std::string &name) {
    return library && !name.empty() ? library->lookupSymbol<func::FuncOp>(name)
                                    : func::FuncOp();
  };
  auto modArgs =
      modArgInfo(plan->spec, lookup(config.scoreMod), lookup(config.maskMod));
  if (!modArgs)
    return modArgs.takeError();
  out.modArgs = std::move(*modArgs);
  out.config = config;
  out.config.headDimV = plan->headDimV;
  out.config.blockQ = plan->blockQ;
  out.config.blockKV = plan->blockKV;
  out.config.warps = plan->warps;
  out.config.stages = plan->stages;
  out.config.dsplit = plan->dsplit;
  out.tag = plan->tag();
  out.params = kernelParamIndices(&ctx, *plan);
  if (backward) {
    out.entries.push_back(
        {"bwd_pre", "fa_bwd_pre_" + out.tag, plan->threads(), 0});
    out.entries.push_back({"bwd", "fa_bwd_" + out.tag, plan->threads(),
                           plan->backwardSharedBytes()});
    out.entries.push_back(
        {"bwd_post", "fa_bwd_post_" + out.tag, plan->threads(), 0});
    // d_sinks after fa_bwd_pre's Delta (BackwardSinkKernel.cpp).
    if (plan->sinks)
      out.entries.push_back({"bwd_sink", "fa_bwd_sink_" + out.tag,
                             plan->threads(), plan->warps * 4});
  } else {
    out.entries.push_back({"fwd", "fa_fwd_" + out.tag, plan->threads(),
                           plan->forwardSharedBytes(), plan->persistent,
                           plan->dependentForward()});
    // The split forward leaves partials that fa_merge joins (docs/ABI.md).
    if (plan->splitKv)
      out.entries.push_back({"merge", "fa_merge_" + out.tag,
                             plan->mergeThreads(), 0, false,
                             plan->dependentMerge()});
    // Writes the new keys and values into the cache before the decode.
    if (plan->kvAppend)
      out.entries.push_back({"kv_append", "fa_kv_append_" + out.tag,
                             kKvAppendThreads, 0});
    // attn.quantize of the forward's inputs (QuantizeKernel.cpp).
    if (!plan->quantize.empty()) {
      out.entries.push_back({"quantize_amax", "fa_quantize_amax_" + out.tag,
                             kQuantizeThreads, kQuantizeSharedBytes});
      out.entries.push_back({"quantize", "fa_quantize_" + out.tag,
                             kQuantizeThreads, kQuantizeSharedBytes});
    }
  }
  // The block mask's builders (BlockMask.h): classes, the lists, then the
  // grid order, with this kernel's block sizes (a block-sparse backward has
  // its own).
  if (plan->blockSparse) {
    out.entries.push_back(
        {"block_mask", "fa_block_mask_" + out.tag, kBlockMaskThreads, 0});
    out.entries.push_back(
        {"block_lists", "fa_block_lists_" + out.tag, kBlockListsThreads, 0});
    out.entries.push_back(
        {"block_order", "fa_block_order_" + out.tag, kBlockOrderThreads, 0});
  }

  auto t0 = Clock::now();
  PassManager pm(&ctx);
  LowerToNVVMOptions pipe;
  pipe.blockQ = config.blockQ;
  pipe.blockKV = config.blockKV;
  pipe.warps = config.warps;
  pipe.stages = config.stages;
  pipe.target = config.target;
  pipe.mma = config.mma;
  pipe.deterministic = config.deterministic;
  pipe.grid = config.grid;
  pipe.splitKv = config.splitKv;
  pipe.packGqa = config.packGqa;
  pipe.kvAppend = config.kvAppend;
  pipe.producerWarp = config.producerWarp;
  pipe.tma = config.tma;
  pipe.tf32 = config.tf32;
  pipe.quantize = config.quantize;
  pipe.blockSparse = config.blockSparse;
  buildAttnToNVVMDialectPipeline(pm, pipe);
  if (failed(pm.run(*module)))
    return err("the NVVM pipeline failed for " + config.str() + ": " + diag);
  out.mlirSeconds = since(t0);

  auto t1 = Clock::now();
  gpu::GPUModuleOp gpuModule;
  module->walk([&](gpu::GPUModuleOp m) { gpuModule = m; });
  if (!gpuModule || !gpuModule.getTargetsAttr() ||
      gpuModule.getTargetsAttr().empty())
    return err("no gpu.module with an NVVM target after the pipeline");
  auto target = cast<gpu::TargetAttrInterface>(gpuModule.getTargetsAttr()[0]);
  gpu::TargetOptions topts(options.cudaToolkit, {}, "", "",
                           gpu::CompilationTarget::Assembly);
  std::optional<SmallVector<char, 0>> ptx =
      target.serializeToObject(gpuModule, topts);
  if (!ptx)
    return err("NVPTX serialisation failed for " + config.str() + ": " + diag);
  out.ptx.assign(ptx->begin(), ptx->end());
  while (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();
  out.llvmSeconds = since(t1);

  std::string ptxas = options.cudaToolkit + "/bin/ptxas";
  if (options.runPtxas && llvm::sys::fs::can_execute(ptxas)) {
    auto t2 = Clock::now();
    llvm::Expected<PtxasResult> r = runPtxas(ptxas, config.target, out.ptx);
    if (!r)
      return r.takeError();
    out.cubin = std::move(r->cubin);
    out.registers = r->registers;
    out.spillBytes = r->spillBytes;
    out.ptxasSeconds = since(t2);
  }
  return out;
}

/// Disk cache: <dir>/<key hash>.{json,ptx,cubin}; the json holds the key and
/// the content hashes, so a truncated or foreign file is detected.
/// The parameter indices by their names in the disk cache's metadata.
static std::array<std::pair<llvm::StringRef, int64_t *>, 10>
paramIndexFields(KernelParamIndices &at) {
  return {{{"tensor_map", &at.tensorMap},
           {"descale", &at.descale},
           {"stride", &at.stride},
           {"cu_seqlens", &at.cuSeqlens},
           {"block_mask", &at.blockMask},
           {"page_table", &at.pageTable},
           {"sinks", &at.sinks},
           {"mod_arg", &at.modArg},
           {"semaphore", &at.semaphore},
           {"window", &at.window}}};
}

static llvm::json::Object paramIndexObject(KernelParamIndices at) {
  llvm::json::Object o;
  for (auto &[name, field] : paramIndexFields(at))
    o[name] = *field;
  return o;
}

static std::string hashHex(llvm::StringRef s) {
  return llvm::utohexstr(llvm::xxh3_64bits(s), /*LowerCase=*/true);
}

static std::optional<CompiledKernel> loadCached(llvm::StringRef dir,
                                                llvm::StringRef key,
                                                const KernelConfig &config) {
  llvm::SmallString<256> base(dir);
  llvm::sys::path::append(base, hashHex(key));
  auto meta = llvm::MemoryBuffer::getFile(base + ".json");
  if (!meta)
    return std::nullopt;
  llvm::Expected<llvm::json::Value> v = llvm::json::parse((*meta)->getBuffer());
  if (!v) {
    llvm::consumeError(v.takeError());
    return std::nullopt;
  }
  const llvm::json::Object *o = v->getAsObject();
  if (!o || o->getString("key") != key)
    return std::nullopt;
  CompiledKernel k;
  k.config = config;
  auto ptx = llvm::MemoryBuffer::getFile(base + ".ptx", false, false);
  if (!ptx || hashHex((*ptx)->getBuffer()) != o->getString("ptx_hash"))
    return std::nullopt;
  k.ptx = (*ptx)->getBuffer().str();
  if (auto h = o->getString("cubin_hash"); h && !h->empty()) {
    auto cubin = llvm::MemoryBuffer::getFile(base + ".cubin", false, false);
    if (!cubin || hashHex((*cubin)->getBuffer()) != *h)
      return std::nullopt;
    k.cubin = (*cubin)->getBuffer().str();
  }
  k.tag = o->getString("tag").value_or("").str();
  k.registers = o->getInteger("registers").value_or(-1);
  k.spillBytes = o->getInteger("spill_bytes").value_or(-1);
  if (const llvm::json::Object *c = o->getObject("resolved")) {
    k.config.blockQ = c->getInteger("block_q").value_or(0);
    k.config.blockKV = c->getInteger("block_kv").value_or(0);
    k.config.warps = c->getInteger("warps").value_or(0);
    k.config.stages = c->getInteger("stages").value_or(0);
    k.config.headDimV = c->getInteger("head_dim_v").value_or(0);
    k.config.dsplit = c->getInteger("dsplit").value_or(1);
    if (const llvm::json::Object *at = c->getObject("params"))
      for (auto &[name, field] : paramIndexFields(k.params))
        *field = at->getInteger(name).value_or(-1);
  }
  if (const llvm::json::Array *es = o->getArray("entries"))
    for (const llvm::json::Value &e : *es)
      if (const llvm::json::Object *eo = e.getAsObject())
        k.entries.push_back({eo->getString("role").value_or("").str(),
                             eo->getString("name").value_or("").str(),
                             eo->getInteger("threads").value_or(0),
                             eo->getInteger("shared_bytes").value_or(0),
                             eo->getBoolean("persistent").value_or(false),
                             eo->getBoolean("dependent").value_or(false)});
  if (const llvm::json::Array *args = o->getArray("mod_args"))
    for (const llvm::json::Value &a : *args)
      if (const llvm::json::Object *ao = a.getAsObject()) {
        ModArgInfo info{ao->getString("dtype").value_or("").str(),
                        ao->getInteger("rank").value_or(0), {}};
        if (const llvm::json::Array *dims = ao->getArray("dims"))
          for (const llvm::json::Value &d : *dims)
            info.dims.push_back(d.getAsString().value_or("any").str());
        k.modArgs.push_back(std::move(info));
      }
  k.fromCache = true;
  return k;
}

static void storeCached(llvm::StringRef dir, llvm::StringRef key,
                        const CompiledKernel &k) {
  if (llvm::sys::fs::create_directories(dir))
    return;
  llvm::SmallString<256> base(dir);
  llvm::sys::path::append(base, hashHex(key));
  auto write = [&](llvm::StringRef path, llvm::StringRef data) {
    // Write then rename so a reader never sees a half-written file.
    std::string tmp = (path + ".tmp").str();
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
      if (ec)
        return;
      os << data;
    }
    llvm::sys::fs::rename(tmp, path);
  };
  write((base + ".ptx").str(), k.ptx);
  if (!k.cubin.empty())
    write((base + ".cubin").str(), k.cubin);
  llvm::json::Array entries;
  for (const KernelEntry &e : k.entries)
    entries.push_back(llvm::json::Object{{"role", e.role},
                                         {"name", e.name},
                                         {"threads", e.threads},
                                         {"shared_bytes", e.sharedBytes},
                                         {"persistent", e.persistent},
                                         {"dependent", e.dependent}});
  llvm::json::Array modArgs;
  for (const ModArgInfo &a : k.modArgs) {
    llvm::json::Array dims;
    for (const std::string &d : a.dims)
      dims.push_back(d);
    modArgs.push_back(llvm::json::Object{
        {"dtype", a.dtype}, {"rank", a.rank}, {"dims", std::move(dims)}});
  }
  llvm::json::Object meta{
      {"key", key},
      {"mod_args", std::move(modArgs)},
      {"tag", k.tag},
      {"ptx_hash", hashHex(k.ptx)},
      {"cubin_hash", k.cubin.empty() ? "" : hashHex(k.cubin)},
      {"registers", k.registers},
      {"spill_bytes", k.spillBytes},
      {"resolved", llvm::json::Object{{"block_q", k.config.blockQ},
                                      {"block_kv", k.config.blockKV},
                                      {"warps", k.config.warps},
                                      {"stages", k.config.stages},
                                      {"head_dim_v", k.config.headDimV},
                                      {"dsplit", k.config.dsplit},
                                      {"params", paramIndexObject(k.params)}}},
      {"entries", std::move(entries)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(meta));
  write((base + ".json").str(), text);
}

llvm::Expected<std::shared_ptr<const CompiledKernel>>
GpuCompiler::compile(const KernelConfig &config) {
  std::string key = compilerVersion() + "|" + config.str() + "|" +
                    options.cudaToolkit;
  if (config.mma == "wgmma")
    key += "|" + (config.direction == "bwd" ? wgmmaBackwardVariantKey()
                                            : wgmmaVariantKey());
  std::string scoreModLibrary;
  if (!config.scoreMod.empty() || !config.maskMod.empty()) {
    llvm::Expected<std::string> library =
        readScoreModLibrary(options.scoreModFile);
    if (!library)
      return library.takeError();
    scoreModLibrary = std::move(*library);
    key += "|" + hashHex(scoreModLibrary);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = memory.find(key); it != memory.end())
      return it->second;
    if (!options.cacheDir.empty())
      if (std::optional<CompiledKernel> k =
              loadCached(options.cacheDir, key, config)) {
        auto p = std::make_shared<const CompiledKernel>(std::move(*k));
        memory[key] = p;
        return p;
      }
  }
  // Compiled outside the lock, in a context of its own, so that configs
  // compile in parallel (fa-aot -j); two threads that race on one key both
  // compile it and the first result is kept.
  llvm::Expected<CompiledKernel> k = compileUncached(config, scoreModLibrary);
  if (!k)
    return k.takeError();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = memory.find(key); it != memory.end())
    return it->second;
  if (!options.cacheDir.empty())
    storeCached(options.cacheDir, key, *k);
  auto p = std::make_shared<const CompiledKernel>(std::move(*k));
  memory[key] = p;
  return p;
}
