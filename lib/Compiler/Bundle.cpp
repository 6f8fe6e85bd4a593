//===- Bundle.cpp - Write compiled kernels as an fa bundle ------*- C++ -*-===//
//
// docs/ABI.md is the format; lib/Runtime/Manifest.cpp reads it and rejects
// what it cannot launch correctly. The manifest is written with llvm::json,
// whose objects print their keys sorted, so the key order below is free.
//
//===----------------------------------------------------------------------===//

#include "fa/Compiler/Bundle.h"
#include "fa/Dialect/Attn/IR/Attn.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace llvm;

namespace mlir::fa {

namespace {

/// One "tensor_maps" entry: a CUtensorMap the runtime builds over a tensor
/// viewed as 3-D {dim, rows, planes} (planes = batch·heads), innermost
/// first, loaded in boxes of boxCols columns (128 bytes) by boxRows rows;
/// with `heads` and `batch` (a strided forward) 4-D {dim, rows, heads,
/// batch} over the caller's strides; L2 promotion of `l2Bytes`.
json::Object tensorMap(const char *tensor, int64_t param, const char *dim,
                       const char *rows, const char *planes, int64_t boxRows,
                       const char *heads = nullptr,
                       const char *batch = nullptr, int64_t boxCols = 64,
                       int64_t l2Bytes = 256) {
  json::Array dims{dim, rows}, box{boxCols, boxRows, 1};
  if (heads) {
    dims.push_back(heads);
    dims.push_back(batch);
    box.push_back(1);
  } else {
    dims.push_back(planes);
  }
  return json::Object{{"tensor", tensor},
                      {"param", param},
                      {"dims", std::move(dims)},
                      {"box", std::move(box)},
                      {"swizzle", 128},
                      {"l2_promotion", l2Bytes},
                      {"oob_fill", "zero"}};
}

/// Whether the kernel loads by TMA and takes tensor maps: the wgmma forward
/// and the warp-specialised (12-warp) wgmma backward.
bool takesTensorMaps(const KernelConfig &c) {
  return c.mma == "wgmma" && (c.direction == "fwd" || c.warps == 12);
}

/// Every kernel takes the strides of the caller's tensors (bundle version
/// 7): a forward those of q, k, v and o, a backward those of q, k, v, do, dk
/// and dv (fa_bwd), o and do (fa_bwd_pre), dq (fa_bwd_post).
bool takesStrides(const KernelConfig &c) {
  return c.direction == "fwd" || c.direction == "bwd";
}

/// fp8: e4m3 q, k, v (and a backward's do) with their descale tensors after
/// the maps.
bool isFp8(const KernelConfig &c) { return c.dtype == "f8e4m3"; }

/// The manifest's object of one kernel.
json::Object kernelObject(const CompiledKernel &k) {
  const KernelConfig &c = k.config;
  // Every "*_param" field: where the compiled kernel's parameter list put
  // the group (KernelParamIndices), not recomputed here.
  const KernelParamIndices &at = k.params;
  json::Object entries;
  for (const KernelEntry &e : k.entries) {
    json::Object entry{{"name", e.name},
                       {"threads", e.threads},
                       {"shared_bytes", e.sharedBytes}};
    if (e.persistent)
      entry["grid"] = "persistent";
    if (e.dependent)
      entry["launch"] = "dependent";
    entries[e.role] = std::move(entry);
  }
  // A score_mod is compiled into the kernel and named here; every runtime
  // that predates score_mod kernels rejects a non-null score_mod, so it needs
  // no new bundle version.
  json::Value scoreMod = nullptr;
  if (!c.scoreMod.empty())
    scoreMod = c.scoreMod;
  json::Object o{{"tag", k.tag},
                 {"direction", c.direction},
                 {"dtype", c.dtype},
                 {"head_dim", c.headDim},
                 {"head_dim_v", c.headDimV},
                 {"block_q", c.blockQ},
                 {"block_kv", c.blockKV},
                 {"warps", c.warps},
                 {"stages", c.stages},
                 {"mask", c.mask},
                 {"window_left", c.windowLeft},
                 {"window_right", c.windowRight},
                 {"score_mod", std::move(scoreMod)},
                 {"target", c.target},
                 {"entries", std::move(entries)},
                 {"ptx", k.tag + ".ptx"}};
  // A mask_mod (bundle version 9) is named only where there is one, so
  // manifests without mask_mod kernels stay as they were.
  if (!c.maskMod.empty())
    o["mask_mod"] = c.maskMod;
  if (c.direction == "bwd")
    o["dsplit"] = c.dsplit; // the bwd grid's x is ceil(nk/block_kv)·dsplit
  if (c.mma == "wgmma")
    o["mma"] = "wgmma";
  // f32 kernels: whether each product is one TF32 MMA (else 3xTF32). Older
  // runtimes reject the f32 dtype, so no new bundle version.
  if (c.dtype == "f32")
    o["tf32"] = c.tf32;
  if (c.splitKv)
    o["split_kv"] = true;
  if (c.packGqa)
    o["pack_gqa"] = true;
  if (c.varlen) {
    // Packed [T, H, D] tensors: the maps' and the sizes' nq, nk are the token
    // totals and their batch is 1; cu_seqlens_q and cu_seqlens_k follow the
    // strides (the forward's 4 tensors', the backward's 6; docs/ABI.md
    // "Varlen").
    o["varlen"] = true;
    o["cu_seqlens_param"] = at.cuSeqlens;
  }
  if (c.paged) {
    // K, V pools of pages read through a page table; the table, seqused_k
    // and the i32 max_pages, page_size, num_pages follow the strides
    // (docs/ABI.md "Paged KV cache").
    o["paged"] = true;
    o["page_table_param"] = at.pageTable;
  }
  if (c.blockSparse) {
    // The block mask and its head count follow the strides; the entries
    // block_mask and block_lists build it (docs/ABI.md "Block sparsity").
    o["block_sparse"] = true;
    o["block_mask_param"] = at.blockMask;
  }
  // The schedule only: the entry's threads count the producer warp.
  if (c.producerWarp)
    o["producer_warp"] = true;
  // A TMA producer (bundle version 19): k and v maps after the split count,
  // promoted to L2 by a box row's 128 bytes (256 cost the decode 4-7%
  // against 128 or none on the H200, PERF.md).
  // Paged (version 20): maps of the pools [pages, page_size, Hkv, D] in
  // boxes of 16 keys, which never straddle a page.
  if (c.tma && c.paged)
    o["tensor_maps"] = json::Array{
        tensorMap("k", at.tensorMap, "head_dim", "page_size", "",
                  kPagedTmaBoxRows, "kv_heads", "num_pages", 64, 128),
        tensorMap("v", at.tensorMap + 1, "head_dim_v", "page_size", "",
                  kPagedTmaBoxRows, "kv_heads", "num_pages", 64, 128)};
  else if (c.tma)
    o["tensor_maps"] = json::Array{
        tensorMap("k", at.tensorMap, "head_dim", "nk", "", c.blockKV,
                  "kv_heads", "batch", 64, 128),
        tensorMap("v", at.tensorMap + 1, "head_dim_v", "nk", "", c.blockKV,
                  "kv_heads", "batch", 64, 128)};
  // Occupancy (the runtime's split count) reads it; older runtimes ignore it.
  if (k.registers > 0)
    o["registers"] = k.registers;
  if (c.sinks) {
    // The sinks (f32 [H]): fa_fwd's last parameter, after any mod_args, or
    // a split-KV kernel's fa_merge's, after o's strides (8 + 3); a backward
    // has the bwd_sink entry (docs/ABI.md "Attention sinks").
    o["sinks"] = true;
    if (c.direction == "fwd")
      o["sinks_param"] = at.sinks;
  }
  if (!k.modArgs.empty()) {
    // The tensors the score_mod reads, passed after every other parameter
    // of fa_fwd / fa_bwd (docs/ABI.md "mod_args"), and what their extents
    // must be: a fixed size as a number, else a problem size's name.
    json::Array args;
    for (const ModArgInfo &a : k.modArgs) {
      json::Array dims;
      for (const std::string &d : a.dims) {
        int64_t fixed = 0;
        if (!StringRef(d).getAsInteger(10, fixed))
          dims.push_back(fixed);
        else
          dims.push_back(d);
      }
      args.push_back(json::Object{
          {"dtype", a.dtype}, {"rank", a.rank}, {"dims", std::move(dims)}});
    }
    o["mod_args"] = std::move(args);
    o["mod_arg_param"] = at.modArg;
  }
  if (c.deterministic) {
    o["deterministic"] = true;
    o["semaphore_param"] = at.semaphore;
  }
  // TMA tensor maps the runtime builds (docs/ABI.md, sm_90a wgmma entries):
  // the wgmma forward's, and the warp-specialised wgmma backward's (its 12
  // warps; the other wgmma backward has 8 and loads with cp.async).
  if (takesTensorMaps(c) && c.direction == "fwd") {
    int64_t boxCols = isFp8(c) ? 128 : 64; // 128 bytes
    o["tensor_maps"] = json::Array{
        tensorMap("q", at.tensorMap, "head_dim", "nq", "", c.blockQ, "heads",
                  "batch", boxCols),
        tensorMap("k", at.tensorMap + 1, "head_dim", "nk", "", c.blockKV,
                  "kv_heads", "batch", boxCols),
        tensorMap("v", at.tensorMap + 2, "head_dim_v", "nk", "", c.blockKV,
                  "kv_heads", "batch", boxCols)};
  }
  // fp8 (bundle version 12): descale_q, descale_k, descale_v (f32 [B, Hkv])
  // follow the maps; a backward's (version 22) also descale_do.
  if (isFp8(c))
    o["descale_param"] = at.descale;
  // Block descales (bundle version 21): Q's and K's per this many rows.
  if (c.blockScale)
    o["descale_block"] = attn::kDescaleBlockRows;
  // The quantiser's source type (entries quantize_amax and quantize): an
  // additive field and entries that older runtimes ignore, so no version.
  if (!c.quantize.empty())
    o["quantize"] = c.quantize;
  if (takesStrides(c))
    o["stride_param"] = at.stride;
  if (takesTensorMaps(c) && c.direction == "bwd") {
    int64_t boxCols = isFp8(c) ? 128 : 64; // 128 bytes
    o["tensor_maps"] =
        json::Array{tensorMap("q", at.tensorMap, "head_dim", "nq", "", c.blockQ,
                              "heads", "batch", boxCols),
                    tensorMap("k", at.tensorMap + 1, "head_dim", "nk", "",
                              c.blockKV, "kv_heads", "batch", boxCols),
                    tensorMap("v", at.tensorMap + 2, "head_dim_v", "nk", "",
                              c.blockKV, "kv_heads", "batch", boxCols),
                    tensorMap("do", at.tensorMap + 3, "head_dim_v", "nq", "",
                              c.blockQ, "heads", "batch", boxCols)};
  }
  if (c.runtimeWindow()) {
    // Run-time window sizes (bundle version 17): fa_fwd's or fa_bwd's last
    // two parameters, i32 left and right, after the mod_args and a
    // forward's sinks (docs/ABI.md "Run-time windows").
    o["window_runtime"] = true;
    o["window_param"] = at.window;
  }
  if (!k.cubin.empty())
    o["cubin"] = k.tag + ".cubin";
  return o;
}

Error writeFile(const Twine &path, StringRef data) {
  std::error_code ec;
  raw_fd_ostream os(path.str(), ec, sys::fs::OF_None);
  if (!ec) {
    os << data;
    os.close();
    ec = os.error();
  }
  if (ec)
    return createStringError(ec, "cannot write %s: %s", path.str().c_str(),
                             ec.message().c_str());
  return Error::success();
}

} // namespace

int64_t bundleVersion(ArrayRef<CompiledKernelRef> kernels) {
  // A version only where an older runtime would launch a kernel wrongly: 3
  // (deterministic backwards: semaphores) and 4 (persistent forwards: grid
  // and counter) are subsumed by 5, since both kinds take tensor maps, which
  // version 5 passes by value where older runtimes pass device addresses.
  // 6: split-KV kernels, which a version-5 runtime would launch as plain
  // forwards (it ignores "split_kv" and the merge entry).
  // 7: packed-GQA kernels, whose grid a version-6 runtime would build per
  // query head instead of per key head, and kernels that take strides,
  // which a version-6 runtime would launch without them (a version-7
  // runtime before strided backwards rejects 'stride_param' on a backward).
  // 8: kernels whose score_mod reads tensors ("mod_args"), which a
  // version-7 runtime refuses anyway; the version says so up front.
  // 9: mask_mod kernels, which a version-8 runtime (it ignores
  // "mask_mod") would serve for queries without the mask.
  // 10: varlen forwards, which an older runtime would launch as dense ones
  // without cu_seqlens.
  // 11: block-sparse forwards, which an older runtime would launch without
  // their block mask.
  // 12: fp8 forwards (dtype f8e4m3), which an older runtime rejects by their
  // dtype anyway; they take descale tensors after their tensor maps.
  // 13: kernels with sinks, whose extra parameter and entry an older
  // runtime would not pass or launch.
  // 14: paged forwards, which an older runtime would launch as dense
  // split-KV ones without their page table.
  // 15: block-sparse backwards, which an older runtime would launch without
  // their block mask.
  // 16: split-KV kernels with sinks, whose merge takes the sinks last, which
  // an older runtime refuses ("sinks" on a split-KV kernel) anyway.
  // 17: run-time window kernels, which an older runtime would launch
  // without their sizes.
  // 18: varlen kernels with sinks, which an older runtime refuses ("sinks"
  // on a varlen kernel) anyway; their bwd_sink takes cu_seqlens_q.
  // 19: split-KV kernels loading K/V by TMA, whose tensor maps an older
  // runtime refuses on an mma_sync kernel anyway.
  // 20: paged kernels loading K/V by TMA, whose pool maps an older runtime
  // refuses on a paged kernel anyway.
  // 21: fp8 forwards with block descales, whose per-block Q and K factors
  // an older runtime would refuse or, given per-head ones, misread.
  // 22: fp8 backwards (dtype f8e4m3, direction bwd), which an older runtime
  // refuses as an fp8 kernel that is not a forward.
  // 23: block-sparse kernels that take their blocks in the mask's grid
  // order, which an older runtime would neither size nor build.
  bool anyRuntimeWindow = false, anyVarlenSinks = false, anyTmaSplit = false,
       anyTmaPaged = false, anyBlockScale = false, anyFp8Bwd = false;
  bool anyBlockOrder = false;
  for (const CompiledKernelRef &k : kernels) {
    anyBlockOrder |= k->config.blockSparse;
    anyFp8Bwd |= isFp8(k->config) && k->config.direction != "fwd";
    anyBlockScale |= k->config.blockScale;
    anyRuntimeWindow |= k->config.runtimeWindow();
    anyVarlenSinks |= k->config.varlen && k->config.sinks;
    anyTmaSplit |= k->config.tma;
    anyTmaPaged |= k->config.tma && k->config.paged;
  }
  if (anyBlockOrder)
    return 23;
  if (anyFp8Bwd)
    return 22;
  if (anyBlockScale)
    return 21;
  if (anyTmaPaged)
    return 20;
  if (anyTmaSplit)
    return 19;
  if (anyVarlenSinks)
    return 18;
  if (anyRuntimeWindow)
    return 17;
  bool anyMaps = false, anySplit = false, anyNewer = false, anyModArgs = false,
       anyVarlen = false, anyMaskMod = false, anyBlockSparse = false,
       anyFp8 = false, anySinks = false, anyPaged = false,
       anyBlockSparseBwd = false, anySplitSinks = false;
  for (const CompiledKernelRef &k : kernels) {
    anyBlockSparseBwd |= k->config.blockSparse && k->config.direction != "fwd";
    anySinks |= k->config.sinks;
    anySplitSinks |= k->config.sinks && k->config.splitKv;
    anyPaged |= k->config.paged;
    anyMaskMod |= !k->config.maskMod.empty();
    anyMaps |= takesTensorMaps(k->config);
    anySplit |= k->config.splitKv;
    anyNewer |= k->config.packGqa || takesStrides(k->config);
    anyModArgs |= !k->modArgs.empty();
    anyVarlen |= k->config.varlen;
    anyBlockSparse |= k->config.blockSparse;
    anyFp8 |= k->config.dtype == "f8e4m3";
  }
  if (anySplitSinks)
    return 16;
  if (anyBlockSparseBwd)
    return 15;
  if (anyPaged)
    return 14;
  if (anySinks)
    return 13;
  if (anyFp8)
    return 12;
  if (anyBlockSparse)
    return 11;
  if (anyVarlen)
    return 10;
  if (anyMaskMod)
    return 9;
  if (anyModArgs)
    return 8;
  if (anyNewer)
    return 7;
  if (anySplit)
    return 6;
  return anyMaps ? 5 : 2;
}

std::string bundleManifest(ArrayRef<CompiledKernelRef> kernels) {
  json::Array list;
  for (const CompiledKernelRef &k : kernels)
    list.push_back(kernelObject(*k));
  json::Object manifest{{"format", "fa-bundle"},
                        {"version", bundleVersion(kernels)},
                        {"compiler", kCompilerVersion},
                        {"kernels", std::move(list)}};
  std::string text;
  raw_string_ostream os(text);
  os << formatv("{0:2}", json::Value(std::move(manifest))) << "\n";
  return text;
}

std::string bundleHeader(ArrayRef<CompiledKernelRef> kernels) {
  std::string header = "/* Generated by fa-aot: the kernels of this bundle. */\n"
                       "#ifndef FA_BUNDLE_H\n#define FA_BUNDLE_H\n\n";
  for (const CompiledKernelRef &k : kernels)
    for (const KernelEntry &e : k->entries)
      header += "#define FA_KERNEL_" + e.name + " \"" + e.name + "\"\n";
  header += "\n#define FA_BUNDLE_KERNEL_COUNT " +
            std::to_string(kernels.size()) + "\n\n#endif /* FA_BUNDLE_H */\n";
  return header;
}

Error checkBundle(ArrayRef<CompiledKernelRef> kernels) {
  StringSet<> tags;
  for (const CompiledKernelRef &k : kernels) {
    // The manifest's score_mod and mask_mod are the config's: the tag must
    // show that the compiler built them in (KernelPlan::tag: the mods, then
    // "_sink"), or a plain kernel would be served as the mods'.
    const KernelConfig &c = k->config;
    std::string mods = (c.scoreMod.empty() ? "" : "_mod_" + c.scoreMod) +
                       (c.maskMod.empty() ? "" : "_maskmod_" + c.maskMod);
    if (!mods.empty() &&
        !StringRef(k->tag).ends_with(mods + (c.sinks ? "_sink" : "")))
    {
      std::string named =
          (c.scoreMod.empty() ? "" : "score_mod '" + c.scoreMod + "'") +
          (c.scoreMod.empty() || c.maskMod.empty() ? "" : " and ") +
          (c.maskMod.empty() ? "" : "mask_mod '" + c.maskMod + "'");
      return createStringError(
          inconvertibleErrorCode(),
          "kernel '%s' has %s in its config but its tag does not end in "
          "'%s%s': the compiler did not build %s into it",
          k->tag.c_str(), named.c_str(), mods.c_str(), c.sinks ? "_sink" : "",
          c.scoreMod.empty() || c.maskMod.empty() ? "it" : "them");
    }
    if (!tags.insert(k->tag).second)
      return createStringError(inconvertibleErrorCode(),
                               "kernel '%s' is listed twice", k->tag.c_str());
  }
  return Error::success();
}

Error writeBundle(StringRef dir, ArrayRef<CompiledKernelRef> kernels) {
  if (Error e = checkBundle(kernels))
    return e;
  if (std::error_code ec = sys::fs::create_directories(dir))
    return createStringError(ec, "cannot create the bundle directory %s: %s",
                             dir.str().c_str(),
                             ec.message().c_str());
  for (const CompiledKernelRef &k : kernels) {
    if (Error e = writeFile(dir + "/" + k->tag + ".ptx", k->ptx))
      return e;
    if (!k->cubin.empty())
      if (Error e = writeFile(dir + "/" + k->tag + ".cubin", k->cubin))
        return e;
  }
  if (Error e = writeFile(dir + "/manifest.json", bundleManifest(kernels)))
    return e;
  return writeFile(dir + "/fa_bundle.h", bundleHeader(kernels));
}

} // namespace mlir::fa
