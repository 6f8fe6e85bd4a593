//===- Npy.cpp - NumPy .npy reading and writing -----------------*- C++ -*-===//

#include "fa/Compiler/CpuRunner.h"

#include <cstring>
#include <fstream>
#include <sstream>

using namespace mlir::fa;

/// Value of `key` in the header dict, e.g. 'descr': '<f4'.
static std::string headerField(const std::string &h, const std::string &key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos)
    return "";
  size_t colon = h.find(':', k);
  if (colon == std::string::npos)
    return "";
  size_t start = h.find_first_not_of(" ", colon + 1);
  if (start == std::string::npos)
    return "";
  char open = h[start];
  char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  size_t end = h.find(close, start + 1);
  if (end == std::string::npos)
    return "";
  return h.substr(start, end - start + 1);
}

bool mlir::fa::readNpy(const std::string &path, HostTensor &out,
                       std::string &error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = path + ": cannot open file";
    return false;
  }
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    error = path + ": not a .npy file (bad magic)";
    return false;
  }
  uint32_t headerLen = 0;
  if (magic[6] == 1) {
    unsigned char l[2];
    f.read(reinterpret_cast<char *>(l), 2);
    headerLen = l[0] | (l[1] << 8);
  } else {
    unsigned char l[4];
    f.read(reinterpret_cast<char *>(l), 4);
    headerLen = l[0] | (l[1] << 8) | (l[2] << 16) | (uint32_t(l[3]) << 24);
  }
  if (!f || headerLen > (1u << 20)) {
    error = path + ": truncated .npy header";
    return false;
  }
  std::string header(headerLen, '\0');
  if (!f.read(header.data(), headerLen)) {
    error = path + ": truncated .npy header";
    return false;
  }
  std::string descr = headerField(header, "descr");
  std::string fortran = headerField(header, "fortran_order");
  std::string shape = headerField(header, "shape");
  if (fortran.rfind("True", 0) == 0) {
    error = path + ": Fortran-ordered arrays are not supported; save in C order";
    return false;
  }
  size_t width;
  if (descr == "'<f2'")
    width = 2;
  else if (descr == "'<f4'")
    width = 4;
  else if (descr == "'<f8'")
    width = 8;
  else {
    error = path + ": dtype " + descr +
            " is not supported; expected little-endian f16, f32 or f64";
    return false;
  }
  if (shape.empty() || shape[0] != '(') {
    error = path + ": cannot read the shape in the .npy header";
    return false;
  }
  out.shape.clear();
  std::stringstream ss(shape.substr(1, shape.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" ");
    if (b == std::string::npos)
      continue;
    char *end = nullptr;
    long long v = std::strtoll(item.c_str() + b, &end, 10);
    if (v < 0 || end == item.c_str() + b) {
      error = path + ": bad dimension '" + item + "' in the shape";
      return false;
    }
    out.shape.push_back(v);
  }
  int64_t n = out.numElements();
  std::vector<char> raw(n * width);
  if (!f.read(raw.data(), raw.size())) {
    error = path + ": file holds fewer values than its shape needs (" +
            std::to_string(n) + ")";
    return false;
  }
  out.data.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const char *p = raw.data() + i * width;
    if (width == 2) {
      _Float16 h;
      std::memcpy(&h, p, 2);
      out.data[i] = static_cast<float>(h);
    } else if (width == 4) {
      float v;
      std::memcpy(&v, p, 4);
      out.data[i] = v;
    } else {
      std::memcpy(&out.data[i], p, 8);
    }
  }
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
  if (!f) {
    error = path + ": write failed";
    return false;
  }
  return true;
}
