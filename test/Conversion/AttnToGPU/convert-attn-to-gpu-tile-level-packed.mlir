// RUN: fa-opt %s -split-input-file -attn-gpu-plan="split-kv=1 pack-gqa=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="split-kv=1 pack-gqa=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm | FileCheck %s --enable-var-scope --check-prefix=NVVM

// Packed GQA at the GPU tile level: grid y is the key head; the tile's rows
// (the G = H / Hkv query heads of it, n = max(64 / G, 1) queries of each)
// are an !attn_gpu.packed_rows value, which every op that needs a row's
// position takes: the Q gather, the key band, score_mod, mask_mod and the
// epilogue, which stores split s's f32 partial rows at their (head, query).

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(
// CHECK-SAME: pack_gqa
// CHECK-DAG: %[[X:.+]] = gpu.block_id  x
// CHECK-DAG: %[[HK:.+]] = gpu.block_id  y
// CHECK-DAG: %[[SPLIT:.+]] = arith.remui %{{.+}}, %{{.+}} : index
// CHECK-DAG: %[[BATCH:.+]] = arith.divui %{{.+}}, %{{.+}} : index
// CHECK: %[[ROWS:[^,]+]], %[[Q0:[^ ]+]] = attn_gpu.packed_rows key_head %[[HK]] block %[[X]] of [%[[BATCH]], %{{.+}}, %{{.+}}, %{{.+}}] {block_rows = 64 : i64} : !attn_gpu.packed_rows
// The split-KV kernel's tiles are swizzled, not padded: Q | K | V of
// 64 x 128 elements each, 8192 apart.
// CHECK: attn_gpu.shared_memory 24576 x bf16
// CHECK: %[[QT:.+]] = attn_gpu.shared_tile offset 0 : <64x128xbf16, stride = 128, swizzle>
// CHECK: attn_gpu.async_gather %arg0[%[[BATCH]]] strides [%{{.+}}, %{{.+}}, %{{.+}}] rows %[[ROWS]] into %[[QT]]
// CHECK: %[[ROW:.+]] = attn_gpu.warp_row_offset
// CHECK: attn_gpu.key_bounds at [%[[BATCH]], %[[HK]], %[[Q0]]] of [%{{.+}}, %{{.+}}] row %[[ROW]] rows %[[ROWS]] {block_rows = 64 : i64, mask = #attn.mask<causal_bottom_right>}
// CHECK: scf.for
// CHECK: attn_gpu.shared_tile offset 8192 : <64x128xbf16, stride = 128, swizzle>
// CHECK: attn_gpu.shared_tile offset 16384 : <64x128xbf16, stride = 128, swizzle>
// CHECK: attn_gpu.mma_qk
// CHECK: attn_gpu.mask
// CHECK: scf.yield
// CHECK: attn_gpu.finalize_softmax
// CHECK: attn_gpu.store_output %{{.+}} to %arg3[%{{.+}}], %arg4[%{{.+}}] rows %[[Q0]] + %[[ROW]] below %{{.+}} packed %[[ROWS]] split %[[SPLIT]] of %arg5 :

// The lowering: a tile row's head h0 + r mod G and query q0 + r div G, the
// Q gather predicated on the row being real (q < Nq and inside the tile's n
// queries of its head), the stores likewise.
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(
// NVVM-NOT: attn_gpu.
// NVVM: %[[PER:.+]] = arith.divui %c64{{[_0-9]*}}, %[[G:.+]] : index
// NVVM-NEXT: arith.constant 1
// NVVM-NEXT: %[[N:.+]] = arith.maxui %[[PER]], %{{.+}} : index
// NVVM-NEXT: %[[H0:.+]] = arith.muli %{{.+}}, %[[G]] : index
// NVVM-NEXT: %[[Q0:.+]] = arith.muli %{{.+}}, %[[N]] : index
// NVVM: %[[R:.+]] = arith.remui %{{.+}}, %[[G]] : index
// NVVM-NEXT: %[[QR:.+]] = arith.divui %{{.+}}, %[[G]] : index
// NVVM-NEXT: %[[H:.+]] = arith.addi %[[H0]], %[[R]] : index
// NVVM-NEXT: %[[Q:.+]] = arith.addi %[[Q0]], %[[QR]] : index
// NVVM: nvgpu.device_async_copy
// A swizzled tile's 16-byte chunk c of row r lies at chunk c xor (r mod 8):
// the ldmatrix addresses of the key loop.
// NVVM: scf.for
// NVVM: %[[CHUNK:.+]] = arith.xori %{{.+}}, %{{.+}} : index
// NVVM: nvgpu.ldmatrix
// NVVM: mma.sync
// The epilogue's rows: split s's partials after s·B·H·Nq rows.
// NVVM: %[[OK:.+]] = arith.andi %{{.+}}, %{{.+}} : i1
// NVVM: %[[B:.+]] = arith.index_castui %arg5 : i32 to index
// NVVM-NEXT: %[[S1:.+]] = arith.muli %{{.+}}, %[[B]] : index
// NVVM-NEXT: %[[S2:.+]] = arith.muli %[[S1]], %{{.+}} : index
// NVVM-NEXT: %[[S3:.+]] = arith.muli %[[S2]], %{{.+}} : index
// NVVM-NEXT: %[[GR:.+]] = arith.addi %[[S3]], %{{.+}} : index
// NVVM: scf.if %[[OK]] {
func.func @decode(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}

// -----

// A mask_mod with a score_mod on packed rows: both regions take the rows,
// the mask_mod after the score_mod and before the band; the key bounds know
// there is a mask_mod (their rows keep an upper edge without a band).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv32_w4_s2_none_sm90a_packgqa_splitkv_mod_softcap_maskmod_document(
// CHECK: %[[ROWS:[^,]+]], %[[Q0:[^ ]+]] = attn_gpu.packed_rows
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds {{.+}} rows %[[ROWS]] {block_rows = 64 : i64, mask_mod} : <left = false, right = true>
// CHECK: %[[S:.+]] = attn_gpu.mma_qk
// CHECK: %[[SM:.+]] = attn_gpu.score_mod %[[S]] scale %{{.+}} at [%{{.+}}, %{{.+}}, %[[Q0]]] of [%{{.+}}, %{{.+}}] row %{{.+}} key %[[KEY:[^ ]+]] rows %[[ROWS]] : <16x32xf32, accumulator> {
// CHECK: math.tanh
// CHECK: attn_gpu.yield %{{.+}} : f32
// CHECK: %[[MM:.+]] = attn_gpu.mask_mod %[[SM]] at [%{{.+}}, %{{.+}}, %[[Q0]]] of [%{{.+}}, %{{.+}}] row %{{.+}} key %[[KEY]] rows %[[ROWS]] : <16x32xf32, accumulator> {
// CHECK-NEXT: ^bb0(%{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: tensor<?x?xi32>):
// CHECK: arith.cmpi eq
// CHECK-NEXT: attn_gpu.yield %{{.+}} : i1
// CHECK: attn_gpu.mask %[[MM]], %[[BOUNDS]] key %[[KEY]]
// The mask_mod reads its tensor through the kernel's trailing parameters:
// one global load per row's document (b, q) and per key column (b, kv).
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv32_w4_s2_none_sm90a_packgqa_splitkv_mod_softcap_maskmod_document(
// NVVM-NOT: attn_gpu.
// NVVM: scf.for
// NVVM: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// NVVM: arith.cmpi eq
// NVVM: arith.select
func.func @document_softcap(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %doc: tensor<?x?xi32>) -> (tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {attn.score_mod_name = "softcap", attn.mask_mod_name = "document"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %c = arith.constant 30.0 : f32
    %x = arith.divf %s, %c : f32
    %y = math.tanh %x : f32
    %r = arith.mulf %y, %c : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
}
