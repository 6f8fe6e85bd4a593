// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod -convert-attn-gpu-to-nvvm -canonicalize -cse | FileCheck %s --check-prefix=BAND --enable-var-scope

// The wgmma forward's score path is the mma.sync forward's tile ops: each
// consumer warpgroup's band (attn_gpu.key_bounds of its 64 rows, from the
// warpgroup's first query), the score_mod on S as wgmma_qk leaves it, the
// band's mask, then the online-softmax update. A query-additive score_mod
// (ALiBi) is anchored by attn-gpu-anchor-score-mod, as in the mma.sync
// forward: both rows of a lane at its first row's query, the finalisation
// taking each row's shift back.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_alibi
// CHECK-SAME: attn.kernel_plan = {{{.*}}mma = "wgmma"{{.*}}tag = "fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_alibi"
// CHECK: attn_gpu.warp_specialize
// CHECK: } consumers registers
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds at [%[[B:[^,]+]], %[[H:[^,]+]], %[[Q:[0-9a-z_]+]]] of [%[[NQ:[^,]+]], %[[NK:[0-9a-z_]+]]] row %[[ROW:[^ ]+]] block %[[Q0:[^ ]+]] {block_rows = 64 : i64, mask = #attn.mask<causal>} : <left = false, right = true>
// CHECK: %[[S0:.+]] = attn_gpu.wgmma_qk
// CHECK: %[[M0:.+]] = attn_gpu.score_mod %{{.+}} scale %[[SCALE:[^ ]+]] at [%[[B]], %[[H]], %[[Q]]] of [%[[NQ]], %[[NK]]] row %[[ROW]] key %{{.+}} {query_anchored} : <16x128xf32, accumulator>
// CHECK: attn_gpu.yield
// CHECK: %[[MASKED0:.+]] = attn_gpu.mask %[[M0]], %[[BOUNDS]] key %{{.+}} : <16x128xf32, accumulator>, <left = false, right = true>
// CHECK: attn_gpu.online_softmax %[[MASKED0]],
// CHECK: scf.for
// CHECK: attn_gpu.wgmma_qk
// CHECK: %[[M:.+]] = attn_gpu.score_mod %{{.+}} scale %[[SCALE]] at [%[[B]], %[[H]], %[[Q]]] of [%[[NQ]], %[[NK]]] row %[[ROW]] key %{{.+}} {query_anchored}
// CHECK: %[[MASKED:.+]] = attn_gpu.mask %[[M]], %[[BOUNDS]]
// CHECK: attn_gpu.online_softmax %[[MASKED]],
// CHECK: %[[SHIFT:.+]] = attn_gpu.score_mod_shift scale %[[SCALE]] at [%[[B]], %[[H]], %[[Q]]] of [%[[NQ]], %[[NK]]] row %[[ROW]]
// CHECK: %[[INV:[^,]+]], %[[LSE:[^ ]+]] = attn_gpu.finalize_softmax %{{.+}}, %{{.+}} shift %[[SHIFT]]
// The epilogue: the mma.sync forward's store_output, staged in the shared
// memory of the consumer's Q rows (-fa-wgmma-smem-epilogue).
// CHECK: attn_gpu.store_output %{{.+}}, %[[INV]], %[[LSE]] to %{{.+}}[%{{.+}} stride %{{.+}}], %{{.+}}[%{{.+}}] rows %[[Q]] + %[[ROW]] below %[[NQ]] staged in %{{.+}} group %{{.+}} : <16x64xf32, accumulator>, {{.+}}, memref<40960xbf16, 3>
// The band lowered (canonicalised) with the kernel builder's own lane ids
// (g = lane / 4, t = lane % 4): the tile's upper edge min(q0 + 1, Nk) at
// the consumer's first query q0 = qBegin + 64·consumer (key_bounds'
// `block`); a lane's rows at qBegin + (rowBase + g), + 8 (`row`), their
// edges relative to the lane's first key 2t.
// BAND-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_alibi
// BAND: %[[TID:.+]] = gpu.thread_id  x
// BAND-NOT: gpu.thread_id
// BAND: %[[LANE:.+]] = arith.remui %[[TID]], %c32 : index
// BAND-NEXT: %[[G:.+]] = arith.divui %[[LANE]], %c4 : index
// BAND-NEXT: %[[T:.+]] = arith.remui %[[LANE]], %c4 : index
// BAND: nvvm.setmaxregister  increase 240
// BAND: %[[WG:.+]] = arith.muli %{{.+}}, %c64 : index
// BAND-NEXT: %[[ROWBASE:.+]] = arith.addi %[[WG]], %{{.+}} : index
// BAND-NEXT: %[[Q0:.+]] = arith.addi %[[QB:.+]], %[[WG]] : index
// BAND: %[[TE:.+]] = arith.addi %[[Q0]], %c1 : index
// BAND-NEXT: arith.minsi %[[TE]], %[[NK:.+]] : index
// BAND: %[[LK:.+]] = arith.muli %[[T]], %c2 : index
// BAND-NEXT: %[[R:.+]] = arith.addi %[[ROWBASE]], %[[G]] : index
// BAND-NEXT: %[[Q:.+]] = arith.addi %[[QB]], %[[R]] : index
// BAND-NEXT: %[[QE:.+]] = arith.addi %[[Q]], %c1 : index
// BAND-NEXT: %[[HI:.+]] = arith.minsi %[[QE]], %[[NK]] : index
// BAND-NEXT: arith.subi %[[HI]], %[[LK]] : index
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_alibi
// NVVM-NOT: attn_gpu.
// NVVM-NOT: attn.kernel_plan
// NVVM: nvvm.wgmma.mma_async
// NVVM-NOT: attn_gpu.
// The staged epilogue: O by 4-byte pairs into shared memory, the consumer's
// named barrier (3 or 4), then 16-byte chunks from shared to global memory.
// NVVM-COUNT-16: vector.store %{{.+}}, %{{.+}}[%{{.+}}] {alignment = 4 : i64} : memref<40960xbf16, 3>, vector<2xbf16>
// NVVM: "bar.sync 3, 128;"
// NVVM: "bar.sync 4, 128;"
// NVVM: vector.load %{{.+}}[%{{.+}}] {alignment = 16 : i64} : memref<40960xbf16, 3>, vector<8xbf16>
// NVVM: vector.store %{{.+}}, %{{.+}}[%{{.+}}] {alignment = 16 : i64} : memref<{{.+}}xbf16>, vector<8xbf16>
// NVVM: gpu.return
func.func @alibi(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>, attn.score_mod_name = "alibi"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %d = arith.subi %kv, %qi : index
    %di = arith.index_cast %d : index to i32
    %df = arith.sitofp %di : i32 to f32
    %slope = arith.constant 0.0625 : f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// A mask_mod follows the score_mod; the key bounds keep each row's upper
// edge (Nk) for it without a band, and the band's mask then masks only past
// Nk, in the ragged first key tile (a branch per width: 64 and 128 keys).
// A score_mod that reads q_idx other than as an added term (here through a
// product) is not anchored. (d64 without a mask: the persistent grid.)
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent_mod_scaled_maskmod_document
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %{{.+}} block %{{.+}} {block_rows = 64 : i64, mask_mod} : <left = false, right = true>
// CHECK: %[[M0:.+]] = attn_gpu.score_mod
// CHECK-NOT: query_anchored
// CHECK: %[[D0:.+]] = attn_gpu.mask_mod %[[M0]] at
// CHECK: tensor.extract
// CHECK: attn_gpu.yield
// CHECK: attn_gpu.mask %[[D0]], %[[BOUNDS]] key %{{.+}} : <16x64xf32, accumulator>
// CHECK: attn_gpu.mask %{{.+}}, %[[BOUNDS]] key %{{.+}} : <16x128xf32, accumulator>
// CHECK: scf.for
// CHECK: attn_gpu.score_mod
// CHECK: %[[D:.+]] = attn_gpu.mask_mod
// CHECK-NOT: attn_gpu.mask %[[D]]
// CHECK: attn_gpu.online_softmax %[[D]],
// CHECK-NOT: attn_gpu.score_mod_shift
// CHECK: %[[INV:[^,]+]], %[[LSE:[^ ]+]] = attn_gpu.finalize_softmax %{{.+}}, %{{.+}} :
// A persistent grid's next Q may be landing in the Q tile: O leaves from
// registers.
// CHECK: attn_gpu.store_output %{{.+}}, %[[INV]], %[[LSE]] to %{{.+}}[%{{.+}} stride %{{.+}}], %{{.+}}[%{{.+}}] rows %{{.+}} below %{{.+}} : <16x64xf32, accumulator>, <16x1xf32, rows>, <16x1xf32, rows>, memref<{{.+}}xbf16>, memref<{{.+}}xf32>{{$}}
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent_mod_scaled_maskmod_document
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
func.func @document(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %doc: tensor<?x?xi32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {attn.score_mod_name = "scaled", attn.mask_mod_name = "document"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %qi32 = arith.index_cast %qi : index to i32
    %qf = arith.sitofp %qi32 : i32 to f32
    %r = arith.mulf %s, %qf : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// Run-time window sizes: the key bounds read the sizes the kernel bound at
// its entry (the last two parameters, clamped to max(Nq, Nk)), so one kernel
// serves every window; the resolved plan's tag says `_window_rt`.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_window_rt_wgmma_sm90a(
// CHECK-SAME: %[[WL:[^:]+]]: i32, %[[WR:[^:]+]]: i32) kernel
// CHECK: %[[LEFT:.+]] = arith.minui %[[WL]], %[[MOST:.+]] : i32
// CHECK-NEXT: %[[L:.+]] = arith.index_castui %[[LEFT]] : i32 to index
// CHECK: %[[RIGHT:.+]] = arith.minui %[[WR]], %[[MOST]] : i32
// CHECK-NEXT: %[[R:.+]] = arith.index_castui %[[RIGHT]] : i32 to index
// CHECK: attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %{{.+}} block %{{.+}} window(%[[L]], %[[R]]) {block_rows = 64 : i64, mask = #attn.mask<window>} : <left = true, right = true>
// CHECK: attn_gpu.mask
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_window_rt_wgmma_sm90a(
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
func.func @runtime_window(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %wl: i64, %wr: i64) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v window(%wl, %wr) {mask = #attn.mask<window>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
