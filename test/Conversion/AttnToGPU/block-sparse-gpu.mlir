// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-sparse=1" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma block-sparse=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document.ptx
// REQUIRES: ptxas

// A block-sparse plan (attn-gpu-plan block-sparse=1) gives the wgmma forward
// a block mask parameter and its head count after the 12 strides (arg26,
// arg27), before the mask_mod's tensor; its key loop runs from 0 to the
// query block's full + partial count, each iteration's key tile read from
// the lists (full ones first), and the mask_mod and the Nk bound are
// applied in the branch of partial tiles only. The module also holds the
// two entries that build the block mask from the same mask_mod.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %[[MASK:arg26]]: !llvm.ptr<1>, %[[HEADS:arg27]]: i32, %[[DOC:arg28]]: !llvm.ptr<1>, %arg29: i32, %arg30: i32)
// The tile's counts: full_kv_count, then kv_count, clamped.
// CHECK: llvm.getelementptr %[[MASK]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK: arith.maxsi
// CHECK: arith.minsi
// The consumers read the doc ids only in the branch of partial tiles.
// CHECK: llvm.getelementptr %[[DOC]]
// CHECK: gpu.return
// CHECK: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32)
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: nvvm.barrier #nvvm.reduction<or>
// CHECK: nvvm.barrier #nvvm.reduction<and>
// CHECK: gpu.func @fa_block_lists_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK: nvvm.vote.sync ballot
// CHECK: llvm.intr.ctpop
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// PTX: .entry fa_fwd_fwd_bf16_d128
// PTX: .entry fa_block_mask_fwd_bf16_d128
// PTX: bar.red.or.pred
// PTX: .entry fa_block_lists_fwd_bf16_d128
// PTX: vote.sync.ballot.b32
func.func @document(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %doc: tensor<?x?xi32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {attn.mask_mod_name = "document"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
