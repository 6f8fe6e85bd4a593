//===- KvAppendCheck.h - fa-check --kv-append -------------------*- C++ -*-===//

#ifndef FA_TEST_INTEGRATION_KVAPPENDCHECK_H
#define FA_TEST_INTEGRATION_KVAPPENDCHECK_H

#include "mlir/IR/MLIRContext.h"

namespace fa_check {

/// Draws `cases` appends (attn.rotary + attn.kv_append on contiguous and
/// paged caches), runs them on the CPU and compares the caches and the
/// rotated queries exactly with a host reference; prints one line per
/// failure, a coverage line and "N passed, M failed". Returns the failures.
int checkKvAppend(mlir::MLIRContext &ctx, unsigned seed, int cases, bool verbose);

} // namespace fa_check

#endif // FA_TEST_INTEGRATION_KVAPPENDCHECK_H
