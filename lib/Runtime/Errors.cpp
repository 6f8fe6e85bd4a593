//===- Errors.cpp - The thread's last error and the text of errors -------===//
//
// Every C entry point returns an fa_status and leaves the reason in a
// thread-local message (fa_last_error), so that concurrent callers never see
// each other's errors.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <exception>
#include <new>
#include <sstream>

namespace {
thread_local std::string lastError;
/// What fa_last_error returns when even the message could not be allocated.
thread_local const char *fixedError = nullptr;
} // namespace

namespace fa::runtime {

fa_status fail(fa_status status, std::string message) {
  fixedError = nullptr;
  lastError = std::move(message);
  return status;
}

fa_status succeed() {
  fixedError = nullptr;
  lastError.clear();
  return FA_SUCCESS;
}

fa_status failFromException(const char *api) noexcept {
  try {
    try {
      throw;
    } catch (const std::bad_alloc &) {
      return fail(FA_ERROR_INTERNAL, std::string(api) + ": out of host memory");
    } catch (const std::exception &e) {
      return fail(FA_ERROR_INTERNAL,
                  std::string(api) + ": internal error: " + e.what());
    } catch (...) {
      return fail(FA_ERROR_INTERNAL,
                  std::string(api) + ": internal error (unknown exception)");
    }
  } catch (...) {
    // No memory for the message either.
    lastError.clear();
    fixedError = "fa runtime: out of host memory";
    return FA_ERROR_INTERNAL;
  }
}

const std::string &lastErrorMessage() { return lastError; }

fa_status failWithPrefix(fa_status status, const std::string &prefix) {
  return fail(status, prefix + lastError);
}

std::string hex(uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

std::string cuMessage(const char *call, CUresult r) {
  const char *name = nullptr, *text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  std::ostringstream os;
  os << call << " failed: " << (name ? name : "CUDA error") << " ("
     << static_cast<int>(r) << ")";
  if (text)
    os << ": " << text;
  return os.str();
}

fa_status cuFail(const char *call, CUresult r) {
  return fail(FA_ERROR_CUDA, cuMessage(call, r));
}

} // namespace fa::runtime

extern "C" {

// These three cannot throw: they only read a string or pick a literal.
const char *fa_last_error(void) {
  return fixedError ? fixedError : lastError.c_str();
}

const char *fa_status_string(fa_status status) {
  switch (status) {
  case FA_SUCCESS:
    return "success";
  case FA_ERROR_INVALID_ARGUMENT:
    return "invalid argument";
  case FA_ERROR_NOT_FOUND:
    return "not found";
  case FA_ERROR_IO:
    return "I/O error";
  case FA_ERROR_BAD_MANIFEST:
    return "bad manifest";
  case FA_ERROR_CUDA:
    return "CUDA error";
  case FA_ERROR_UNSUPPORTED:
    return "unsupported";
  case FA_ERROR_INTERNAL:
    return "internal error";
  }
  return "unknown status";
}

const char *fa_dtype_name(fa_dtype dtype) {
  switch (dtype) {
  case FA_DTYPE_F16:
    return "f16";
  case FA_DTYPE_BF16:
    return "bf16";
  case FA_DTYPE_F32:
    return "f32";
  case FA_DTYPE_I32:
    return "i32";
  case FA_DTYPE_I64:
    return "i64";
  case FA_DTYPE_F8E4M3:
    return "f8e4m3";
  }
  return "<invalid dtype>";
}

} // extern "C"
