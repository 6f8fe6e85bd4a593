//===- TestSupport.h - Helpers of the runtime's GPU-free tests -*- C++ -*-===//
//
// Manifests written to a temporary directory and loaded, the last error's
// text, and fa_tensors at fake device addresses (validation never
// dereferences them), a plain query and a kernel's tag: shared by the
// runtime's unit tests.
//
//===----------------------------------------------------------------------===//

#ifndef FA_TEST_RUNTIME_TESTSUPPORT_H
#define FA_TEST_RUNTIME_TESTSUPPORT_H

#include "fa/Runtime/fa_runtime.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace fa_test {

inline std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "fa_runtime_" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline void writeFile(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

/// Loads a bundle from manifest text; returns the status.
inline fa_status loadText(const std::string &name, const std::string &text,
                          fa_bundle **out) {
  std::string dir = tempDir(name);
  writeFile(dir + "/manifest.json", text);
  return fa_bundle_load(dir.c_str(), out);
}

inline std::string lastError() { return fa_last_error(); }

/// A manifest of bundle version `version` listing `kernels` (the kernel
/// objects' JSON text).
inline std::string manifestOf(const std::vector<std::string> &kernels,
                              const std::string &version) {
  std::string list;
  for (const std::string &k : kernels)
    list += (list.empty() ? "" : ",") + k;
  return R"({"format": "fa-bundle", "version": )" + version +
         R"(, "compiler": "test", "kernels": [)" + list + "]}";
}

/// A bf16 forward query without a mask on sm_90 (head dim `d`).
inline fa_kernel_query forwardQuery(int d = 128) {
  fa_kernel_query q{};
  q.direction = FA_DIRECTION_FWD;
  q.dtype = FA_DTYPE_BF16;
  q.head_dim = d;
  q.mask = FA_MASK_NONE;
  q.compute_capability = 90;
  return q;
}

/// A kernel's tag ("" with a failed expectation for a null kernel).
inline std::string kernelTag(const fa_kernel *k) {
  fa_kernel_info info{};
  EXPECT_EQ(fa_kernel_get_info(k, &info), FA_SUCCESS) << lastError();
  return info.tag ? info.tag : "";
}

/// Expects the manifest `text` to be rejected with `expect` in the message.
inline void expectRejected(const std::string &name, const std::string &text,
                           const std::string &expect) {
  fa_bundle *b = nullptr;
  EXPECT_EQ(loadText(name, text, &b), FA_ERROR_BAD_MANIFEST) << expect;
  EXPECT_NE(lastError().find(expect), std::string::npos)
      << "expected '" << expect << "' in: " << lastError();
  fa_bundle_free(b);
}

/// The first bundle version this runtime does not read, and the message
/// that refuses it: what a bundle newer than the runtime gets.
inline std::string newerVersion() {
  return std::to_string(FA_RUNTIME_BUNDLE_VERSION + 1);
}
inline std::string newerVersionRejected() {
  return "version " + newerVersion() +
         " is not supported (this runtime reads versions 1 to " +
         std::to_string(FA_RUNTIME_BUNDLE_VERSION) + ")";
}

/// Fake, well-separated device addresses: validation never dereferences.
inline uint64_t addr(int i) {
  return 0x7f0000000000ull + (uint64_t(i) << 32);
}

/// A contiguous tensor of `shape` at `data`.
inline fa_tensor tensor(uint64_t data, fa_dtype dtype,
                        std::vector<int64_t> shape) {
  fa_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

} // namespace fa_test

#endif // FA_TEST_RUNTIME_TESTSUPPORT_H
