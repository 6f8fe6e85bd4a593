//===- CompilerVersion.cpp - the version that keys kernels -----*- C++ -*-===//
//
// A release number alone does not change when the compiler is rebuilt from
// changed sources, so caches of compiled kernels are keyed by the linker's
// build id of the binary that holds this code as well.
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/GpuCompiler.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"

#include <cstring>
#include <elf.h>
#include <link.h>

using namespace mlir::fa;

namespace {

struct BuildIdSearch {
  uintptr_t address; // an address inside the object we look for
  std::string id;
};

/// The NT_GNU_BUILD_ID note among the PT_NOTE segments of one object.
std::string buildIdNote(const dl_phdr_info &info) {
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info.dlpi_phdr[i];
    if (ph.p_type != PT_NOTE)
      continue;
    const char *p = reinterpret_cast<const char *>(info.dlpi_addr + ph.p_vaddr);
    const char *end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto *note = reinterpret_cast<const ElfW(Nhdr) *>(p);
      const char *name = p + sizeof(ElfW(Nhdr));
      const char *desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0 && desc + note->n_descsz <= end)
        return llvm::toHex(llvm::StringRef(desc, note->n_descsz),
                           /*LowerCase=*/true);
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return "";
}

int visitObject(dl_phdr_info *info, size_t, void *data) {
  auto *search = static_cast<BuildIdSearch *>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && search->address >= start &&
        search->address < start + ph.p_memsz) {
      search->id = buildIdNote(*info);
      return 1;
    }
  }
  return 0;
}

} // namespace

std::string mlir::fa::compilerBuildId() {
  static const std::string id = [] {
    BuildIdSearch search{reinterpret_cast<uintptr_t>(&compilerBuildId), ""};
    dl_iterate_phdr(visitObject, &search);
    return search.id.empty() ? std::string("unknown") : search.id;
  }();
  return id;
}

std::string mlir::fa::compilerVersion() {
  return std::string(kCompilerVersion) + " (LLVM " LLVM_VERSION_STRING
         ", build " + compilerBuildId() + ")";
}
