// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-sparse=1" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -fa-lower-to-nvvm="mma=wgmma block-sparse=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma block-sparse=1" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE --enable-var-scope
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-sparse=1" -convert-attn-gpu-to-nvvm -canonicalize | FileCheck %s --check-prefix=LOWERED
// REQUIRES: ptxas

// The block-sparse wgmma backward: fa_bwd takes the block mask and its head
// count after its 18 strides (arg37, arg38), before the mask_mod's tensor.
// Its key block's full and partial query-block counts are read once,
// clamped to [0, NQB] (the partial count to what the full ones leave), and
// every listed query block is clamped into [0, NQB) where it is read. The
// module carries its own block-mask entries (64-row query blocks: the
// backward's, not the forward's).

// The score path as tile ops: a listed block that is partial (or full at
// the Nq edge) takes the masked path, where alone the mask_mod runs, at the
// bounds' opaque first query, then the mask of the lengths.
// TILE-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// TILE: %[[Q:[0-9a-z_]+]], %[[IN:[0-9a-z_]+]] = attn_gpu.transposed_bounds at [%{{.+}}, %[[KB:[0-9a-z_]+]]] of [%{{.+}}, %{{.+}}] block_index %{{.+}} {block_keys = 64 : i64, block_queries = 64 : i64}
// TILE: %[[FULL:.+]] = arith.xori %{{.+}}, %true : i1
// TILE-NEXT: %[[MASKED:.+]] = arith.andi %[[IN]], %[[FULL]] : i1
// TILE-NOT: attn_gpu.transposed_mask_mod
// TILE: scf.if %[[MASKED]] -> (!attn_gpu.fragment<16x64xf32, accumulator>) {
// TILE: } else {
// TILE: %[[M:.+]] = attn_gpu.transposed_mask_mod %{{.+}} at [%{{.+}}, %{{.+}}, %[[Q]]] of [{{.+}}] row %{{.+}} key %[[KB]]
// TILE: tensor.extract
// TILE: attn_gpu.transposed_mask %[[M]] at [%{{.+}}, %{{.+}}, %[[Q]], %[[KB]]] of [{{.+}}] row %{{.+}} {opaque_lengths}

// Lowered, the test stays a branch: a full block inside both lengths skips
// the mask_mod (its tile-inside test is the enum mask's band; with the
// mask_mod's "no tile is inside" it folded to false, and every tile loaded
// the document ids and selected each score).
// LOWERED-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// LOWERED: %{{.+}}:32 = scf.if %{{.+}} -> (f32,
// LOWERED-NEXT: scf.yield
// LOWERED-NEXT: } else {
// LOWERED: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32

// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

// CHECK-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document
// CHECK: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %[[MASK:arg37]]: !llvm.ptr<1>, %[[HEADS:arg38]]: i32, %[[DOC:arg39]]: !llvm.ptr<1>, %arg40: i32, %arg41: i32)
// The key block: CTA (x, y) is l = y·NKB + x, in a group of 2 key heads
// (kBackwardOrderHeads) taking their places in turn, and takes
// q_order[row, place] of the GQA group's first head's row, clamped into
// [0, NKB) before anything reads it.
// CHECK: %[[HKV:.+]] = arith.index_castui %arg11 : i32 to index
// CHECK: %[[X:.+]] = gpu.block_id  x
// CHECK: %[[Y:.+]] = gpu.block_id  y
// CHECK: %[[GX:.+]] = gpu.grid_dim  x
// CHECK: %[[L0:.+]] = arith.muli %[[Y]], %[[GX]] : index
// CHECK: %[[L:.+]] = arith.addi %[[L0]], %[[X]] : index
// CHECK: %[[SPAN:.+]] = arith.muli %[[GX]], %c2{{.*}} : index
// CHECK: %[[G:.+]] = arith.divui %[[L]], %[[SPAN]] : index
// CHECK: %[[R:.+]] = arith.subi %[[L]], %{{.+}} : index
// CHECK: %[[FIRST:.+]] = arith.muli %[[G]], %c2{{.*}} : index
// CHECK: %[[LEFT:.+]] = arith.subi %[[HKV]], %[[FIRST]] : index
// CHECK: %[[N:.+]] = arith.minsi %c2{{.*}}, %[[LEFT]] : index
// CHECK: %[[PLACE:.+]] = arith.divui %[[R]], %[[N]] : index
// CHECK: %[[HOFF:.+]] = arith.remui %[[R]], %[[N]] : index
// CHECK: %[[KVH:.+]] = arith.addi %[[FIRST]], %[[HOFF]] : index
// CHECK-NOT: gpu.block_id  x
// CHECK: %[[FIRST:.+]] = arith.muli %[[KVH]], %{{.+}} : index
// CHECK: arith.remui %[[FIRST]], %{{.+}} : index
// CHECK: %[[LINE:.+]] = arith.addi %{{.+}}, %[[PLACE]] : index
// CHECK: %[[AT:.+]] = arith.addi %{{.+}}, %[[LINE]] : index
// CHECK: %[[AT64:.+]] = arith.index_cast %[[AT]] : index to i64
// CHECK: %[[ORDP:.+]] = llvm.getelementptr %[[MASK]][%[[AT64]]]
// CHECK: %[[ORD:.+]] = llvm.load %[[ORDP]] invariant
// CHECK: arith.maxsi %[[ORD]]
// CHECK: %[[KB:.+]] = arith.minsi %{{.+}}, %{{.+}} : index
// CHECK: arith.muli %[[KB]], %c128{{.*}} : index
// The full count: clamped to the query blocks.
// CHECK: %[[FULLP:.+]] = llvm.getelementptr %[[MASK]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: %[[FULL:.+]] = llvm.load %[[FULLP]] invariant
// CHECK: %[[FULL0:.+]] = arith.maxsi %[[FULL]], %{{.+}} : i32
// CHECK: %[[FULLI:.+]] = arith.index_castui %[[FULL0]] : i32 to index
// CHECK: %[[NFULL:.+]] = arith.minsi %[[FULLI]], %[[NQB:.+]] : index
// The partial count: clamped to the query blocks the full ones leave.
// CHECK: %[[LEFT:.+]] = arith.subi %[[NQB]], %[[NFULL]] : index
// CHECK: llvm.getelementptr %[[MASK]]
// CHECK: %[[PART:.+]] = llvm.load %{{.+}} invariant
// CHECK: arith.maxsi %[[PART]]
// CHECK: arith.minsi %{{.+}}, %[[LEFT]] : index
// A producer loop reads each listed query block and clamps it.
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args
// CHECK: llvm.load %{{.+}} invariant
// CHECK-NEXT: arith.maxsi
// CHECK: gpu.return
// CHECK: gpu.func @fa_block_mask_bwd_bf16_d128_bq64_bkv128
// CHECK: gpu.func @fa_block_lists_bwd_bf16_d128_bq64_bkv128
// CHECK: gpu.func @fa_block_order_bwd_bf16_d128_bq64_bkv128
func.func @document_backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>, %doc: tensor<?x?xi32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse mod_args(%doc : tensor<?x?xi32>) {attn.mask_mod_name = "document"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
