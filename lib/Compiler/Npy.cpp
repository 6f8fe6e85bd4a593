//===- Npy.cpp - NumPy .npy reading and writing -----------------*- C++ -*-===//
//
// The reader trusts nothing in the file: the header is parsed as the Python
// dict literal NumPy writes (exactly the keys descr, fortran_order, shape),
// every dimension must be a plain decimal integer, and the data size the
// shape implies is checked against the file's size before anything is
// allocated.
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/CpuRunner.h"

#include "llvm/Support/FileSystem.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <map>

using namespace mlir::fa;

namespace {

/// A cursor over the header's dict literal; each parse step returns false
/// with `error` naming what was expected where.
struct HeaderParser {
  const std::string &text;
  size_t pos = 0;
  std::string error;

  void skipSpace() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool fail(const std::string &what) {
    error = "expected " + what + " at offset " + std::to_string(pos) +
            " of the .npy header";
    return false;
  }
  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool quoted(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return fail("a quoted string");
    char q = text[pos];
    size_t end = text.find(q, pos + 1);
    if (end == std::string::npos)
      return fail("a closing quote");
    out = text.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    return true;
  }
  bool boolean(bool &out) {
    skipSpace();
    for (auto [word, value] : {std::pair{"True", true}, {"False", false}}) {
      size_t n = std::strlen(word);
      if (text.compare(pos, n, word) == 0) {
        pos += n;
        out = value;
        return true;
      }
    }
    return fail("True or False for 'fortran_order'");
  }
  /// A non-negative decimal integer of at most 2^62.
  bool dimension(int64_t &out) {
    skipSpace();
    size_t start = pos;
    uint64_t v = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      v = v * 10 + (text[pos++] - '0');
      if (v > (uint64_t(1) << 62))
        return fail("a dimension of at most 2^62");
    }
    if (pos == start)
      return fail("a non-negative integer dimension");
    // '5.9', '5abc', '5L': the digits must end the item.
    skipSpace();
    if (pos < text.size() && text[pos] != ',' && text[pos] != ')') {
      pos = start;
      return fail("a plain integer dimension, got '" +
                  text.substr(start, text.find_first_of(",)", start) - start) +
                  "'");
    }
    out = static_cast<int64_t>(v);
    return true;
  }
  bool shape(std::vector<int64_t> &out) {
    if (!consume('('))
      return fail("'(' opening the shape");
    out.clear();
    while (!consume(')')) {
      int64_t d;
      if (!dimension(d))
        return false;
      out.push_back(d);
      if (!consume(',') && (skipSpace(), pos >= text.size() || text[pos] != ')'))
        return fail("',' or ')' in the shape");
    }
    return true;
  }
};

struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
};

bool parseHeader(const std::string &text, NpyHeader &out, std::string &error) {
  HeaderParser p{text};
  std::map<std::string, bool> seen;
  bool ok = p.consume('{') || p.fail("'{' opening the header dict");
  while (ok && !p.consume('}')) {
    std::string key;
    ok = p.quoted(key) && (p.consume(':') || p.fail("':' after '" + key + "'"));
    if (!ok)
      break;
    if (seen[key]) {
      p.error = "key '" + key + "' appears twice in the .npy header";
      ok = false;
    } else if (key == "descr") {
      ok = p.quoted(out.descr);
    } else if (key == "fortran_order") {
      ok = p.boolean(out.fortranOrder);
    } else if (key == "shape") {
      ok = p.shape(out.shape);
    } else {
      p.error = "unknown key '" + key + "' in the .npy header";
      ok = false;
    }
    seen[key] = true;
    if (ok && !p.consume(',') &&
        (p.skipSpace(), p.pos >= text.size() || text[p.pos] != '}'))
      ok = p.fail("',' or '}' in the header dict");
  }
  for (const char *key : {"descr", "fortran_order", "shape"})
    if (ok && !seen[key]) {
      p.error = std::string("the .npy header has no '") + key + "'";
      ok = false;
    }
  if (ok) {
    p.skipSpace();
    if (p.pos != text.size())
      ok = p.fail("only padding after the header dict");
  }
  error = p.error;
  return ok;
}

/// Bytes per element of a supported dtype, 0 otherwise.
size_t dtypeWidth(const std::string &descr) {
  if (descr == "<f2")
    return 2;
  if (descr == "<f4")
    return 4;
  if (descr == "<f8")
    return 8;
  return 0;
}

double decode(const char *p, size_t width) {
  if (width == 2) {
    _Float16 h;
    std::memcpy(&h, p, 2);
    return static_cast<float>(h);
  }
  if (width == 4) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

bool mlir::fa::readNpy(const std::string &path, HostTensor &out,
                       std::string &error) {
  auto fail = [&](const std::string &what) {
    error = path + ": " + what;
    return false;
  };
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(path, status))
    return fail("cannot open file");
  if (!llvm::sys::fs::is_regular_file(status))
    return fail("not a regular file");
  uint64_t fileSize = status.getSize();
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return fail("cannot open file");
  unsigned char magic[8];
  if (!f.read(reinterpret_cast<char *>(magic), 8))
    return fail("truncated .npy header");
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return fail("not a .npy file (bad magic)");
  int major = magic[6], minor = magic[7];
  if (major < 1 || major > 3 || minor != 0)
    return fail(".npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " is not supported (1.0, 2.0, 3.0)");
  // Version 1 stores the header length in 2 bytes, later ones in 4.
  unsigned char len[4] = {0, 0, 0, 0};
  size_t lenBytes = major == 1 ? 2 : 4;
  if (!f.read(reinterpret_cast<char *>(len), lenBytes))
    return fail("truncated .npy header");
  uint64_t headerLen = len[0] | (len[1] << 8) | (len[2] << 16) |
                       (uint64_t(len[3]) << 24);
  uint64_t dataOffset = 6 + 2 + lenBytes + headerLen;
  if (headerLen > (1u << 20) || dataOffset > fileSize)
    return fail("truncated .npy header");
  std::string text(headerLen, '\0');
  if (!f.read(text.data(), headerLen))
    return fail("truncated .npy header");
  NpyHeader header;
  std::string why;
  if (!parseHeader(text, header, why))
    return fail(why);
  if (header.fortranOrder)
    return fail("Fortran-ordered arrays are not supported; save in C order");
  size_t width = dtypeWidth(header.descr);
  if (!width)
    return fail("dtype '" + header.descr +
                "' is not supported; expected little-endian f16, f32 or f64");
  // The element count and byte size, checked for overflow and against the
  // bytes the file actually holds, before any allocation.
  uint64_t count = 1, bytes = 0;
  for (int64_t d : header.shape)
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count))
      return fail("shape " + shapeText(header.shape) +
                  " has more elements than 2^64");
  uint64_t available = fileSize - dataOffset;
  if (__builtin_mul_overflow(count, width, &bytes) || bytes != available)
    return fail("shape " + shapeText(header.shape) + " of '" + header.descr +
                "' needs " +
                (bytes / width == count ? std::to_string(bytes) + " bytes"
                                        : std::string("more than 2^64 bytes")) +
                " of data, the file holds " + std::to_string(available));
  std::vector<char> raw(bytes);
  if (!f.read(raw.data(), raw.size()))
    return fail("cannot read the data");
  out.shape = header.shape;
  out.data.resize(count);
  for (uint64_t i = 0; i < count; ++i)
    out.data[i] = decode(raw.data() + i * width, width);
  return true;
}

bool mlir::fa::writeNpy(const std::string &path, const HostTensor &t,
                        std::string &error) {
  std::ofstream f(path, std::ios::binary);
  if (!f) {
    error = path + ": cannot open file for writing";
    return false;
  }
  std::string shape = "(";
  for (int64_t d : t.shape)
    shape += std::to_string(d) + ", ";
  if (t.shape.size() > 1)
    shape.resize(shape.size() - 2);
  else if (t.shape.size() == 1)
    shape.resize(shape.size() - 1);
  shape += ")";
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  uint16_t len = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  char l[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(l, 2);
  f.write(header.data(), header.size());
  for (double v : t.data) {
    float x = static_cast<float>(v);
    f.write(reinterpret_cast<const char *>(&x), 4);
  }
  // Buffered bytes reach the file (or fail to: a full disk, /dev/full) only
  // when the stream is flushed and closed.
  f.close();
  if (f.fail()) {
    error = path + ": write failed";
    return false;
  }
  return true;
}
