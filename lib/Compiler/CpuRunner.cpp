//===- CpuRunner.cpp - JIT attn IR on the host ------------------*- C++ -*-===//

#include "fa/Compiler/CpuRunner.h"
#include "fa/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <limits>
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace mlir;
using namespace mlir::fa;

#ifndef FA_C_RUNNER_UTILS
#define FA_C_RUNNER_UTILS "libmlir_c_runner_utils.so"
#endif

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static uint16_t toBF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f))
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1); // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

static float fromBF16Bits(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// The e4m3 byte of `f`: 4 exponent bits of bias 7, 3 mantissa bits,
/// exponent 0 subnormal (m·2^-9), S.1111.111 NaN, no infinity.
static uint8_t toE4M3Bits(float f) {
  if (std::isnan(f))
    return 0x7F;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  double a = std::fabs(static_cast<double>(f));
  const uint8_t maxFinite = 0x7E; // 448
  if (a >= 448.0)
    return sign | maxFinite;
  int e = a == 0 ? -7 : static_cast<int>(std::floor(std::log2(a)));
  if (e < -6) // subnormal; a result of 8 is 2^-6, the first normal
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - e)));
  if (q == 16) {
    q = 8;
    ++e;
  }
  int bits = ((e + 7) << 3) | (q - 8);
  return sign | static_cast<uint8_t>(std::min(bits, int(maxFinite)));
}

static float fromE4M3Bits(uint8_t b) {
  int e = (b >> 3) & 0xF, m = b & 7;
  float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7)
    return std::numeric_limits<float>::quiet_NaN();
  if (e == 0)
    return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}

static size_t elemBytes(ElemKind k) {
  switch (k) {
  case ElemKind::F8E4M3:
    return 1;
  case ElemKind::F16:
  case ElemKind::BF16:
    return 2;
  case ElemKind::F32:
  case ElemKind::I32:
    return 4;
  case ElemKind::F64:
  case ElemKind::I64:
    return 8;
  }
  return 0;
}

static void store(ElemKind k, double v, void *dst) {
  switch (k) {
  case ElemKind::F8E4M3: {
    uint8_t b = toE4M3Bits(static_cast<float>(v));
    std::memcpy(dst, &b, 1);
    return;
  }
  case ElemKind::F16: {
    _Float16 h = static_cast<_Float16>(static_cast<float>(v));
    std::memcpy(dst, &h, 2);
    return;
  }
  case ElemKind::BF16: {
    uint16_t b = toBF16Bits(static_cast<float>(v));
    std::memcpy(dst, &b, 2);
    return;
  }
  case ElemKind::F32: {
    float f = static_cast<float>(v);
    std::memcpy(dst, &f, 4);
    return;
  }
  case ElemKind::F64:
    std::memcpy(dst, &v, 8);
    return;
  case ElemKind::I32: {
    int32_t i = static_cast<int32_t>(v);
    std::memcpy(dst, &i, 4);
    return;
  }
  case ElemKind::I64: {
    int64_t i = static_cast<int64_t>(v);
    std::memcpy(dst, &i, 8);
    return;
  }
  }
}

static double load(ElemKind k, const void *src) {
  switch (k) {
  case ElemKind::F8E4M3: {
    uint8_t b;
    std::memcpy(&b, src, 1);
    return fromE4M3Bits(b);
  }
  case ElemKind::F16: {
    _Float16 h;
    std::memcpy(&h, src, 2);
    return static_cast<double>(static_cast<float>(h));
  }
  case ElemKind::BF16: {
    uint16_t b;
    std::memcpy(&b, src, 2);
    return fromBF16Bits(b);
  }
  case ElemKind::F32: {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  case ElemKind::F64: {
    double d;
    std::memcpy(&d, src, 8);
    return d;
  }
  case ElemKind::I32: {
    int32_t i;
    std::memcpy(&i, src, 4);
    return i;
  }
  case ElemKind::I64: {
    int64_t i;
    std::memcpy(&i, src, 8);
    return static_cast<double>(i);
  }
  }
  return 0;
}

double mlir::fa::roundTo(ElemKind kind, double v) {
  alignas(8) unsigned char buf[8];
  store(kind, v, buf);
  return load(kind, buf);
}

static std::optional<ElemKind> kindOf(Type t) {
  if (t.isF16())
    return ElemKind::F16;
  if (t.isBF16())
    return ElemKind::BF16;
  if (isa<Float8E4M3FNType>(t))
    return ElemKind::F8E4M3;
  if (t.isF32())
    return ElemKind::F32;
  if (t.isF64())
    return ElemKind::F64;
  if (t.isInteger(32))
    return ElemKind::I32;
  if (t.isInteger(64))
    return ElemKind::I64;
  return std::nullopt;
}

static std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return r + "]";
}

OwningOpRef<ModuleOp> mlir::fa::parseModule(MLIRContext &context,
                                            StringRef source,
                                            StringRef bufferName) {
  llvm::SourceMgr mgr;
  mgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, bufferName),
                         llvm::SMLoc());
  return parseSourceFile<ModuleOp>(mgr, &context);
}

CpuFunction::~CpuFunction() = default;

std::unique_ptr<CpuFunction>
CpuFunction::compile(ModuleOp module, StringRef entry,
                     const LowerToLLVMOptions &options, std::string &error) {
  auto func = module.lookupSymbol<func::FuncOp>(entry);
  if (!func) {
    error = ("no function named '" + entry + "' in the module").str();
    return nullptr;
  }
  std::unique_ptr<CpuFunction> fn(new CpuFunction());
  fn->entry = entry.str();
  auto addType = [&](Type t, std::vector<std::vector<int64_t>> &shapes,
                     std::vector<ElemKind> &kinds, const char *what,
                     unsigned i) -> bool {
    auto shaped = dyn_cast<ShapedType>(t);
    std::optional<ElemKind> k =
        shaped && shaped.hasRank() ? kindOf(shaped.getElementType())
                                   : std::nullopt;
    if (!k || !isa<RankedTensorType, MemRefType>(t)) {
      llvm::raw_string_ostream os(error);
      os << "entry " << what << " #" << i << " has type " << t
         << "; expected a ranked tensor or memref of f16, bf16, f32, f64, i32 or i64";
      return false;
    }
    std::vector<int64_t> s;
    for (int64_t d : shaped.getShape())
      s.push_back(ShapedType::isDynamic(d) ? -1 : d);
    shapes.push_back(std::move(s));
    kinds.push_back(*k);
    return true;
  };
  for (auto [i, t] : llvm::enumerate(func.getArgumentTypes()))
    if (!addType(t, fn->sig.argShapes, fn->sig.argKinds, "argument", i))
      return nullptr;
  for (auto [i, t] : llvm::enumerate(func.getResultTypes()))
    if (!addType(t, fn->sig.resultShapes, fn->sig.resultKinds, "result", i))
      return nullptr;
  fn->source = module.clone();
  func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                UnitAttr::get(module.getContext()));

  PassManager pm(module.getContext());
  buildLowerToLLVMPipeline(pm, options);
  if (failed(pm.run(module))) {
    error = "lowering with fa-lower-to-llvm failed";
    return nullptr;
  }

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  ExecutionEngineOptions eo;
  // eo.transformer is a function_ref: keep the callable alive.
  std::function<llvm::Error(llvm::Module *)> optimize =
      makeOptimizingTransformer(2, 0, nullptr);
  eo.transformer = optimize;
  SmallVector<StringRef> libs{FA_C_RUNNER_UTILS};
  eo.sharedLibPaths = libs;
  auto engine = ExecutionEngine::create(module, eo);
  if (!engine) {
    error = "JIT compilation failed: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  fn->engine = std::move(*engine);
  return fn;
}

bool CpuFunction::checkDynamicShapes(const std::vector<HostTensor> &inputs,
                                     std::string &error) {
  bool dynamic = false;
  for (const auto &s : sig.argShapes)
    dynamic |= llvm::is_contained(s, -1);
  if (!dynamic)
    return true; // the verifier already saw every extent
  OwningOpRef<ModuleOp> copy = source->clone();
  auto func = copy->lookupSymbol<func::FuncOp>(entry);
  SmallVector<Type> argTypes;
  for (auto [arg, in] : llvm::zip(func.getArguments(), inputs)) {
    auto shaped = cast<ShapedType>(arg.getType());
    Type t = shaped.clone(in.shape);
    arg.setType(t);
    argTypes.push_back(t);
  }
  func.setFunctionType(FunctionType::get(copy->getContext(), argTypes,
                                         func.getResultTypes()));
  std::string msg;
  llvm::raw_string_ostream os(msg);
  ScopedDiagnosticHandler handler(copy->getContext(), [&](Diagnostic &d) {
    if (!msg.empty())
      return success();
    if (auto fl = dyn_cast<FileLineColLoc>(d.getLocation()))
      os << fl.getFilename().getValue() << ":" << fl.getLine() << ":"
         << fl.getColumn() << ": ";
    os << d;
    return success();
  });
  if (succeeded(verify(*copy)))
    return true;
  error = "inputs do not fit the entry's ops: " + msg;
  return false;
}

/// The entry argument `v` is, or null.
static std::optional<unsigned> entryArgument(Value v, func::FuncOp func) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front())
    return std::nullopt;
  return arg.getArgNumber();
}

/// Checks one cu_seqlens input against the token count of its packed tensor.
static bool checkOffsets(StringRef name, unsigned input, const HostTensor &cu,
                         int64_t tokens, std::string &error) {
  auto fail = [&](const std::string &what) {
    error = (name + " (input #" + std::to_string(input) + ") " + what).str();
    return false;
  };
  const std::vector<double> &at = cu.data;
  if (at.empty() || at[0] != 0)
    return fail("must start at 0, got " +
                (at.empty() ? std::string("no offsets")
                            : std::to_string(int64_t(at[0]))));
  for (size_t i = 1; i < at.size(); ++i)
    if (at[i] < at[i - 1])
      return fail("must not decrease, got offset[" + std::to_string(i) +
                  "] = " + std::to_string(int64_t(at[i])) + " after " +
                  std::to_string(int64_t(at[i - 1])));
  if (int64_t(at.back()) != tokens)
    return fail("must end at the " + std::to_string(tokens) +
                " packed tokens, got " + std::to_string(int64_t(at.back())));
  return true;
}

bool CpuFunction::checkSequenceOffsets(const std::vector<HostTensor> &inputs,
                                       std::string &error) {
  auto func = source->lookupSymbol<func::FuncOp>(entry);
  // The token count of a packed tensor: its input's extent, else its type's.
  auto tokens = [&](Value packed) -> int64_t {
    if (auto arg = entryArgument(packed, func))
      return inputs[*arg].shape.empty() ? ShapedType::kDynamic
                                        : inputs[*arg].shape[0];
    return cast<RankedTensorType>(packed.getType()).getDimSize(0);
  };
  auto check = [&](Value q, Value k, Value cuQ, Value cuK) {
    for (auto [name, cu, packed] :
         {std::tuple<StringRef, Value, Value>{"cu_seqlens_q", cuQ, q},
          {"cu_seqlens_k", cuK, k}}) {
      std::optional<unsigned> arg = entryArgument(cu, func);
      int64_t total = tokens(packed);
      if (arg && !ShapedType::isDynamic(total) &&
          !checkOffsets(name, *arg, inputs[*arg], total, error))
        return false;
    }
    return true;
  };
  WalkResult walk = func.walk([&](Operation *op) {
    bool ok = true;
    if (auto fwd = dyn_cast<attn::AttentionOp>(op); fwd && fwd.isVarlen())
      ok = check(fwd.getQuery(), fwd.getKey(), fwd.getCuSeqlensQ(),
                 fwd.getCuSeqlensK());
    if (auto bwd = dyn_cast<attn::AttentionBackwardOp>(op); bwd && bwd.isVarlen())
      ok = check(bwd.getQuery(), bwd.getKey(), bwd.getCuSeqlensQ(),
                 bwd.getCuSeqlensK());
    return ok ? WalkResult::advance() : WalkResult::interrupt();
  });
  return !walk.wasInterrupted();
}

bool CpuFunction::run(const std::vector<HostTensor> &inputs,
                      std::vector<HostTensor> &results, std::string &error) {
  if (inputs.size() != sig.argShapes.size()) {
    error = "entry '" + entry + "' takes " + std::to_string(sig.argShapes.size()) +
            " inputs, got " + std::to_string(inputs.size());
    return false;
  }
  if (!checkDynamicShapes(inputs, error) ||
      !checkSequenceOffsets(inputs, error))
    return false;
  // Descriptors {allocated, aligned, offset, sizes..., strides...}.
  std::vector<std::vector<char>> storage(inputs.size());
  std::vector<std::vector<int64_t>> descs(inputs.size());
  std::vector<void *> descPtrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int64_t> &want = sig.argShapes[i];
    const HostTensor &in = inputs[i];
    bool ok = in.shape.size() == want.size();
    for (size_t d = 0; ok && d < want.size(); ++d)
      ok = in.shape[d] >= 0 && (want[d] < 0 || want[d] == in.shape[d]);
    if (!ok) {
      error = "input #" + std::to_string(i) + " has shape " + shapeStr(in.shape) +
              "; entry '" + entry + "' expects " + shapeStr(want);
      return false;
    }
    if (static_cast<int64_t>(in.data.size()) != in.numElements()) {
      error = "input #" + std::to_string(i) + " holds " +
              std::to_string(in.data.size()) + " values for shape " +
              shapeStr(in.shape);
      return false;
    }
    ElemKind k = sig.argKinds[i];
    size_t eb = elemBytes(k);
    storage[i].resize(std::max<size_t>(1, in.data.size()) * eb + 64);
    char *base = storage[i].data();
    char *aligned = base + ((64 - reinterpret_cast<uintptr_t>(base) % 64) % 64);
    for (size_t e = 0; e < in.data.size(); ++e)
      store(k, in.data[e], aligned + e * eb);
    std::vector<int64_t> &desc = descs[i];
    desc.push_back(reinterpret_cast<int64_t>(aligned));
    desc.push_back(reinterpret_cast<int64_t>(aligned));
    desc.push_back(0);
    for (int64_t s : in.shape)
      desc.push_back(s);
    int64_t stride = 1;
    std::vector<int64_t> strides(in.shape.size());
    for (size_t d = in.shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= in.shape[d];
    }
    desc.insert(desc.end(), strides.begin(), strides.end());
    descPtrs[i] = desc.data();
  }
  size_t resultWords = 0;
  for (const auto &s : sig.resultShapes)
    resultWords += 3 + 2 * s.size();
  std::vector<int64_t> resultDescs(std::max<size_t>(1, resultWords), 0);
  void *resultPtr = resultDescs.data();
  SmallVector<void *> args;
  if (resultWords)
    args.push_back(&resultPtr);
  for (void *&p : descPtrs)
    args.push_back(&p);
  if (llvm::Error err = engine->invokePacked("_mlir_ciface_" + entry, args)) {
    error = "invocation failed: " + llvm::toString(std::move(err));
    return false;
  }
  results.clear();
  // Returned buffers are owned by the caller after buffer deallocation
  // (arguments and constants are returned as copies). One buffer may be
  // several results: free each once, after every result is read.
  llvm::SmallPtrSet<void *, 4> owned;
  size_t w = 0;
  for (size_t r = 0; r < sig.resultShapes.size(); ++r) {
    size_t rank = sig.resultShapes[r].size();
    void *alloc = reinterpret_cast<void *>(resultDescs[w]);
    char *aligned = reinterpret_cast<char *>(resultDescs[w + 1]);
    int64_t offset = resultDescs[w + 2];
    HostTensor t;
    t.shape.assign(resultDescs.begin() + w + 3, resultDescs.begin() + w + 3 + rank);
    std::vector<int64_t> strides(resultDescs.begin() + w + 3 + rank,
                                 resultDescs.begin() + w + 3 + 2 * rank);
    ElemKind k = sig.resultKinds[r];
    size_t eb = elemBytes(k);
    int64_t n = t.numElements();
    t.data.resize(n);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t lin = offset;
      for (size_t d = 0; d < rank; ++d)
        lin += idx[d] * strides[d];
      t.data[e] = load(k, aligned + lin * eb);
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < t.shape[d])
          break;
        idx[d] = 0;
      }
    }
    owned.insert(alloc);
    results.push_back(std::move(t));
    w += 3 + 2 * rank;
  }
  for (void *alloc : owned)
    std::free(alloc);
  return true;
}
