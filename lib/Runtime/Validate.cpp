//===- Validate.cpp - GPU-free checks of attention arguments -------------===//
//
// A kernel trusts its arguments: a wrong shape reads out of bounds, a wrong
// stride silently mixes heads. These checks run before every launch and name
// the argument and the values that are wrong.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

namespace fa::runtime {

int64_t elementSize(fa_dtype dtype) {
  switch (dtype) {
  case FA_DTYPE_F8E4M3:
    return 1;
  case FA_DTYPE_F16:
  case FA_DTYPE_BF16:
    return 2;
  case FA_DTYPE_F32:
  case FA_DTYPE_I32:
    return 4;
  case FA_DTYPE_I64:
    return 8;
  }
  return 0;
}

namespace {

/// Grid y and z are limited to 65535 blocks.
constexpr int64_t kMaxGridYZ = 65535;

bool validDtype(fa_dtype dtype) { return elementSize(dtype) != 0; }

/// An ostringstream made on the first write: the checks run before every
/// launch and write only when one fails, and making a stream costs more
/// than all the checks of a launch that passes.
class Message {
public:
  template <typename T> std::ostream &operator<<(const T &x) {
    if (!os)
      os.emplace();
    return *os << x;
  }
  std::string str() const { return os ? os->str() : std::string(); }

private:
  std::optional<std::ostringstream> os;
};

std::string join(const int64_t *xs, int n) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n; ++i)
    os << (i ? "," : "") << xs[i];
  os << ']';
  return os.str();
}

std::string join(const std::vector<int64_t> &xs) {
  return join(xs.data(), static_cast<int>(xs.size()));
}

std::string dtypeText(fa_dtype dtype) {
  if (validDtype(dtype))
    return fa_dtype_name(dtype);
  return "<invalid dtype " + std::to_string(static_cast<int>(dtype)) + ">";
}

/// The alignment (bytes) the kernels need of a tensor whose rows are `cols`
/// elements of `dtype`: 16, their widest access, unless the rows of such a
/// head dim cannot all be 16-byte aligned (D not a multiple of 8 for f16 and
/// bf16, of 4 for f32); the kernels for it access those rows only as wide
/// as gcd(row bytes, 16), which is then all they need (docs/ABI.md).
int64_t rowAlignment(int64_t cols, fa_dtype dtype) {
  int64_t elem = elementSize(dtype);
  return elem * std::gcd(cols, 16 / elem);
}

/// What checkTensor requires of a tensor's address: `bytes`, and why when
/// that is less than 16. The default is the kernels' widest access.
struct Alignment {
  int64_t bytes = 16;
  std::string why; // empty for 16
};

/// The alignment kernel `c` needs of a tensor with rows of `cols` elements.
Alignment alignmentFor(const KernelConfig &c, int64_t cols, fa_dtype dtype) {
  Alignment a;
  a.bytes = rowAlignment(cols, dtype);
  if (a.bytes < 16)
    a.why = " (kernel '" + c.tag + "' reads and writes its rows of " +
            std::to_string(cols) + " " + fa_dtype_name(dtype) + " elements " +
            std::to_string(a.bytes) + " bytes at a time)";
  return a;
}

/// How a tensor's strides may be: contiguous row-major, or (q, k, v, o of a
/// strided kernel) any positive strides with a unit last one, an output's
/// elements distinct.
enum class Layout { Contiguous, StridedInput, StridedOutput };

/// The elements from a tensor's first to its last addressed one, or 0 when
/// that overflows 63 bits (strides positive).
uint64_t addressedElements(const fa_tensor &t) {
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    int64_t step;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &step) ||
        __builtin_add_overflow(last, step, &last))
      return 0;
  }
  return last == INT64_MAX ? 0 : static_cast<uint64_t>(last) + 1;
}

/// The strides of a strided kernel's tensor (Layout): positive, unit last,
/// each a multiple of the rows' alignment in elements so every row and head
/// starts as aligned as the kernel reads it, a 63-bit extent, and for an
/// output no two elements at one address.
std::string checkStrides(const char *name, const fa_tensor &t, Layout layout,
                         const Alignment &align) {
  std::ostringstream os;
  const int rank = t.rank;
  const int64_t unit = align.bytes / elementSize(t.dtype);
  if (t.strides[rank - 1] != 1) {
    os << name << ".strides are " << join(t.strides, rank)
       << "; the last dimension's stride must be 1";
    return os.str();
  }
  for (int i = 0; i < rank - 1; ++i) {
    if (t.strides[i] < 1 || t.strides[i] % unit != 0) {
      os << name << ".strides are " << join(t.strides, rank) << ": stride "
         << t.strides[i] << " of dimension " << i << " must be positive and "
         << "a multiple of " << unit << " elements (rows " << align.bytes
         << "-byte aligned" << (align.why.empty() ? "" : align.why) << ")";
      return os.str();
    }
  }
  if (addressedElements(t) == 0 ||
      addressedElements(t) > uint64_t(INT64_MAX) / elementSize(t.dtype)) {
    os << name << ".strides " << join(t.strides, rank) << " for shape "
       << join(t.shape, rank) << " address more than 2^63 bytes";
    return os.str();
  }
  if (layout != Layout::StridedOutput)
    return "";
  // Distinct elements: with the dims ordered by stride, each stride reaches
  // past everything the smaller ones address.
  std::vector<int> order;
  for (int i = 0; i < rank; ++i)
    if (t.shape[i] > 1)
      order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t reach = 1;
  for (int i : order) {
    if (t.strides[i] < reach) {
      os << name << ".strides " << join(t.strides, rank) << " for shape "
         << join(t.shape, rank) << " put two elements of the output at one "
         << "address";
      return os.str();
    }
    reach = t.strides[i] * t.shape[i]; // within the extent checked above
  }
  return "";
}

/// Checks what a tensor must satisfy on its own: non-null, dtype, rank,
/// positive 32-bit sizes, strides (contiguous row-major unless `layout`
/// allows others: checkStrides), alignment (16 bytes unless `align` says
/// less), element count within 32 bits (the kernels take i32 sizes).
std::string checkTensor(const char *name, const fa_tensor &t, fa_dtype dtype,
                        int rank, const Alignment &align = {},
                        Layout layout = Layout::Contiguous) {
  Message os;
  if (t.data == 0) {
    os << name << ".data is null";
    return os.str();
  }
  if (t.dtype != dtype) {
    os << name << ".dtype is " << dtypeText(t.dtype) << ", expected "
       << fa_dtype_name(dtype);
    return os.str();
  }
  if (t.rank != rank) {
    os << name << ".rank is " << t.rank << ", expected " << rank;
    return os.str();
  }
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] <= 0 || t.shape[i] > INT32_MAX) {
      os << name << ".shape " << join(t.shape, rank) << " has size "
         << t.shape[i] << " in dimension " << i
         << "; sizes must be in [1, 2^31-1]";
      return os.str();
    }
    count *= t.shape[i]; // at most 4 factors < 2^31 each: checked below
    if (count > INT32_MAX) {
      os << name << ".shape " << join(t.shape, rank)
         << " has more than 2^31-1 elements, which the kernels' 32-bit "
            "indexing cannot address";
      return os.str();
    }
  }
  if (layout != Layout::Contiguous) {
    std::string err = checkStrides(name, t, layout, align);
    if (!err.empty())
      return err;
  }
  int64_t expect = 1;
  for (int i = rank - 1; layout == Layout::Contiguous && i >= 0; --i) {
    if (t.strides[i] != expect) {
      std::vector<int64_t> want(rank);
      int64_t s = 1;
      for (int j = rank - 1; j >= 0; --j) {
        want[j] = s;
        s *= t.shape[j];
      }
      os << name << ".strides are " << join(t.strides, rank) << " for shape "
         << join(t.shape, rank) << ", expected " << join(want)
         << " (contiguous row-major)";
      return os.str();
    }
    expect *= t.shape[i];
  }
  if (t.data % align.bytes != 0) {
    os << name << ".data 0x" << std::hex << t.data << std::dec << " is not "
       << align.bytes << "-byte aligned" << align.why;
    return os.str();
  }
  return "";
}

std::string checkShape(const char *name, const fa_tensor &t,
                       const std::vector<int64_t> &want, const char *meaning) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (t.shape[i] != want[i]) {
      std::ostringstream os;
      os << name << ".shape is " << join(t.shape, t.rank) << ", expected "
         << join(want) << " (" << meaning << ")";
      return os.str();
    }
  }
  return "";
}

/// What one argument tensor must be: checkTensor's dtype, rank and
/// alignment, then checkShape's shape, which `meaning` explains.
struct TensorRule {
  const char *name;
  const fa_tensor &tensor;
  fa_dtype dtype;
  int rank;
  Alignment align;
  std::vector<int64_t> shape;
  const char *meaning;
  Layout layout = Layout::Contiguous;
};

/// The first rule broken, in order (so the message names the first bad
/// argument); "" if none is.
std::string checkTensors(const std::vector<TensorRule> &rules) {
  for (const TensorRule &r : rules) {
    std::string err =
        checkTensor(r.name, r.tensor, r.dtype, r.rank, r.align, r.layout);
    if (err.empty())
      err = checkShape(r.name, r.tensor, r.shape, r.meaning);
    if (!err.empty())
      return err;
  }
  return "";
}

std::string checkScale(float scale) {
  if (!std::isfinite(scale) || scale == 0.0f) {
    std::ostringstream os;
    os << "scale is " << scale << "; it must be finite and non-zero";
    return os.str();
  }
  return "";
}

/// The problem sizes, read from q and k.
struct Sizes {
  int64_t b, h, hkv, nq, nk, d, dv;
};

/// Rows of D elements (q, k, dq, dk) and of Dv (v, o, d_o, dv).
Alignment qkAlign(const KernelConfig &c) {
  return alignmentFor(c, c.headDim, c.dtype);
}
Alignment vAlign(const KernelConfig &c) {
  return alignmentFor(c, c.headDimV, c.dtype);
}

/// Checks q, k, v against each other and the kernel's config.
std::string checkQKV(const KernelConfig &c, const fa_tensor &q,
                     const fa_tensor &k, const fa_tensor &v, Sizes &s) {
  std::string err;
  Layout in = c.strided() ? Layout::StridedInput : Layout::Contiguous;
  if (!(err = checkTensor("q", q, c.dtype, 4, qkAlign(c), in)).empty() ||
      !(err = checkTensor("k", k, c.dtype, 4, qkAlign(c), in)).empty() ||
      !(err = checkTensor("v", v, c.dtype, 4, vAlign(c), in)).empty())
    return err;
  s = {q.shape[0], q.shape[1], k.shape[1], q.shape[2],
       k.shape[2], q.shape[3], v.shape[3]};
  Message os;
  if (s.d != c.headDim) {
    os << "q.shape " << join(q.shape, 4) << " has head dim " << s.d
       << ", but kernel '" << c.tag << "' was built for head dim " << c.headDim;
    return os.str();
  }
  if (!(err = checkShape("k", k, {s.b, k.shape[1], k.shape[2], s.d},
                         "[B,Hkv,Nk,D] with B and D of q"))
           .empty())
    return err;
  if (s.h % s.hkv != 0) {
    os << "q has " << s.h << " heads and k has " << s.hkv
       << "; the query head count must be a multiple of the key head count";
    return os.str();
  }
  if (!(err = checkShape("v", v, {s.b, s.hkv, s.nk, v.shape[3]},
                         "[B,Hkv,Nk,Dv] with B, Hkv, Nk of k"))
           .empty())
    return err;
  if (s.dv != c.headDimV) {
    os << "v.shape " << join(v.shape, 4) << " has value head dim " << s.dv
       << ", but kernel '" << c.tag << "' was built for " << c.headDimV;
    return os.str();
  }
  if (s.b > kMaxGridYZ || s.h > kMaxGridYZ) {
    os << "batch " << s.b << " or heads " << s.h
       << " exceeds the grid limit of " << kMaxGridYZ;
    return os.str();
  }
  return "";
}

struct Range {
  const char *name;
  uint64_t begin, end;
};

/// Outputs must not overlap any other tensor: the kernels read inputs while
/// writing outputs, and two outputs in one buffer race.
std::string checkOverlap(const std::vector<NamedTensor> &all,
                         const std::vector<const char *> &outputs) {
  std::vector<Range> ranges;
  for (auto &[name, t] : all)
    ranges.push_back({name, t->data, t->data + tensorBytes(*t)});
  for (const Range &a : ranges) {
    bool isOutput = false;
    for (const char *o : outputs)
      isOutput |= std::strcmp(o, a.name) == 0;
    if (!isOutput)
      continue;
    for (const Range &b : ranges) {
      if (a.name == b.name || a.begin >= b.end || b.begin >= a.end)
        continue;
      std::ostringstream os;
      os << "output " << a.name << " [0x" << std::hex << a.begin << ", 0x"
         << a.end << ") overlaps " << b.name << " [0x" << b.begin << ", 0x"
         << b.end << ")";
      return os.str();
    }
  }
  return "";
}

} // namespace

/// Whether a call gives sinks exactly when the kernel has them: the plain
/// and _ex launches would leave a sink kernel's last parameter unset, the
/// _sinks launches would pass one a plain kernel does not take. Calls that
/// launch nothing (mods unchecked: tensor maps, grids) may omit them.
std::string checkSinkKind(const KernelConfig &c, const ModArgList &mods,
                          const SinkArgs &sinks) {
  if (!mods.checked || c.sinks == sinks.given())
    return "";
  std::string api = std::string("fa_attention_") +
                    (c.direction == FA_DIRECTION_FWD ? "forward" : "backward") +
                    (c.paged     ? "_paged"
                     : c.splitKv ? "_splitkv"
                     : c.varlen  ? "_varlen"
                                 : "");
  if (c.sinks)
    return "kernel '" + c.tag + "' has attention sinks; launch it with " +
           api + "_sinks and a sinks tensor f32 [H]";
  return "kernel '" + c.tag + "' has no attention sinks; launch it with " +
         api + (c.varlen ? "" : " (or _ex)") +
         ", or find a kernel with fa_kernel_query.sinks = 1";
}

/// The sinks (and a backward's d_sinks) of valid q: f32 [H], contiguous,
/// 16-byte aligned; no output of the call overlapping another tensor.
std::string checkSinkTensors(const KernelConfig &c, const SinkArgs &sinks,
                             const fa_tensor &q,
                             const std::vector<NamedTensor> &all,
                             std::vector<const char *> outputs) {
  if (!sinks.sinks)
    return "sinks is null; a kernel with sinks takes them as f32 [H]";
  std::vector<int64_t> heads{q.shape[1]};
  const char *meaning = "[H], one logit per query head of q";
  std::vector<TensorRule> rules{{"sinks", *sinks.sinks, FA_DTYPE_F32, 1,
                                 Alignment{}, heads, meaning}};
  if (c.direction == FA_DIRECTION_BWD) {
    if (!sinks.dSinks)
      return "d_sinks is null; a backward with sinks writes d_sinks f32 [H]";
    rules.push_back({"d_sinks", *sinks.dSinks, FA_DTYPE_F32, 1, Alignment{},
                     heads, "[H], the gradient of sinks"});
    outputs.push_back("d_sinks");
  }
  std::string err = checkTensors(rules);
  return err.empty() ? checkOverlap(all, outputs) : err;
}

uint64_t semaphoreBytes(const fa_attention_backward_args &a) {
  // 64-row query tiles: the block_q of every deterministic kernel.
  uint64_t b = a.q.shape[0], h = a.q.shape[1], nq = a.q.shape[2];
  return b * h * ceilDiv(nq, 64) * 4;
}

uint64_t tensorBytes(const fa_tensor &t) {
  if (t.rank < 0 || t.rank > FA_MAX_RANK || !validDtype(t.dtype))
    return 0;
  uint64_t n = static_cast<uint64_t>(elementSize(t.dtype));
  bool positiveStrides = t.rank > 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0)
      return 0;
    positiveStrides &= t.strides[i] > 0;
  }
  // From the first addressed byte to past the last: the product of the
  // sizes for a contiguous tensor.
  if (positiveStrides)
    return n * addressedElements(t);
  for (int i = 0; i < t.rank; ++i)
    n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

std::vector<NamedTensor> tensorsOf(const fa_attention_args &a) {
  return {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}, {"lse", &a.lse}};
}

std::vector<NamedTensor> tensorsOf(const fa_attention_backward_args &a) {
  return {{"q", &a.q},
          {"k", &a.k},
          {"v", &a.v},
          {"o", &a.o},
          {"d_o", &a.d_o},
          {"lse", &a.lse},
          {"dq", &a.dq},
          {"dk", &a.dk},
          {"dv", &a.dv},
          {"delta", &a.delta},
          {"dq_accum", &a.dq_accum}};
}

namespace {
/// The element type of a map over a tensor of `dtype` (f32 as FLOAT32 for
/// TF32 kernels too: TMA copies the bits, the kernel rounds them itself).
CUtensorMapDataType mapDataType(fa_dtype dtype) {
  switch (dtype) {
  case FA_DTYPE_BF16:
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case FA_DTYPE_F8E4M3:
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  case FA_DTYPE_F32:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  default:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  }
}

/// The maps of `c` over the tensors q, k, v (and d_o for a backward, its
/// "do" map).
std::string mapArgs(const KernelConfig &c, const fa_tensor &q,
                    const fa_tensor &k, const fa_tensor &v,
                    const fa_tensor *dO, std::vector<fa_tensor_map_args> &out) {
  out.clear();
  for (const TensorMapSpec &spec : c.tensorMaps) {
    // A literal, so that the result outlives the bundle.
    const char *name = spec.tensor == "q"   ? "q"
                       : spec.tensor == "k" ? "k"
                       : spec.tensor == "v" ? "v"
                                            : "do";
    if (name[0] == 'd' && !dO)
      return "kernel '" + c.tag + "' takes a do tensor map, which only a "
             "backward launch has";
    const fa_tensor &t = name[0] == 'q'   ? q
                         : name[0] == 'k' ? k
                         : name[0] == 'v' ? v
                                          : *dO;
    uint64_t elem = static_cast<uint64_t>(elementSize(t.dtype));
    fa_tensor_map_args m{};
    m.tensor = name;
    m.param = spec.param;
    m.data_type = mapDataType(t.dtype);
    // [B, Hk, N, D] viewed as (D, N, B*Hk), or with the caller's strides
    // as (D, N, Hk, B): rows past N of each head lie outside the map and
    // read as zero.
    m.rank = static_cast<uint32_t>(spec.rank);
    m.global_address = t.data;
    m.global_dim[0] = static_cast<uint64_t>(t.shape[3]);
    m.global_dim[1] = static_cast<uint64_t>(t.shape[2]);
    if (spec.pool) {
      // A pool [pages, page_size, Hkv, D] as (D, page_size, Hkv, pages):
      // a box of 16 keys lies in one page.
      m.global_dim[1] = static_cast<uint64_t>(t.shape[1]);
      m.global_dim[2] = static_cast<uint64_t>(t.shape[2]);
      m.global_dim[3] = static_cast<uint64_t>(t.shape[0]);
      for (int i = 0; i < 3; ++i)
        m.global_strides[i] =
            elem * static_cast<uint64_t>(t.strides[i == 2 ? 0 : i + 1]);
    } else if (spec.rank == 4) {
      m.global_dim[2] = static_cast<uint64_t>(t.shape[1]);
      m.global_dim[3] = static_cast<uint64_t>(t.shape[0]);
      for (int i = 0; i < 3; ++i)
        m.global_strides[i] = elem * static_cast<uint64_t>(t.strides[2 - i]);
    } else {
      m.global_dim[2] = static_cast<uint64_t>(t.shape[0] * t.shape[1]);
      m.global_strides[0] = elem * m.global_dim[0];
      m.global_strides[1] = m.global_strides[0] * m.global_dim[1];
    }
    for (int i = 0; i < spec.rank; ++i) {
      m.box_dim[i] = static_cast<uint32_t>(spec.box[i]);
      m.element_strides[i] = 1;
    }
    m.interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
    m.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    switch (spec.l2PromotionBytes) {
    case 64:
      m.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
      break;
    case 128:
      m.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
      break;
    case 256:
      m.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
      break;
    default:
      m.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
    }
    m.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;

    // TMA reads 16-byte aligned rows; checkTensor and the manifest's head
    // dims imply it today, this keeps the encode from failing if they change.
    // TMA takes strides that are multiples of 16 bytes below 2^40.
    const char *const kStrideNames[] = {"row", "head",
                                        spec.pool ? "page" : "batch"};
    for (int i = 0; spec.rank == 4 && i < 3; ++i) {
      if (m.global_strides[i] % 16 == 0 && m.global_strides[i] < (1ull << 40))
        continue;
      std::ostringstream os;
      os << name << "_map: TMA needs strides that are multiples of 16 bytes "
         << "(below 2^40), but " << name << "'s " << kStrideNames[i]
         << " stride is " << m.global_strides[i] / elem << " elements = "
         << m.global_strides[i] << " bytes (" << name << ".strides "
         << join(t.strides, 4) << "); make " << name << " contiguous";
      return os.str();
    }
    if (m.global_address % 16 != 0 || m.global_strides[0] % 16 != 0) {
      std::ostringstream os;
      os << name << "_map: TMA needs a 16-byte aligned address and row stride, "
         << "got 0x" << std::hex << m.global_address << std::dec << " and "
         << m.global_strides[0] << " bytes (" << name << ".shape "
         << join(t.shape, 4) << ")";
      return os.str();
    }
    out.push_back(m);
  }
  return "";
}
} // namespace

std::string tensorMapArgs(const KernelConfig &c, const fa_attention_args &a,
                          std::vector<fa_tensor_map_args> &out) {
  return mapArgs(c, a.q, a.k, a.v, nullptr, out);
}

std::string tensorMapArgs(const KernelConfig &c,
                          const fa_attention_backward_args &a,
                          std::vector<fa_tensor_map_args> &out) {
  return mapArgs(c, a.q, a.k, a.v, &a.d_o, out);
}

namespace {

std::string hexAddress(uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

/// The checks of a forward's tensors and scale, plain or split-KV.
std::string checkForward(const KernelConfig &c, const fa_attention_args &a,
                         const ModArgList &mods) {
  Sizes s;
  std::string err;
  if (!(err = checkQKV(c, a.q, a.k, a.v, s)).empty())
    return err;
  // A packed tile holds at least one query of each head of its group.
  if (c.packGqa && s.h / s.hkv > c.blockQ)
    return "kernel '" + c.tag + "' packs the query heads of a key head into " +
           std::to_string(c.blockQ) + " rows, but q has " +
           std::to_string(s.h) + " heads on " + std::to_string(s.hkv) +
           " key heads (" + std::to_string(s.h / s.hkv) +
           " per key head); use an unpacked kernel";
  std::vector<int64_t> oShape{s.b, s.h, s.nq, s.dv}, rowShape{s.b, s.h, s.nq};
  // An fp8 kernel writes O in bf16.
  fa_dtype oType = c.dtype == FA_DTYPE_F8E4M3 ? FA_DTYPE_BF16 : c.dtype;
  Alignment vRows = alignmentFor(c, c.headDimV, oType), wholeRows;
  err = checkTensors({
      {"o", a.o, oType, 4, vRows, oShape, "[B,H,Nq,Dv] from q and v",
       c.strided() ? Layout::StridedOutput : Layout::Contiguous},
      {"lse", a.lse, FA_DTYPE_F32, 3, wholeRows, rowShape, "[B,H,Nq] from q"},
  });
  if (!err.empty() || !(err = checkScale(a.scale)).empty() ||
      !(err = checkModArgs(c, mods, a.q, a.k)).empty() ||
      !(err = checkOverlap(tensorsOf(a, mods), {"o", "lse"})).empty())
    return err;
  std::vector<fa_tensor_map_args> maps;
  return tensorMapArgs(c, a, maps);
}

} // namespace

std::string checkArguments(const KernelConfig &c, const fa_attention_args &a,
                           const ModArgList &mods, const SinkArgs &sinks) {
  if (c.direction != FA_DIRECTION_FWD)
    return "kernel '" + c.tag + "' is a backward kernel; use a fwd kernel";
  if (c.dtype == FA_DTYPE_F8E4M3)
    return "kernel '" + c.tag + "' is an fp8 forward, which takes descale "
           "tensors; use fa_attention_forward_fp8";
  std::string err = checkSinkKind(c, mods, sinks);
  if (!err.empty())
    return err;
  if (c.splitKv)
    return "kernel '" + c.tag + "' is a split-KV kernel (a split forward and "
           "a merge); use fa_attention_forward_splitkv";
  if (c.varlen)
    return "kernel '" + c.tag + "' is a varlen forward (packed sequences); "
           "use fa_attention_forward_varlen";
  err = checkForward(c, a, mods);
  if (!err.empty() || !sinks.given())
    return err;
  return checkSinkTensors(c, sinks, a.q, tensorsOf(a, mods, sinks),
                          {"o", "lse"});
}

std::string checkFp8Arguments(const KernelConfig &c,
                              const fa_attention_args &a,
                              const fa_tensor descales[3]) {
  if (c.dtype != FA_DTYPE_F8E4M3)
    return "kernel '" + c.tag + "' is a " + fa_dtype_name(c.dtype) +
           " kernel, not an fp8 forward; use fa_attention_forward";
  if (!descales)
    return "descales is null (expected descale_q, descale_k, descale_v)";
  std::string err = checkForward(c, a, ModArgList{});
  if (!err.empty())
    return err;
  const int64_t b = a.q.shape[0], h = a.q.shape[1], hkv = a.k.shape[1];
  std::vector<int64_t> perHead{b, hkv};
  Alignment words;
  words.bytes = 4;
  // Block descales: Q's factor per block of 64 query rows of each query
  // head, K's per block of 64 keys of each key head; V's per key head.
  const int64_t block = c.descaleBlock;
  const int qkRank = block ? 3 : 2;
  std::vector<int64_t> qShape = perHead, kShape = perHead;
  const char *qExpected = "[B,Hkv] from q and k", *kExpected = qExpected;
  if (block) {
    qShape = {b, h, ceilDiv(a.q.shape[2], block)};
    kShape = {b, hkv, ceilDiv(a.k.shape[2], block)};
    qExpected = "[B,H,ceil(Nq/64)] from q";
    kExpected = "[B,Hkv,ceil(Nk/64)] from k";
  }
  err = checkTensors({
      {"descale_q", descales[0], FA_DTYPE_F32, qkRank, words, qShape,
       qExpected},
      {"descale_k", descales[1], FA_DTYPE_F32, qkRank, words, kShape,
       kExpected},
      {"descale_v", descales[2], FA_DTYPE_F32, 2, words, perHead,
       "[B,Hkv] from q and k"},
  });
  // Descales of the other form: say which form the kernel reads.
  if (!err.empty() &&
      (descales[0].rank != qkRank || descales[1].rank != qkRank))
    err += c.descaleBlock
               ? "; kernel '" + c.tag + "' reads Q and K descales per " +
                     std::to_string(c.descaleBlock) +
                     "-row block (fa_kernel_info.descale_block)"
               : "; kernel '" + c.tag +
                     "' reads descales per batch and "
                     "key head (fa_kernel_info.descale_block 0)";
  if (!err.empty())
    return err;
  return checkOverlap(tensorsOfFp8(a, descales), {"o", "lse"});
}

std::vector<NamedTensor> tensorsOfFp8(const fa_attention_args &a,
                                      const fa_tensor descales[3]) {
  std::vector<NamedTensor> all = tensorsOf(a);
  all.push_back({"descale_q", &descales[0]});
  all.push_back({"descale_k", &descales[1]});
  all.push_back({"descale_v", &descales[2]});
  return all;
}

uint64_t splitKvPartialElements(int64_t b, int64_t h, int64_t nq, int64_t dv,
                                int64_t splits) {
  return static_cast<uint64_t>(splits) * b * h * nq * dv;
}

uint64_t splitKvWorkspaceBytes(int64_t b, int64_t h, int64_t nq, int64_t dv,
                               int64_t splits) {
  // o_part [S,B,H,Nq,Dv] then lse_part [S,B,H,Nq], f32 (docs/ABI.md).
  return 4 * (splitKvPartialElements(b, h, nq, dv, splits) +
              static_cast<uint64_t>(splits) * b * h * nq);
}

fa_tensor splitKvWorkspaceTensor(CUdeviceptr workspace, uint64_t bytes) {
  fa_tensor t{};
  t.data = workspace;
  t.dtype = FA_DTYPE_F32;
  t.rank = 1;
  t.shape[0] = static_cast<int64_t>(bytes / 4);
  t.strides[0] = 1;
  return t;
}

fa_tensor usedSplitKvWorkspace(const fa_attention_args &a,
                               const SplitKvWorkspace &w) {
  return splitKvWorkspaceTensor(
      w.workspace, splitKvWorkspaceBytes(a.q.shape[0], a.q.shape[1],
                                         a.q.shape[2], a.v.shape[3],
                                         w.splits));
}

namespace {

/// The splits and the workspace of a split-KV launch whose tensors (`all`,
/// which the workspace must not overlap) passed their checks.
std::string checkSplitWorkspace(const fa_attention_args &a,
                                const SplitKvWorkspace &w,
                                std::vector<NamedTensor> all) {
  int64_t b = a.q.shape[0], h = a.q.shape[1], nq = a.q.shape[2],
          dv = a.v.shape[3];
  if (w.splits < 1 || static_cast<int64_t>(w.splits) * b > 65535)
    return "splits is " + std::to_string(w.splits) + " for batch " +
           std::to_string(b) + "; it must be at least 1 and batch x splits "
           "(the grid's z) at most 65535";
  if (splitKvPartialElements(b, h, nq, dv, w.splits) > INT32_MAX)
    return "the partial O of " + std::to_string(w.splits) + " splits of [" +
           std::to_string(b) + "," + std::to_string(h) + "," +
           std::to_string(nq) + "," + std::to_string(dv) +
           "] has more than 2^31 - 1 elements; use fewer splits";
  uint64_t need = splitKvWorkspaceBytes(b, h, nq, dv, w.splits);
  if (w.workspace == 0 || w.workspace % 16 != 0)
    return "workspace " + hexAddress(w.workspace) +
           " must be a non-null, 16-byte aligned device address";
  if (w.bytes < need)
    return "workspace_bytes is " + std::to_string(w.bytes) + ", but " +
           std::to_string(w.splits) + " splits of [" + std::to_string(b) +
           "," + std::to_string(h) + "," + std::to_string(nq) + "," +
           std::to_string(dv) + "] need " + std::to_string(need) +
           " (fa_splitkv_workspace_bytes)";
  fa_tensor ws = splitKvWorkspaceTensor(w.workspace, need);
  all.push_back({"workspace", &ws});
  return checkOverlap(all, {"workspace"});
}

/// A paged cache's pool ("k" or "v"): [num_pages, page_size, Hkv, E], its
/// pages' rows one row stride apart (the kernel addresses row
/// page x page_size + n % page_size).
std::string checkPagePool(const char *name, const fa_tensor &t,
                          const fa_paged_kv &p, int64_t hkv, int64_t cols) {
  std::string err = checkShape(
      name, t, {p.num_pages, p.page_size, hkv, cols},
      "[num_pages,page_size,Hkv,D] of the paged cache, Hkv of k");
  if (!err.empty())
    return err;
  if (t.strides[0] != p.page_size * t.strides[1])
    return std::string(name) + ".strides are " + join(t.strides, 4) +
           ": a page's rows must follow each other (strides[0] = page_size "
           "x strides[1] = " + std::to_string(p.page_size * t.strides[1]) +
           ")";
  return "";
}

/// The paged cache's own fields: sizes the kernel indexes with i32, and the
/// page table and seqused_k addresses (4-byte aligned i32 arrays).
std::string checkPagedFields(const fa_paged_kv &p, int64_t batch) {
  Message os;
  if (p.max_pages < 1 || p.num_pages < 1 || p.page_size < 16 ||
      p.page_size % 16 != 0) {
    os << "paged cache has max_pages " << p.max_pages << ", page_size "
       << p.page_size << " and num_pages " << p.num_pages
       << "; max_pages and num_pages must be >= 1 and page_size a positive "
          "multiple of 16";
    return os.str();
  }
  if (int64_t{p.max_pages} * p.page_size > INT32_MAX ||
      batch * p.max_pages > INT32_MAX) {
    os << "paged cache of max_pages " << p.max_pages << " x page_size "
       << p.page_size << " keys for batch " << batch
       << ": max_pages x page_size and batch x max_pages must stay below 2^31";
    return os.str();
  }
  for (auto [name, ptr] : {std::pair<const char *, CUdeviceptr>{
                               "page_table", p.page_table},
                           {"seqused_k", p.seqused_k}})
    if (ptr == 0 || ptr % 4 != 0)
      return std::string(name) + " " + hexAddress(ptr) +
             " must be a non-null, 4-byte aligned device address (i32)";
  return "";
}

/// The checks of a paged forward's tensors: q, the pools, o and lse as a
/// strided split forward takes them.
std::string checkPagedForward(const KernelConfig &c,
                              const fa_attention_args &a,
                              const fa_paged_kv &p) {
  std::string err;
  Layout in = Layout::StridedInput;
  if (!(err = checkTensor("q", a.q, c.dtype, 4, qkAlign(c), in)).empty() ||
      !(err = checkTensor("k", a.k, c.dtype, 4, qkAlign(c), in)).empty() ||
      !(err = checkTensor("v", a.v, c.dtype, 4, vAlign(c), in)).empty() ||
      !(err = checkPagedFields(p, a.q.shape[0])).empty())
    return err;
  Sizes s{a.q.shape[0], a.q.shape[1], a.k.shape[2], a.q.shape[2],
          int64_t{p.max_pages} * p.page_size, a.q.shape[3], a.v.shape[3]};
  Message os;
  if (s.d != c.headDim || s.dv != c.headDimV) {
    os << "q.shape " << join(a.q.shape, 4) << " and v.shape "
       << join(a.v.shape, 4) << " have head dims " << s.d << " and " << s.dv
       << ", but kernel '" << c.tag << "' was built for " << c.headDim
       << " and " << c.headDimV;
    return os.str();
  }
  if (!(err = checkPagePool("k", a.k, p, s.hkv, s.d)).empty() ||
      !(err = checkPagePool("v", a.v, p, s.hkv, s.dv)).empty())
    return err;
  if (s.h % s.hkv != 0) {
    os << "q has " << s.h << " heads and k has " << s.hkv
       << "; the query head count must be a multiple of the key head count";
    return os.str();
  }
  if (c.packGqa && s.h / s.hkv > c.blockQ)
    return "kernel '" + c.tag + "' packs the query heads of a key head into " +
           std::to_string(c.blockQ) + " rows, but q has " +
           std::to_string(s.h) + " heads on " + std::to_string(s.hkv) +
           " key heads; use an unpacked kernel";
  if (s.b > kMaxGridYZ || s.h > kMaxGridYZ) {
    os << "batch " << s.b << " or heads " << s.h
       << " exceeds the grid limit of " << kMaxGridYZ;
    return os.str();
  }
  Alignment vRows = alignmentFor(c, c.headDimV, c.dtype), wholeRows;
  return checkTensors({
      {"o", a.o, c.dtype, 4, vRows, {s.b, s.h, s.nq, s.dv},
       "[B,H,Nq,Dv] from q and v", Layout::StridedOutput},
      {"lse", a.lse, FA_DTYPE_F32, 3, wholeRows, {s.b, s.h, s.nq},
       "[B,H,Nq] from q"},
  });
}

} // namespace

std::vector<NamedTensor> tensorsOfPaged(const fa_attention_args &a,
                                        const fa_paged_kv &p,
                                        PagedTables &tables) {
  tables.pageTable = fa_tensor{};
  tables.pageTable.data = p.page_table;
  tables.pageTable.dtype = FA_DTYPE_I32;
  tables.pageTable.rank = 2;
  tables.pageTable.shape[0] = a.q.shape[0];
  tables.pageTable.shape[1] = p.max_pages;
  tables.pageTable.strides[0] = p.max_pages;
  tables.pageTable.strides[1] = 1;
  tables.sequsedK = fa_tensor{};
  tables.sequsedK.data = p.seqused_k;
  tables.sequsedK.dtype = FA_DTYPE_I32;
  tables.sequsedK.rank = 1;
  tables.sequsedK.shape[0] = a.q.shape[0];
  tables.sequsedK.strides[0] = 1;
  std::vector<NamedTensor> all = tensorsOf(a);
  all.push_back({"page_table", &tables.pageTable});
  all.push_back({"seqused_k", &tables.sequsedK});
  return all;
}

namespace {

/// A paged kernel and a cache given ("" if so).
std::string checkPagedKernel(const KernelConfig &c, const fa_paged_kv *paged) {
  if (c.direction != FA_DIRECTION_FWD || !c.paged)
    return "kernel '" + c.tag + "' is not a paged-KV kernel; use "
           "fa_kernel_find_paged for one";
  if (!paged)
    return "paged is null (expected the page table, seqused_k and the "
           "cache's sizes)";
  return "";
}

} // namespace

std::string pagedTensorMapArgs(const KernelConfig &c,
                               const fa_attention_args &a,
                               const fa_paged_kv *paged,
                               std::vector<fa_tensor_map_args> &out) {
  out.clear();
  std::string err = checkPagedKernel(c, paged);
  if (err.empty())
    err = checkPagedForward(c, a, *paged);
  return err.empty() ? tensorMapArgs(c, a, out) : err;
}

/// The [B, Hkv, capacity, D] cache the pools of `k` hold for `paged`: the
/// extents a mod_arg's "kv_heads" and "nk" dims read.
static fa_tensor logicalCache(const fa_attention_args &a,
                              const fa_paged_kv &paged) {
  fa_tensor k = a.k;
  int64_t shape[4] = {a.q.shape[0], a.k.shape[2],
                      int64_t{paged.max_pages} * paged.page_size, a.k.shape[3]};
  std::copy(shape, shape + 4, k.shape);
  return k;
}

std::string checkPagedArguments(const KernelConfig &c,
                                const fa_attention_args &a,
                                const fa_paged_kv *paged,
                                const SplitKvWorkspace &w,
                                const ModArgList &mods, const SinkArgs &sinks) {
  if (std::string err = checkPagedKernel(c, paged); !err.empty())
    return err;
  std::string err = checkSinkKind(c, mods, sinks);
  if (!err.empty() || !(err = checkPagedForward(c, a, *paged)).empty() ||
      !(err = checkScale(a.scale)).empty() ||
      !(err = checkModArgs(c, mods, a.q, logicalCache(a, *paged))).empty())
    return err;
  PagedTables tables;
  std::vector<NamedTensor> all = tensorsOfPaged(a, *paged, tables);
  appendModArgs(all, mods);
  if (sinks.sinks)
    all.push_back({"sinks", sinks.sinks});
  if (sinks.given() &&
      !(err = checkSinkTensors(c, sinks, a.q, all, {"o", "lse"})).empty())
    return err;
  if (!(err = checkOverlap(all, {"o", "lse"})).empty())
    return err;
  // A TMA kernel's pool maps (their strides).
  std::vector<fa_tensor_map_args> maps;
  if (!(err = tensorMapArgs(c, a, maps)).empty())
    return err;
  return checkSplitWorkspace(a, w, all);
}

std::string checkSplitKvArguments(const KernelConfig &c,
                                  const fa_attention_args &a,
                                  const SplitKvWorkspace &w,
                                  const ModArgList &mods,
                                  const SinkArgs &sinks) {
  if (c.direction != FA_DIRECTION_FWD || !c.splitKv)
    return "kernel '" + c.tag + "' is not a split-KV kernel; use "
           "fa_attention_forward or fa_attention_backward";
  if (c.paged)
    return "kernel '" + c.tag + "' reads a paged KV cache; use "
           "fa_attention_forward_paged";
  // The tensors first: the workspace's size follows from their shapes.
  std::string err = checkSinkKind(c, mods, sinks);
  if (!err.empty() || !(err = checkForward(c, a, mods)).empty())
    return err;
  if (sinks.given() &&
      !(err = checkSinkTensors(c, sinks, a.q, tensorsOf(a, mods, sinks),
                               {"o", "lse"}))
           .empty())
    return err;
  return checkSplitWorkspace(a, w, tensorsOf(a, mods, sinks));
}

std::vector<NamedTensor> tensorsOfFp8(const fa_attention_backward_args &a,
                                      const fa_tensor descales[4]) {
  std::vector<NamedTensor> all = tensorsOf(a);
  all.push_back({"descale_q", &descales[0]});
  all.push_back({"descale_k", &descales[1]});
  all.push_back({"descale_v", &descales[2]});
  all.push_back({"descale_do", &descales[3]});
  return all;
}

/// The fp8 backward's descale_q, _k, _v, _do: f32 [B, Hkv], contiguous.
static std::string checkBackwardDescales(const fa_attention_backward_args &a,
                                         const fa_tensor descales[4]) {
  std::vector<int64_t> perHead{a.q.shape[0], a.k.shape[1]};
  Alignment words;
  words.bytes = 4;
  const char *from = "[B,Hkv] from q and k";
  return checkTensors({
      {"descale_q", descales[0], FA_DTYPE_F32, 2, words, perHead, from},
      {"descale_k", descales[1], FA_DTYPE_F32, 2, words, perHead, from},
      {"descale_v", descales[2], FA_DTYPE_F32, 2, words, perHead, from},
      {"descale_do", descales[3], FA_DTYPE_F32, 2, words, perHead, from},
  });
}

std::string checkArguments(const KernelConfig &c,
                           const fa_attention_backward_args &a,
                           const ModArgList &mods, const SinkArgs &sinks,
                           bool varlenView, const fa_tensor *descales) {
  if (c.direction != FA_DIRECTION_BWD)
    return "kernel '" + c.tag + "' is a forward kernel; use a bwd kernel";
  const bool fp8 = c.dtype == FA_DTYPE_F8E4M3;
  if (fp8 && !descales)
    return "kernel '" + c.tag +
           "' is an fp8 backward, which takes descale "
           "tensors; use fa_attention_backward_fp8";
  if (!fp8 && descales)
    return "kernel '" + c.tag + "' is a " + fa_dtype_name(c.dtype) +
           " kernel, not an fp8 backward; use fa_attention_backward";
  if (c.varlen && !varlenView)
    return "kernel '" + c.tag + "' is a varlen backward (packed sequences); "
           "use fa_attention_backward_varlen";
  Sizes s;
  std::string err = checkSinkKind(c, mods, sinks);
  if (!err.empty() || !(err = checkQKV(c, a.q, a.k, a.v, s)).empty())
    return err;
  std::vector<int64_t> qShape{s.b, s.h, s.nq, s.d},
      oShape{s.b, s.h, s.nq, s.dv}, rowShape{s.b, s.h, s.nq},
      kShape{s.b, s.hkv, s.nk, s.d}, vShape{s.b, s.hkv, s.nk, s.dv};
  Alignment qkRows = qkAlign(c), vRows = vAlign(c), wholeRows,
            accumRows = alignmentFor(c, c.headDim, FA_DTYPE_F32);
  // fp8: o (the forward's) and the gradients are bf16, d_o e4m3.
  const fa_dtype grad = fp8 ? FA_DTYPE_BF16 : c.dtype;
  Alignment gradQkRows = fp8 ? alignmentFor(c, c.headDim, grad) : qkRows,
            gradVRows = fp8 ? alignmentFor(c, c.headDimV, grad) : vRows;
  const char *fromQV = "[B,H,Nq,Dv] from q and v";
  // A strided backward reads o and d_o and writes dq, dk and dv through
  // their strides; LSE and the workspaces stay contiguous.
  Layout in = c.strided() ? Layout::StridedInput : Layout::Contiguous,
         out = c.strided() ? Layout::StridedOutput : Layout::Contiguous;
  err = checkTensors({
      {"o", a.o, grad, 4, gradVRows, oShape, fromQV, in},
      {"d_o", a.d_o, c.dtype, 4, vRows, oShape, fromQV, in},
      {"lse", a.lse, FA_DTYPE_F32, 3, wholeRows, rowShape, "[B,H,Nq] from q"},
      {"dq", a.dq, grad, 4, gradQkRows, qShape, "the shape of q", out},
      {"dk", a.dk, grad, 4, gradQkRows, kShape, "the shape of k", out},
      {"dv", a.dv, grad, 4, gradVRows, vShape, "the shape of v", out},
      {"delta", a.delta, FA_DTYPE_F32, 3, wholeRows, rowShape,
       "workspace [B,H,Nq] from q"},
      {"dq_accum", a.dq_accum, FA_DTYPE_F32, 4, accumRows, qShape,
       "workspace [B,H,Nq,D] from q"},
  });
  if (!err.empty() || !(err = checkScale(a.scale)).empty() ||
      !(err = checkModArgs(c, mods, a.q, a.k)).empty() ||
      (fp8 && !(err = checkBackwardDescales(a, descales)).empty()) ||
      !(err = checkOverlap(fp8 ? tensorsOfFp8(a, descales) : tensorsOf(a, mods),
                           {"dq", "dk", "dv", "delta", "dq_accum"}))
           .empty())
    return err;
  // The main kernel's grid x: key blocks times column slices (docs/ABI.md).
  int64_t gridX = (s.nk + c.blockKV - 1) / c.blockKV * c.dsplit;
  if (gridX > INT32_MAX)
    return "nk " + std::to_string(s.nk) + " needs a grid x of " +
           std::to_string(gridX) + " blocks for kernel '" + c.tag +
           "', more than the limit of " + std::to_string(INT32_MAX);
  if (sinks.given() &&
      !(err = checkSinkTensors(c, sinks, a.q, tensorsOf(a, mods, sinks),
                               {"dq", "dk", "dv", "delta", "dq_accum"}))
           .empty())
    return err;
  std::vector<fa_tensor_map_args> maps;
  return tensorMapArgs(c, a, maps);
}

const char *extentName(fa_extent extent) {
  switch (extent) {
  case FA_EXTENT_ANY:
    return "any";
  case FA_EXTENT_FIXED:
    return "fixed";
  case FA_EXTENT_BATCH:
    return "batch";
  case FA_EXTENT_HEADS:
    return "heads";
  case FA_EXTENT_KV_HEADS:
    return "kv_heads";
  case FA_EXTENT_NQ:
    return "nq";
  case FA_EXTENT_NK:
    return "nk";
  case FA_EXTENT_NQ_NK:
    return "nq+nk-1";
  }
  return nullptr;
}

namespace {

/// "[heads, any]" or "[8191]": what a mod_arg's extents must be.
std::string describeExtents(const ModArgSpec &m) {
  std::string text = "[";
  for (int d = 0; d < m.rank; ++d) {
    text += d ? ", " : "";
    text += m.extent[d] == FA_EXTENT_FIXED ? std::to_string(m.size[d])
                                           : extentName(m.extent[d]);
  }
  return text + "]";
}

/// The extent a mod_arg's dimension must have for q and k, or -1 for any.
int64_t requiredExtent(const ModArgSpec &m, int d, const fa_tensor &q,
                       const fa_tensor &k) {
  switch (m.extent[d]) {
  case FA_EXTENT_FIXED:
    return m.size[d];
  case FA_EXTENT_BATCH:
    return q.shape[0];
  case FA_EXTENT_HEADS:
    return q.shape[1];
  case FA_EXTENT_KV_HEADS:
    return k.shape[1];
  case FA_EXTENT_NQ:
    return q.shape[2];
  case FA_EXTENT_NK:
    return k.shape[2];
  case FA_EXTENT_NQ_NK:
    return q.shape[2] + k.shape[2] - 1;
  case FA_EXTENT_ANY:
    break;
  }
  return -1;
}

} // namespace

std::string describeModArgs(const KernelConfig &c) {
  std::string text;
  for (const ModArgSpec &m : c.modArgs)
    text += (text.empty() ? "" : ", ") + std::string(fa_dtype_name(m.dtype)) +
            " " + describeExtents(m);
  return text;
}

std::string checkModArgs(const KernelConfig &c, const ModArgList &mods,
                         const fa_tensor &q, const fa_tensor &k) {
  if (!mods.checked)
    return "";
  const int32_t want = static_cast<int32_t>(c.modArgs.size());
  if (mods.count != want) {
    std::string reads =
        want ? std::to_string(want) + " (" + describeModArgs(c) + ")"
             : std::string("none");
    return "kernel '" + c.tag + "' reads " + reads +
           " score_mod tensors (mod_args), but the call passes " +
           std::to_string(mods.count) +
           (want ? "; pass them to the _ex launch functions" : "");
  }
  if (want && !mods.tensors)
    return "mod_args is null, but kernel '" + c.tag + "' reads " +
           std::to_string(want) + " mod_args";
  static const char *const kNames[FA_MAX_MOD_ARGS] = {
      "mod_args[0]", "mod_args[1]", "mod_args[2]", "mod_args[3]",
      "mod_args[4]", "mod_args[5]", "mod_args[6]", "mod_args[7]"};
  for (int32_t i = 0; i < want; ++i) {
    const ModArgSpec &m = c.modArgs[i];
    const fa_tensor &t = mods.tensors[i];
    // The kernel reads single elements: their size is all the alignment
    // it needs.
    Alignment align;
    align.bytes = elementSize(m.dtype);
    align.why = " (its elements are read one at a time)";
    std::string err = checkTensor(kNames[i], t, m.dtype, m.rank, align);
    if (!err.empty())
      return err;
    for (int d = 0; d < m.rank; ++d) {
      int64_t need = requiredExtent(m, d, q, k);
      if (need >= 0 && t.shape[d] != need) {
        std::ostringstream os;
        os << kNames[i] << ".shape is " << join(t.shape, t.rank)
           << ", but kernel '" << c.tag << "' reads it as "
           << describeExtents(m) << " = dimension " << d << " of "
           << need << " (q.shape " << join(q.shape, 4) << ", k.shape "
           << join(k.shape, 4) << ")";
        return os.str();
      }
    }
  }
  return "";
}

std::string checkTensorFor(const KernelConfig &c, const char *name,
                           const fa_tensor &t, fa_dtype dtype, int rank,
                           int64_t cols, bool output) {
  if (cols == 0)
    return checkTensor(name, t, dtype, rank);
  return checkTensor(name, t, dtype, rank, alignmentFor(c, cols, dtype),
                     output ? Layout::StridedOutput : Layout::StridedInput);
}

std::string checkShapeFor(const char *name, const fa_tensor &t,
                          const std::vector<int64_t> &want,
                          const char *meaning) {
  return checkShape(name, t, want, meaning);
}

std::string checkScaleValue(float scale) { return checkScale(scale); }

std::string checkOutputOverlap(const std::vector<NamedTensor> &all,
                               const std::vector<const char *> &outputs) {
  return checkOverlap(all, outputs);
}

} // namespace fa::runtime
