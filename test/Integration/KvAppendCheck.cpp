//===- KvAppendCheck.cpp - fa-check --kv-append -----------------*- C++ -*-===//
//
// flash_attn_with_kvcache's append on the CPU against a host reference
// written here, independently of the lowering: random caches (contiguous
// [B, Ncap, Hkv, D] or shuffled pages of 16, 32 or 64 rows), counts 0, 1,
// page - 1, whole pages and ragged, Nnew 1..16 (appends crossing pages and
// rows past the capacity, which must not be written), rotary off or on
// (rotary_dim D or less, interleaved or not, cos/sin f32 or the element
// type, q at cache_seqlens + i or at cache_seqlens), f16/bf16/f32, Dv != D.
// The reference rotates in float with separately rounded products and rounds
// once, so the caches and q must match exactly.
//
//===----------------------------------------------------------------------===//

#include "KvAppendCheck.h"

#include "fa/Compiler/CpuRunner.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace mlir::fa;

namespace {

struct AppendCase {
  ElemKind elem = ElemKind::BF16, table = ElemKind::F32;
  int64_t b = 1, hkv = 1, h = 1, d = 64, dv = 64, newRows = 1, sq = 1;
  int64_t pageSize = 16, numPages = 0, maxPages = 0, capacity = 0;
  bool paged = false, interleaved = false, samePosition = false;
  int64_t rotaryDim = 0, maxPos = 0; // rotaryDim 0: no rotary
  std::vector<int64_t> counts;
  std::vector<int32_t> pageTable; // [b, maxPages]
};

const char *elemName(ElemKind k) {
  return k == ElemKind::F16 ? "f16" : k == ElemKind::BF16 ? "bf16" : "f32";
}

std::string type(std::vector<int64_t> shape, const std::string &elem) {
  std::string s = "tensor<";
  for (int64_t x : shape)
    s += std::to_string(x) + "x";
  return s + elem + ">";
}

/// The case's function: (k, v, k_cache, v_cache, seqlens[, table][, cos,
/// sin, q]) -> (k_cache', v_cache'[, q']).
std::string caseIR(const AppendCase &c) {
  std::string e = elemName(c.elem);
  std::string kT = type({c.b, c.newRows, c.hkv, c.d}, e),
              vT = type({c.b, c.newRows, c.hkv, c.dv}, e);
  int64_t rows0 = c.paged ? c.numPages : c.b;
  int64_t rows1 = c.paged ? c.pageSize : c.capacity;
  std::string kcT = type({rows0, rows1, c.hkv, c.d}, e),
              vcT = type({rows0, rows1, c.hkv, c.dv}, e),
              nT = type({c.b}, "i32"), ptT = type({c.b, c.maxPages}, "i32"),
              csT = type({c.maxPos, c.rotaryDim / 2}, elemName(c.table)),
              qT = type({c.b, c.sq, c.h, c.d}, e);
  bool rot = c.rotaryDim > 0;
  std::string ir = "func.func @main(%k: " + kT + ", %v: " + vT + ", %kc: " +
                   kcT + ", %vc: " + vcT + ", %n: " + nT;
  if (c.paged)
    ir += ", %pt: " + ptT;
  if (rot)
    ir += ", %cos: " + csT + ", %sin: " + csT + ", %q: " + qT;
  ir += ") -> (" + kcT + ", " + vcT + (rot ? ", " + qT : "") + ") {\n";
  std::string key = "%k";
  if (rot) {
    std::string attrs = c.interleaved ? " {interleaved}" : "";
    ir += "  %kr = attn.rotary %k, %cos, %sin at %n" + attrs + " : " + kT +
          ", " + csT + ", " + csT + ", " + nT + " -> " + kT + "\n";
    std::string qAttrs =
        c.interleaved && c.samePosition ? " {interleaved, same_position}"
        : c.interleaved                 ? " {interleaved}"
        : c.samePosition                ? " {same_position}"
                                        : "";
    ir += "  %qr = attn.rotary %q, %cos, %sin at %n" + qAttrs + " : " + qT +
          ", " + csT + ", " + csT + ", " + nT + " -> " + qT + "\n";
    key = "%kr";
  }
  ir += "  %kc2, %vc2 = attn.kv_append " + key + ", %v into %kc, %vc at %n" +
        (c.paged ? " paged(%pt : " + ptT + ")" : "") + " : " + kT + ", " + vT +
        ", " + kcT + ", " + vcT + ", " + nT + " -> " + kcT + ", " + vcT + "\n";
  ir += "  return %kc2, %vc2" + std::string(rot ? ", %qr" : "") + " : " + kcT +
        ", " + vcT + (rot ? ", " + qT : "") + "\n}\n";
  return ir;
}

/// Pair (x1, x2) rotated by (c, s) in float, each product rounded.
std::pair<float, float> rotatePair(float x1, float x2, float c, float s) {
  volatile float a = x1 * c, b2 = x2 * s, e = x1 * s, f = x2 * c;
  return {a - b2, e + f};
}

/// Rows [B, N, H, D] of `x` rotated in place at start[b] (+ n).
void rotateRows(const AppendCase &c, HostTensor &x, const HostTensor &cos,
                const HostTensor &sin, bool samePosition) {
  int64_t n = x.shape[1], h = x.shape[2], d = x.shape[3], half = c.rotaryDim / 2;
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t t = 0; t < n; ++t) {
      int64_t pos = std::max<int64_t>(c.counts[b], 0) + (samePosition ? 0 : t);
      pos = std::min(pos, c.maxPos - 1);
      for (int64_t hh = 0; hh < h; ++hh) {
        double *row = &x.data[((b * n + t) * h + hh) * d];
        for (int64_t i = 0; i < half; ++i) {
          int64_t i1 = c.interleaved ? 2 * i : i;
          int64_t i2 = c.interleaved ? 2 * i + 1 : i + half;
          auto [o1, o2] = rotatePair(float(row[i1]), float(row[i2]),
                                     float(cos.data[pos * half + i]),
                                     float(sin.data[pos * half + i]));
          row[i1] = roundTo(c.elem, o1);
          row[i2] = roundTo(c.elem, o2);
        }
      }
    }
}

/// The caches after the append: row count + t of sequence b at its page.
void appendRows(const AppendCase &c, const HostTensor &rows, HostTensor &cache) {
  int64_t dim = rows.shape[3];
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t t = 0; t < c.newRows; ++t) {
      int64_t pos = std::max<int64_t>(c.counts[b], 0) + t;
      if (pos >= c.capacity)
        continue; // past the capacity: not written
      int64_t page = b, slot = pos;
      if (c.paged) {
        page = std::clamp<int64_t>(c.pageTable[b * c.maxPages + pos / c.pageSize],
                                   0, c.numPages - 1);
        slot = pos % c.pageSize;
      }
      for (int64_t hh = 0; hh < c.hkv; ++hh)
        for (int64_t i = 0; i < dim; ++i)
          cache.data[((page * cache.shape[1] + slot) * c.hkv + hh) * dim + i] =
              rows.data[((b * c.newRows + t) * c.hkv + hh) * dim + i];
    }
}

struct Checker {
  mlir::MLIRContext &ctx;
  std::mt19937_64 rng;
  int passed = 0, failed = 0;
  struct {
    int pastCapacity = 0, crossPage = 0, rotary = 0, interleaved = 0,
        partRotary = 0, contiguous = 0;
    std::set<int64_t> pageSizes;
  } cov;

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  template <typename T> T pick(std::vector<T> v) { return v[uniform(0, v.size() - 1)]; }

  AppendCase draw(int n) {
    AppendCase c;
    c.elem = pick<ElemKind>({ElemKind::BF16, ElemKind::BF16, ElemKind::F16,
                             ElemKind::F32});
    c.b = uniform(1, 3);
    c.hkv = pick<int64_t>({1, 2});
    c.h = c.hkv * pick<int64_t>({1, 4});
    c.d = pick<int64_t>({16, 32, 64});
    c.dv = n % 4 == 3 ? 16 : c.d;
    c.newRows = pick<int64_t>({1, 1, 2, 5, 16, uniform(1, 16)});
    c.sq = pick<int64_t>({1, c.newRows, uniform(1, 8)});
    c.paged = n % 3 != 2;
    c.pageSize = pick<int64_t>({16, 32, 64});
    for (int64_t b = 0; b < c.b; ++b)
      c.counts.push_back(pick<int64_t>({0, 1, c.pageSize - 1, c.pageSize,
                                        uniform(2, 3 * c.pageSize)}));
    int64_t longest = *std::max_element(c.counts.begin(), c.counts.end());
    c.maxPages = (longest + c.newRows + c.pageSize - 1) / c.pageSize;
    // Every few cases the last rows fall past the capacity.
    if (n % 5 == 4)
      c.maxPages = std::max<int64_t>(1, (longest + 1) / c.pageSize);
    c.capacity = c.maxPages * c.pageSize;
    if (c.paged) {
      c.numPages = c.b * c.maxPages + uniform(0, 2);
      std::vector<int32_t> order(c.numPages);
      for (int32_t i = 0; i < c.numPages; ++i)
        order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t i = 0; i < c.b * c.maxPages; ++i)
        c.pageTable.push_back(order[i]);
    }
    if (n % 4 != 0) {
      c.rotaryDim = pick<int64_t>({c.d, c.d, c.d / 2, 2});
      c.interleaved = uniform(0, 1);
      c.samePosition = uniform(0, 1);
      c.table = uniform(0, 1) ? ElemKind::F32 : c.elem;
      c.maxPos = longest + std::max(c.newRows, c.sq) + uniform(-3, 4);
      c.maxPos = std::max<int64_t>(c.maxPos, 1);
    }
    for (int64_t b = 0; b < c.b; ++b) {
      cov.pastCapacity += c.counts[b] + c.newRows > c.capacity;
      cov.crossPage += c.counts[b] / c.pageSize !=
                       (c.counts[b] + c.newRows - 1) / c.pageSize;
    }
    cov.rotary += c.rotaryDim > 0;
    cov.interleaved += c.rotaryDim > 0 && c.interleaved;
    cov.partRotary += c.rotaryDim > 0 && c.rotaryDim < c.d;
    cov.contiguous += !c.paged;
    if (c.paged)
      cov.pageSizes.insert(c.pageSize);
    return c;
  }

  HostTensor random(std::vector<int64_t> shape, ElemKind k) {
    HostTensor t;
    t.shape = std::move(shape);
    std::normal_distribution<double> nd(0, 1);
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.data.push_back(roundTo(k, nd(rng)));
    return t;
  }

  void check(int n, bool verbose) {
    AppendCase c = draw(n);
    std::string ir = caseIR(c);
    std::string err;
    auto module = parseModule(ctx, ir);
    std::unique_ptr<CpuFunction> fn =
        module ? CpuFunction::compile(*module, "main", LowerToLLVMOptions(), err)
               : nullptr;
    if (!fn) {
      report(false, n, "compile failed: " + err + "\n" + ir);
      return;
    }
    int64_t rows0 = c.paged ? c.numPages : c.b;
    int64_t rows1 = c.paged ? c.pageSize : c.capacity;
    std::vector<HostTensor> in{random({c.b, c.newRows, c.hkv, c.d}, c.elem),
                               random({c.b, c.newRows, c.hkv, c.dv}, c.elem),
                               random({rows0, rows1, c.hkv, c.d}, c.elem),
                               random({rows0, rows1, c.hkv, c.dv}, c.elem)};
    HostTensor counts{{c.b}, {}};
    for (int64_t x : c.counts)
      counts.data.push_back(double(x));
    in.push_back(counts);
    if (c.paged) {
      HostTensor table{{c.b, c.maxPages}, {}};
      for (int32_t p : c.pageTable)
        table.data.push_back(p);
      in.push_back(table);
    }
    HostTensor cos, sin, q;
    if (c.rotaryDim) {
      std::uniform_real_distribution<double> angle(0, 6.3);
      cos.shape = sin.shape = {c.maxPos, c.rotaryDim / 2};
      for (int64_t i = 0; i < cos.shape[0] * cos.shape[1]; ++i) {
        double a = angle(rng);
        cos.data.push_back(roundTo(c.table, std::cos(a)));
        sin.data.push_back(roundTo(c.table, std::sin(a)));
      }
      q = random({c.b, c.sq, c.h, c.d}, c.elem);
      in.insert(in.end(), {cos, sin, q});
    }
    std::vector<HostTensor> out;
    if (!fn->run(in, out, err)) {
      report(false, n, "run failed: " + err);
      return;
    }
    HostTensor k = in[0], kc = in[2], vc = in[3];
    if (c.rotaryDim) {
      rotateRows(c, k, cos, sin, /*samePosition=*/false);
      rotateRows(c, q, cos, sin, c.samePosition);
    }
    appendRows(c, k, kc);
    appendRows(c, in[1], vc);
    std::string bad;
    auto compare = [&](const char *name, const HostTensor &got,
                       const HostTensor &want) {
      for (size_t i = 0; i < want.data.size() && bad.empty(); ++i)
        if (got.data[i] != want.data[i])
          bad = std::string(name) + "[" + std::to_string(i) + "] = " +
                std::to_string(got.data[i]) + ", expected " +
                std::to_string(want.data[i]);
    };
    compare("k_cache", out[0], kc);
    compare("v_cache", out[1], vc);
    if (c.rotaryDim)
      compare("q", out[2], q);
    report(bad.empty(), n, bad.empty() && !verbose ? "" : bad + "\n" + ir);
  }

  void report(bool ok, int n, const std::string &what) {
    ok ? ++passed : ++failed;
    if (!ok || !what.empty())
      llvm::outs() << (ok ? "ok" : "FAIL") << " kv-append case " << n << ": "
                   << what << "\n";
  }
};

} // namespace

int fa_check::checkKvAppend(mlir::MLIRContext &ctx, unsigned seed, int cases,
                            bool verbose) {
  Checker chk{ctx, std::mt19937_64(seed)};
  for (int n = 0; n < cases; ++n)
    chk.check(n, verbose);
  llvm::outs() << "kv-append: " << chk.cov.pastCapacity
               << " sequences past the capacity, " << chk.cov.crossPage
               << " appends crossing a page, " << chk.cov.rotary
               << " cases with rotary (" << chk.cov.interleaved
               << " interleaved, " << chk.cov.partRotary
               << " rotating part of D), " << chk.cov.contiguous
               << " contiguous, " << chk.cov.pageSizes.size()
               << " page sizes\n";
  llvm::outs() << chk.passed << " passed, " << chk.failed << " failed\n";
  return chk.failed;
}
