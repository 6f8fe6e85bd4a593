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
// fa_block_mask: one warp per block. The mask_mod in its stages: the doc
// ids of the lane's 16 keys (kv_idx only) read once, before the row loop;
// per row of a step, one read of doc[q] and 16 compares with them.
// CHECK: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32)
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK: %[[K0:.+]] = llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-COUNT-14: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK: %[[K15:.+]] = llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load
// 8 steps of 16 rows (a warp's 4 row lanes x 4 rows) cover the 128 rows.
// CHECK: scf.for %[[STEP:.+]] = %{{.+}} to %c8{{[_0-9]*}} step %{{.+}} iter_args(%[[ANY:.+]] = %false, %[[ALL:.+]] = %true) -> (i1, i1)
// A step runs while the warp has not seen both a kept and a hidden element.
// CHECK: nvvm.vote.sync  any
// CHECK: nvvm.vote.sync  any %{{.+}}, %[[ANY]]
// CHECK: scf.if
// CHECK-NEXT: scf.yield %[[ANY]], %[[ALL]]
// CHECK: arith.muli %[[STEP]], %c16{{[_0-9]*}} : index
// CHECK: %[[DQ:.+]] = llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[KEEP:.+]] = arith.cmpi eq, %[[DQ]], %[[K0]] : i32
// CHECK-NEXT: arith.ori %[[ANY]], %[[KEEP]] : i1
// CHECK-NEXT: arith.andi %[[ALL]], %[[KEEP]] : i1
// CHECK-COUNT-14: arith.cmpi eq, %[[DQ]], %{{.+}} : i32
// CHECK: arith.cmpi eq, %[[DQ]], %[[K15]] : i32
// CHECK-NOT: arith.cmpi eq, %[[DQ]]
// CHECK-COUNT-3: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load
// CHECK: nvvm.vote.sync  any
// CHECK: nvvm.vote.sync  all
// CHECK: llvm.store
// CHECK: gpu.func @fa_block_lists_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK: nvvm.vote.sync ballot
// CHECK: llvm.intr.ctpop
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// PTX: .entry fa_fwd_fwd_bf16_d128
// The PTX keeps the stages apart: 16 key loads before the loop, 4 row loads
// in it, none per element.
// PTX: .entry fa_block_mask_fwd_bf16_d128
// PTX-COUNT-16: ld.global.nc.b32
// PTX: vote.sync.any.pred
// PTX: vote.sync.any.pred
// PTX-COUNT-4: ld.global.nc.b32
// PTX-NOT: ld.global
// PTX: vote.sync.all.pred
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

// -----

// Every stage of a mask_mod in fa_block_mask: the constant 64 once, kv / 64
// (reads kv_idx only) for the lane's 16 keys before the row loop, q / 64
// (reads q_idx only) once per row, and the read of tiles[b, q / 64, kv / 64]
// (reads both) per element.

// CHECK-LABEL: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_tiles(
// CHECK: %[[C64:c64_[0-9]+]] = arith.constant 64 : index
// CHECK-NOT: scf.for
// CHECK-COUNT-16: arith.divui %{{.+}}, %[[C64]] : index
// CHECK-NOT: llvm.load
// CHECK: scf.for
// CHECK: scf.if
// CHECK: arith.divui %{{.+}}, %[[C64]] : index
// CHECK-NOT: arith.divui
// CHECK-COUNT-16: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load
// CHECK: arith.divui %{{.+}}, %[[C64]] : index
// CHECK: gpu.return
func.func @tiles(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %tiles: tensor<?x?x?xi32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%tiles : tensor<?x?x?xi32>) {attn.mask_mod_name = "tiles"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?x?xi32>):
    %c64 = arith.constant 64 : index
    %qt = arith.divui %qi, %c64 : index
    %kt = arith.divui %kv, %c64 : index
    %x = tensor.extract %t[%b, %qt, %kt] : tensor<?x?x?xi32>
    %one = arith.constant 1 : i32
    %r = arith.cmpi eq, %x, %one : i32
    attn.yield %r : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
