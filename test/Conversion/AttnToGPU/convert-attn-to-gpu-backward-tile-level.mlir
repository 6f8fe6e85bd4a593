// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM

// convert-attn-to-gpu maps the tiled loops of the mma.sync recompute
// backward to the grid (CTA = key block, key head, batch) and its tile op to
// the GPU tile level: K and V loaded once, then for each query head of the
// GQA group and each query block of the tiled loop (the bounds
// attn-recompute-backward computed) Sᵀ = K·Qᵀ, the mask, Pᵀ from LSE,
// dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ, dK += dSᵀ·Q, the next tile's loads and the
// dQ reduction, carrying the dK and dV fragments. convert-attn-gpu-to-nvvm
// lowers every op in place (scripts/ptx-identity.sh: the PTX the builders
// emitted before).

// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// CHECK-SAME: %[[Q:[^:]+]]: memref<{{.+}}xbf16>, %[[K:[^:]+]]: memref<{{.+}}xbf16>, %[[V:[^:]+]]: memref<{{.+}}xbf16>, %[[DO:[^:]+]]: memref<{{.+}}xbf16>, %[[LSE:[^:]+]]: memref<{{.+}}xf32>, %[[DELTA:[^:]+]]: memref<{{.+}}xf32>, %[[DQ:[^:]+]]: memref<{{.+}}xf32>, %[[DK:[^:]+]]: memref<{{.+}}xbf16>, %[[DV:[^:]+]]: memref<{{.+}}xbf16>, {{.+}}, %[[SCALE:[^:]+]]: f32,
// CHECK-SAME: attn.kernel_plan = {{{.*}}tag = "bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a"
// CHECK: %[[KBLOCK:.+]] = gpu.block_id  x
// CHECK: %[[KVHEAD:.+]] = gpu.block_id  y
// CHECK: %[[BATCH:.+]] = gpu.block_id  z
// CHECK: %[[KBEGIN:.+]] = arith.muli %[[KBLOCK]], %{{.+}} : index
// K | V | Q | dO | dSᵀ; LSE and Delta in K's row padding, seen as f32 words.
// CHECK: attn_gpu.shared_memory 61440 x bf16
// CHECK-NEXT: %[[STATS:.+]] = attn_gpu.shared_f32_view : memref<30720xf32, 3>
// CHECK: %[[KT:.+]] = attn_gpu.shared_tile offset 0 : <128x128xbf16, stride = 136>
// CHECK-NEXT: %[[VT:.+]] = attn_gpu.shared_tile offset 17408 : <128x128xbf16, stride = 136>
// CHECK-NEXT: %[[QT:.+]] = attn_gpu.shared_tile offset 34816 : <64x128xbf16, stride = 136>
// CHECK-NEXT: %[[DOT:.+]] = attn_gpu.shared_tile offset 43520 : <64x128xbf16, stride = 136>
// CHECK-NEXT: %[[DST:.+]] = attn_gpu.shared_tile offset 52224 : <128x64xbf16, stride = 72>
// CHECK: attn_gpu.async_copy %[[K]][%{{.+}}] rows %[[KBEGIN]] below %{{.+}} stride %{{.+}} into %[[KT]]
// CHECK: attn_gpu.async_copy %[[V]][%{{.+}}] rows %[[KBEGIN]] below %{{.+}} stride %{{.+}} into %[[VT]]
// CHECK: %[[ROW:.+]] = attn_gpu.warp_row_offset : index
// CHECK: %[[DK0:.+]] = attn_gpu.fill %{{.+}} : <16x128xf32, accumulator>
// CHECK-NEXT: %[[DV0:.+]] = attn_gpu.fill %{{.+}} : <16x128xf32, accumulator>
// The first query tile's loads, before the loops.
// CHECK: attn_gpu.async_copy %[[Q]][{{.+}} into %[[QT]]
// CHECK: attn_gpu.async_copy %[[DO]][{{.+}} into %[[DOT]]
// CHECK: attn_gpu.async_copy_row_stats %[[LSE]], %[[DELTA]][%{{.+}}] rows %{{.+}} below %{{.+}} into %[[STATS]] beside %[[KT]] {block_rows = 64 : i64}
// The query heads of the group, then the query blocks of the tiled loop.
// CHECK: %[[RES:.+]]:2 = scf.for %{{.+}} iter_args(%{{.+}} = %[[DK0]], %{{.+}} = %[[DV0]]) -> (!attn_gpu.fragment<16x128xf32, accumulator>, !attn_gpu.fragment<16x128xf32, accumulator>)
// CHECK: scf.for %[[I:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[DKI:.+]] = %{{.+}}, %[[DVI:.+]] = %{{.+}})
// CHECK: %[[QBEGIN:.+]] = arith.muli %[[I]], %{{.+}} : index
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[S:.+]] = attn_gpu.mma_qk %[[KT]][%[[ROW]]], %[[QT]] : !attn_gpu.shared_tile<128x128xbf16, stride = 136>, <64x128xbf16, stride = 136> -> <16x64xf32, accumulator>
// The whole-tile test of the block_kv × block_q tile, then the mask on the
// tiles it does not find inside (at its opaque copy of the first query).
// CHECK-NEXT: %[[MQ:[0-9a-z_]+]], %[[IN:[0-9a-z_]+]] = attn_gpu.transposed_bounds at [%[[QBEGIN]], %[[KBEGIN]]] of [%[[NQ0:[0-9a-z_]+]], %[[NK0:[0-9a-z_]+]]] {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<causal>}
// CHECK-NEXT: %[[SM:.+]] = scf.if %[[IN]] -> (!attn_gpu.fragment<16x64xf32, accumulator>) {
// CHECK-NEXT: scf.yield %[[S]]
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[MASKED:.+]] = attn_gpu.transposed_mask %[[S]] at [%[[BATCH]], %{{.+}}, %[[MQ]], %[[KBEGIN]]] of [%[[NQ0]], %[[NK0]]] row %[[ROW]] : <16x64xf32, accumulator>
// CHECK-NEXT: scf.yield %[[MASKED]]
// CHECK-NEXT: }
// CHECK-NEXT: %[[P:.+]], %[[D:.+]] = attn_gpu.recompute_probs %[[SM]], %[[STATS]] beside %[[KT]] scale %{{.+}} : <16x64xf32, accumulator>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, columns>
// CHECK-NEXT: %[[DV1:.+]] = attn_gpu.mma_pv %[[P]], %[[DOT]], %[[DVI]] : <16x64xf32, accumulator>, <64x128xbf16, stride = 136>, <16x128xf32, accumulator>
// CHECK-NEXT: %[[DP:.+]] = attn_gpu.mma_qk %[[VT]][%[[ROW]]], %[[DOT]]
// CHECK-NEXT: %[[DS:.+]] = attn_gpu.score_gradient %[[P]], %[[DP]], %[[D]] scale %[[SCALE]] : <16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
// CHECK-NEXT: attn_gpu.store_tile %[[DS]], %[[DST]][%[[ROW]]] : <16x64xf32, accumulator>, <128x64xbf16, stride = 72>
// CHECK-NEXT: %[[DK1:.+]] = attn_gpu.mma_pv %[[DS]], %[[QT]], %[[DKI]]
// CHECK-NEXT: gpu.barrier
// The next tile (of this head, else of the next head) loads under dQ.
// CHECK: scf.if
// CHECK: attn_gpu.async_copy %[[Q]][{{.+}} into %[[QT]]
// CHECK: attn_gpu.async_copy %[[DO]][{{.+}} into %[[DOT]]
// CHECK: attn_gpu.async_copy_row_stats {{.+}} : memref<{{.+}}>, memref<{{.+}}>, memref<30720xf32, 3>, <128x128xbf16, stride = 136>
// CHECK-NEXT: }
// CHECK-NEXT: attn_gpu.reduce_dq %[[DST]], %[[KT]] into %{{.+}}[%{{.+}}] rows %[[QBEGIN]] below %{{.+}} {columns = 128 : i64, row_elements = 128 : i64}
// CHECK-NEXT: scf.yield %[[DK1]], %[[DV1]]
// CHECK: attn_gpu.async_wait 0
// CHECK: attn_gpu.store_accumulator %[[RES]]#0 to %[[DK]][%{{.+}} stride %{{.+}}] rows %{{.+}} below %{{.+}} {row_elements = 128 : i64} : <16x128xf32, accumulator>
// CHECK: attn_gpu.store_accumulator %[[RES]]#1 to %[[DV]][%{{.+}} stride %{{.+}}] rows %{{.+}} below %{{.+}} {row_elements = 128 : i64}
// CHECK-NEXT: gpu.return

// The lowering leaves no tile op: cp.async groups, ldmatrix, mma.sync, the f32
// reductions into dq_accum.
// NVVM-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// NVVM-NOT: attn_gpu.
// NVVM-NOT: attn.kernel_plan
// NVVM: nvgpu.device_async_copy
// NVVM: nvvm.cp.async.commit.group
// NVVM: nvgpu.ldmatrix
// NVVM: nvvm.mma.sync
// NVVM: red.global.add
// NVVM: gpu.return
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

// D + Dv > 256: each CTA owns a column slice of dK, dV and dQ (dsplit 2):
// the products read the slice from its first column. A score_mod keeps
// d(score)/dSᵀ for dS; a mask_mod masks Sᵀ before the band.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_none_sm90a_mod_softcap_maskmod_even(
// CHECK: %[[PART:.+]] = arith.remui %{{.+}}, %{{.+}} : index
// CHECK: %[[COLK:.+]] = arith.muli %[[PART]], %{{.+}} : index
// CHECK: %[[COLV:.+]] = arith.muli %[[PART]], %{{.+}} : index
// CHECK: attn_gpu.fill %{{.+}} : <16x128xf32, accumulator>
// CHECK: %[[S:.+]] = attn_gpu.mma_qk
// CHECK-NEXT: %[[SM:.+]], %[[DER:.+]] = attn_gpu.transposed_score_mod %[[S]] scale %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x32xf32, accumulator> {
// CHECK: attn_gpu.yield %{{.+}} : f32
// CHECK: %[[MM:.+]] = attn_gpu.transposed_mask_mod %[[SM]] at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x32xf32, accumulator> {
// CHECK: attn_gpu.yield %{{.+}} : i1
// CHECK: %{{.+}}, %[[IN:[0-9a-z_]+]] = attn_gpu.transposed_bounds
// CHECK: scf.if %[[IN]]
// CHECK-NEXT: scf.yield %[[MM]]
// CHECK: attn_gpu.transposed_mask %[[MM]]
// CHECK: attn_gpu.mma_pv %{{.+}}, %{{.+}} columns %[[COLV]], %{{.+}} : <16x32xf32, accumulator>, <32x256xbf16, stride = 264>, <16x128xf32, accumulator>
// CHECK: attn_gpu.score_gradient %{{.+}}, %{{.+}}, %{{.+}} derivative %[[DER]] : <16x32xf32, accumulator>, !attn_gpu.fragment<16x32xf32, columns>, !attn_gpu.fragment<16x32xf32, accumulator>
// CHECK: attn_gpu.mma_pv %{{.+}}, %{{.+}} columns %[[COLK]], %{{.+}} : <16x32xf32, accumulator>, <32x256xbf16, stride = 264>, <16x128xf32, accumulator>
// CHECK: attn_gpu.reduce_dq %{{.+}}, %{{.+}} columns %[[COLK]] into {{.+}} {columns = 128 : i64, row_elements = 256 : i64}
// NVVM-LABEL: gpu.func @fa_bwd_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_none_sm90a_mod_softcap_maskmod_even(
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
func.func @split_mods(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse {attn.score_mod_name = "softcap", attn.mask_mod_name = "even"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %c2 = arith.constant 2 : index
    %m = arith.remui %j, %c2 : index
    %c0 = arith.constant 0 : index
    %e = arith.cmpi eq, %m, %c0 : index
    attn.yield %e : i1
  } : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
}

// -----

// A window whose sizes are kernel arguments: the mask reads the values the
// kernel's entry bound from its last two parameters.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d64_bq64_bkv128_w8_s1_window_rt_sm90a(
// CHECK: attn_gpu.transposed_bounds at [{{.+}}] of [{{.+}}] window(%{{.+}}, %{{.+}}) {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<window>}
// CHECK: attn_gpu.transposed_mask
func.func @window(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>, %wl: i64, %wr: i64) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse window(%wl, %wr) {mask = #attn.mask<window>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}

// -----

// A varlen batch (packed [T, H, D] tensors, cu_seqlens): grid z is the
// sequence, whose rows the kernel reads from the offsets (clamped into the
// totals, the kernel's nq and nk); a key block past its sequence's keys does
// nothing; K, V, Q, dO, dK and dV start at the sequence's first row of
// batch 0, LSE, Delta and dq_accum at row h·Tq + its first query.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d64_bq64_bkv128_w8_s1_causal_bottom_right_sm90a_varlen(
// CHECK-SAME: %[[CUQ:[^:]+]]: !llvm.ptr<1>, %[[CUK:[^:]+]]: !llvm.ptr<1>)
// CHECK: %[[TQ:.+]] = arith.index_castui %arg12 : i32 to index
// CHECK: %[[TK:.+]] = arith.index_castui %arg13 : i32 to index
// CHECK: %[[KBLOCK:.+]] = gpu.block_id  x
// CHECK: %[[SEQ:.+]] = gpu.block_id  z
// CHECK: %[[KBEGIN:.+]] = arith.muli %[[KBLOCK]], %{{.+}} : index
// CHECK: llvm.getelementptr %[[CUQ]]
// CHECK: %[[QSTART:.+]] = arith.minsi %{{.+}}, %[[TQ]] : index
// CHECK: %[[QEND:.+]] = arith.minsi %{{.+}}, %[[TQ]] : index
// CHECK: %[[NQ:.+]] = arith.subi %[[QEND]], %[[QSTART]] : index
// CHECK: llvm.getelementptr %[[CUK]]
// CHECK: %[[KSTART:.+]] = arith.minsi %{{.+}}, %[[TK]] : index
// CHECK: %[[KEND:.+]] = arith.minsi %{{.+}}, %[[TK]] : index
// CHECK: %[[NK:.+]] = arith.subi %[[KEND]], %[[KSTART]] : index
// CHECK: %[[ACTIVE:.+]] = arith.cmpi slt, %[[KBEGIN]], %[[NK]] : index
// CHECK: scf.if %[[ACTIVE]] {
// CHECK: arith.muli %[[KSTART]], %{{.+}} : index
// CHECK: attn_gpu.async_copy %{{.+}} rows %[[KBEGIN]] below %[[NK]] stride
// CHECK: attn_gpu.async_copy_row_stats {{.+}} rows %{{.+}} below %[[NQ]] into
// The bottom-right band reads both lengths: each query tile reads them again
// through an opaque copy of the offsets' pointers (LLVM cannot hoist the
// loads), so they are not held in registers across the loops.
// CHECK: scf.for
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "mov.b64 $0, $1;"
// CHECK-NEXT: %[[CUQ2:.+]] = llvm.inttoptr
// CHECK: llvm.getelementptr %[[CUQ2]]
// CHECK: attn_gpu.transposed_bounds at [{{.+}}] of [%[[NQ2:[0-9]+]], %[[NK2:[0-9]+]]] {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<causal_bottom_right>}
// CHECK: attn_gpu.transposed_mask %{{.+}} of [%[[NQ2]], %[[NK2]]] row
// CHECK: attn_gpu.reduce_dq {{.+}} below %[[NQ2]] {
// And once more for the dK, dV epilogue.
// CHECK: attn_gpu.async_wait 0
// CHECK: llvm.inttoptr
// CHECK: attn_gpu.store_accumulator {{.+}} below %[[NK3:[0-9]+]] {
// CHECK: attn_gpu.store_accumulator {{.+}} below %[[NK3]] {{{.+}}} : {{.+}}
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return
// NVVM-LABEL: gpu.func @fa_bwd_bwd_bf16_d64_bq64_bkv128_w8_s1_causal_bottom_right_sm90a_varlen(
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
func.func @varlen(%q: tensor<?x?x64xbf16>, %k: tensor<?x?x64xbf16>, %v: tensor<?x?x64xbf16>, %o: tensor<?x?x64xbf16>, %do: tensor<?x?x64xbf16>, %lse: tensor<?x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse varlen(%cuq, %cuk : tensor<?xi32>, tensor<?xi32>) {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?xf32> -> tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>
}
