//===- fa-run.cpp - run attn IR on the CPU ----------------------*- C++ -*-===//
//
// fa-run FILE.mlir --entry NAME --input q.npy ... [--output o.npy ...]
// Compiles NAME through fa-lower-to-llvm, runs it with MLIR's ExecutionEngine
// and writes each result as an f32 .npy (or prints a summary).
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/CpuRunner.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace llvm;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"),
                                      cl::Required);
static cl::opt<std::string> entry("entry", cl::desc("function to run"),
                                  cl::init("main"));
static cl::list<std::string> inputs("input",
                                    cl::desc("argument .npy, in order"));
static cl::list<std::string> outputs("output",
                                     cl::desc("result .npy (f32), in order"));
static cl::opt<int> randomInputs(
    "random-inputs",
    cl::desc("instead of --input, feed N(0,1) values drawn with this seed "
             "(static shapes only)"),
    cl::init(-1));
static cl::opt<int64_t> blockQ("block-q", cl::desc("query rows per tile"),
                               cl::init(64));
static cl::opt<int64_t> blockKV("block-kv", cl::desc("key rows per tile"),
                                cl::init(64));
static cl::opt<bool> deterministic("deterministic",
                                   cl::desc("fixed-order dQ accumulation"),
                                   cl::init(true));

static int fail(const std::string &msg) {
  errs() << "fa-run: error: " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "fa CPU runner\n");
  auto buf = MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!buf)
    return fail(inputFile + ": " + buf.getError().message());

  mlir::DialectRegistry registry;
  mlir::fa::registerDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = mlir::fa::parseModule(context, (*buf)->getBuffer(), inputFile);
  if (!module)
    return 1; // the parser has reported the error with its location

  std::vector<mlir::fa::HostTensor> args(inputs.size());
  std::string error;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!mlir::fa::readNpy(inputs[i], args[i], error))
      return fail(error);

  mlir::fa::LowerToLLVMOptions options;
  options.blockQ = blockQ;
  options.blockKV = blockKV;
  options.deterministic = deterministic;
  auto fn = mlir::fa::CpuFunction::compile(*module, entry, options, error);
  if (!fn)
    return fail(error);
  if (!outputs.empty() && outputs.size() != fn->signature().resultShapes.size())
    return fail("entry '" + entry + "' has " +
                std::to_string(fn->signature().resultShapes.size()) +
                " results, got " + std::to_string(outputs.size()) + " --output");
  if (randomInputs >= 0) {
    if (!inputs.empty())
      return fail("--random-inputs and --input are exclusive");
    std::mt19937_64 rng(randomInputs);
    std::normal_distribution<double> normal(0.0, 1.0);
    const auto &sig = fn->signature();
    for (size_t i = 0; i < sig.argShapes.size(); ++i) {
      mlir::fa::HostTensor t;
      t.shape = sig.argShapes[i];
      for (int64_t d : t.shape)
        if (d < 0)
          return fail("--random-inputs needs static shapes; argument #" +
                      std::to_string(i) + " has a dynamic dimension");
      t.data.resize(t.numElements());
      for (double &x : t.data)
        x = normal(rng);
      args.push_back(std::move(t));
    }
  }
  std::vector<mlir::fa::HostTensor> results;
  if (!fn->run(args, results, error))
    return fail(error);
  for (size_t r = 0; r < results.size(); ++r) {
    if (!outputs.empty()) {
      if (!mlir::fa::writeNpy(outputs[r], results[r], error))
        return fail(error);
      continue;
    }
    const auto &t = results[r];
    double sum = 0, absMax = 0;
    for (double v : t.data) {
      sum += v;
      absMax = std::max(absMax, std::fabs(v));
    }
    outs() << "result #" << r << " shape [";
    for (size_t d = 0; d < t.shape.size(); ++d)
      outs() << (d ? ", " : "") << t.shape[d];
    outs() << "] sum " << format("%.6g", sum) << " max|x| "
           << format("%.6g", absMax) << " first [";
    for (size_t i = 0; i < std::min<size_t>(4, t.data.size()); ++i)
      outs() << (i ? ", " : "") << format("%.5f", t.data[i]);
    outs() << "]\n";
  }
  return 0;
}
