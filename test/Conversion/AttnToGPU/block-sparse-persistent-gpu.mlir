// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-sparse=1 grid=persistent" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -fa-lower-to-nvvm="mma=wgmma block-sparse=1 grid=persistent" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent_blocksparse_maskmod_document.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// REQUIRES: ptxas

// A persistent block-sparse forward (grid = persistent): one CTA per SM walks
// the tiles t of the tile counter, tile t taking (batch t / (NQB·H), then
// the CTA grid's place and head of group (t mod NQB·H) / (4·NQB)) and the
// query block at that place of its mask row's order. The producer alone
// reads the block mask: it publishes the tile's query block, key-block
// count and full count in the tile words after the tile (u32 40960 + 1..3,
// beside the tile at 40960), and each ring slot's key block in word
// 40960 + 4 + slot before K's TMA; the consumers read them from shared
// memory (after Q full, and after the slot's K full). The producer takes 48
// registers, the consumers 224.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent_blocksparse_maskmod_document
// CHECK: nvvm.setmaxregister  decrease 48
// The producer's ring slot: the listed key block into the slot's word, then
// K's boxes at its rows.
// CHECK: llvm.load %{{.+}} invariant {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK: %[[SLOTW:.+]] = arith.addi %c4{{.*}}, %{{.+}} : index
// CHECK-NEXT: %c40960{{.*}} = arith.constant 40960 : index
// CHECK-NEXT: %[[AT:.+]] = arith.addi %c40960{{.*}}, %[[SLOTW]] : index
// CHECK-NEXT: memref.store %[[KEY:.+]], %[[WORDS:.+]][%[[AT]]] : memref<40968xi32, 3>
// CHECK: arith.muli %[[KEY]], %c128_i32 : i32
// CHECK: nvgpu.tma.async.load
// The tile's words, after Q empty and before Q's boxes.
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK-NEXT: %c0{{.*}} = arith.constant 0 : index
// CHECK-NEXT: %c40960{{.*}} = arith.constant 40960 : index
// CHECK-NEXT: %[[TILEW:.+]] = arith.addi %c40960{{.*}}, %c0{{.*}} : index
// CHECK-NEXT: memref.store %{{.+}}, %[[WORDS]][%[[TILEW]]] : memref<40968xi32, 3>
// CHECK: memref.store %{{.+}}, %[[WORDS]][%{{.+}}] : memref<40968xi32, 3>
// CHECK: memref.store %{{.+}}, %[[WORDS]][%{{.+}}] : memref<40968xi32, 3>
// CHECK: memref.store %{{.+}}, %[[WORDS]][%{{.+}}] : memref<40968xi32, 3>
// CHECK: nvgpu.tma.async.load
// The consumers: the tile after Q full, its place in i32 (groups of 4
// heads), the published query block, count and full count.
// CHECK: nvvm.setmaxregister  increase 224
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK-NEXT: %c0{{.*}} = arith.constant 0 : index
// CHECK-NEXT: %c40960{{.*}} = arith.constant 40960 : index
// CHECK-NEXT: %[[TILEC:.+]] = arith.addi %c40960{{.*}}, %c0{{.*}} : index
// CHECK-NEXT: %[[T:.+]] = memref.load %[[WORDS]][%[[TILEC]]] : memref<40968xi32, 3>
// CHECK: ^bb0(%[[TILE:.+]]: i32, %{{.+}}: i32, %{{.+}}: i32):
// CHECK: %[[BATCH:.+]] = arith.divui %[[TILE]], %{{.+}} : i32
// CHECK: %c4_i32 = arith.constant 4 : i32
// CHECK: %[[QBAT:.+]] = arith.addi %c40960{{.*}}, %c1{{.*}} : index
// CHECK-NEXT: memref.load %[[WORDS]][%[[QBAT]]] : memref<40968xi32, 3>
// CHECK: %[[COUNTAT:.+]] = arith.addi %c40960{{.*}}, %c2{{.*}} : index
// CHECK-NEXT: %[[COUNTW:.+]] = memref.load %[[WORDS]][%[[COUNTAT]]] : memref<40968xi32, 3>
// CHECK-NEXT: %[[COUNT:.+]] = arith.index_castui %[[COUNTW]] : i32 to index
// CHECK: %[[FULLAT:.+]] = arith.addi %c40960{{.*}}, %c3{{.*}} : index
// CHECK-NEXT: %[[FULLW:.+]] = memref.load %[[WORDS]][%[[FULLAT]]] : memref<40968xi32, 3>
// CHECK-NEXT: %[[FULL:.+]] = arith.index_castui %[[FULLW]] : i32 to index
// The key loop runs to the count; tiles below the full count skip the mask.
// CHECK: arith.cmpi slt, %{{.+}}, %[[COUNT]] : index
// The steady state reads the slot's key block right after its K full wait.
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: %[[KW:.+]] = arith.addi %c4{{.*}}, %{{.+}} : index
// CHECK-NEXT: %c40960{{.*}} = arith.constant 40960 : index
// CHECK-NEXT: %[[KAT:.+]] = arith.addi %c40960{{.*}}, %[[KW]] : index
// CHECK-NEXT: memref.load %[[WORDS]][%[[KAT]]] : memref<40968xi32, 3>
// CHECK: arith.cmpi slt, %{{.+}}, %[[FULL]] : index

// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

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
