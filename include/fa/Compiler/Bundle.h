//===- Bundle.h - Write compiled kernels as an fa bundle --------*- C++ -*-===//
//
// The one writer of the bundle format of docs/ABI.md: manifest.json, each
// kernel's <tag>.ptx and <tag>.cubin, and the C header fa_bundle.h. The
// runtime (lib/Runtime/Manifest.cpp) is its reader.
//
//===----------------------------------------------------------------------===//

#ifndef FA_COMPILER_BUNDLE_H
#define FA_COMPILER_BUNDLE_H

#include "fa/Compiler/GpuCompiler.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace mlir::fa {

using CompiledKernelRef = std::shared_ptr<const CompiledKernel>;

/// The manifest version a bundle of these kernels needs: the lowest that a
/// runtime which would launch one of them wrongly rejects (docs/ABI.md,
/// "Bundle versions").
int64_t bundleVersion(llvm::ArrayRef<CompiledKernelRef> kernels);

/// manifest.json of a bundle holding `kernels`, in this order.
std::string bundleManifest(llvm::ArrayRef<CompiledKernelRef> kernels);

/// fa_bundle.h: a C header naming every entry point of `kernels`.
std::string bundleHeader(llvm::ArrayRef<CompiledKernelRef> kernels);

/// What the runtime would reject or serve wrongly: a tag listed twice, or a
/// kernel whose config names a score_mod its tag (`..._mod_<name>`) does not
/// carry.
llvm::Error checkBundle(llvm::ArrayRef<CompiledKernelRef> kernels);

/// Writes the bundle of `kernels` into `dir` (created if missing): the
/// kernels' PTX and cubin files, manifest.json and fa_bundle.h; nothing if
/// checkBundle fails.
llvm::Error writeBundle(llvm::StringRef dir,
                        llvm::ArrayRef<CompiledKernelRef> kernels);

} // namespace mlir::fa

#endif // FA_COMPILER_BUNDLE_H
