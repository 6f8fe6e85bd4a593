// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm -canonicalize -cse | FileCheck %s --check-prefix=BAND --enable-var-scope

// The wgmma backward's score path and its dK, dV stores are the mma.sync
// backward's tile ops: per
// query tile, the whole-tile test of the consumer warpgroup's 64 keys
// (transposed_bounds, `block_index` its warpgroup), the score_mod on Sᵀ as
// wgmma_qk leaves it (keeping d(score)/dSᵀ), then the mask on tiles not
// wholly inside (an scf.if), reading Nq and Nk through opaque copies.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap(
// CHECK-SAME: attn.kernel_plan = {{{.*}}mma = "wgmma"{{.*}}tag = "bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap"
// CHECK: } consumers registers 240 {
// CHECK: scf.for
// The consumer's lane ids, made in the key loop through an opaque thread id.
// CHECK: %[[TID:.+]] = arith.index_castui %{{.+}} : i32 to index
// CHECK: %[[WG1:.+]] = arith.divui %[[TID]], %c128{{[_0-9]*}} : index
// CHECK-NEXT: %{{.+}} = arith.constant 1 : index
// CHECK-NEXT: %[[WG:.+]] = arith.subi %[[WG1]], %{{.+}} : index
// CHECK: %[[ROW:.+]] = arith.addi %{{.+}}, %{{.+}} : index
// CHECK: attn_gpu.wgmma_qk
// CHECK: %[[Q:[0-9a-z_]+]], %[[IN:[0-9a-z_]+]] = attn_gpu.transposed_bounds at [%[[QB:[0-9a-z_]+]], %[[KB:[0-9a-z_]+]]] of [%[[NQ:[0-9a-z_]+]], %[[NK:[0-9a-z_]+]]] block_index %[[WG]] {block_keys = 64 : i64, block_queries = 64 : i64, mask = #attn.mask<causal>}
// CHECK: %[[S:[0-9a-z_]+]], %[[DS:[0-9a-z_]+]] = attn_gpu.transposed_score_mod %{{.+}} scale %{{.+}} at [%[[B:[0-9a-z_]+]], %[[H:[0-9a-z_]+]], %[[QB]]] of [%[[NQ]], %[[NK]]] row %[[ROW]] key %[[KB]] : <16x64xf32, accumulator> {
// CHECK: math.tanh
// CHECK: %[[SM:.+]] = scf.if %[[IN]] -> (!attn_gpu.fragment<16x64xf32, accumulator>) {
// CHECK-NEXT: scf.yield %[[S]]
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[M:.+]] = attn_gpu.transposed_mask %[[S]] at [%[[B]], %[[H]], %[[Q]], %[[KB]]] of [%[[NQ]], %[[NK]]] row %[[ROW]] {opaque_lengths} : <16x64xf32, accumulator>
// CHECK-NEXT: scf.yield %[[M]]
// Pᵀ and dSᵀ from the query tile's stage of statistics in shared memory
// (LSE, then Delta), dSᵀ with the score_mod's d(score)/dSᵀ, the
// transposed_score_mod's fragment as it is.
// CHECK: %[[P:.+]] = attn_gpu.recompute_probs %[[SM]], %[[STATS:.+]][%{{.+}}] scale %{{[^ ]+}} {folded_lse} : <16x64xf32, accumulator>, memref<{{[0-9]+}}xf32, 3>{{$}}
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: attn_gpu.score_gradient %{{.+}}, %{{.+}} delta(%[[STATS]][%{{.+}}] : memref<{{[0-9]+}}xf32, 3>) derivative %[[DS]] : <16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, accumulator>
// After the loop, dK (%arg7) then dV (%arg8) of the warp's 16 keys from
// keyBegin + row, below Nk: the mma.sync backward's store_accumulator (the
// lane ids those of the kernel's entry).
// CHECK: %[[KROW:.+]] = arith.addi %[[KB]], %{{.+}} : index
// CHECK: attn_gpu.store_accumulator %{{.+}} to %arg7[%{{.+}} stride %{{.+}}] rows %[[KROW]] below %[[NK]] {row_elements = 128 : i64} : <16x128xf32, accumulator>, memref<1099511627776xbf16>
// CHECK: attn_gpu.store_accumulator %{{.+}} to %arg8[%{{.+}} stride %{{.+}}] rows %[[KROW]] below %[[NK]] {row_elements = 128 : i64} : <16x128xf32, accumulator>, memref<1099511627776xbf16>
// CHECK-NEXT: }
// NVVM-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap(
// NVVM-NOT: attn_gpu.
// NVVM-NOT: attn.kernel_plan
// NVVM: nvvm.wgmma.mma_async
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
// Lowered (canonicalised) with the consumer's own lane ids (g = lane / 4,
// t = lane % 4 of its opaque thread id): the tile test over keys
// [k0, k0 + 64), k0 = keyBegin + 64·warpgroup, against the opaque first
// query q0 (the lengths first, then the causal edge k0 + 63 <= q0); on the
// masked path Nq and Nk opaque, a lane's keys at keyBegin + row + g and its
// queries from q0 + 2t.
// BAND-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap(
// BAND: llvm.inline_asm has_side_effects "mov.u32 $0, $1;", "=r,r" %{{.+}} : (i32) -> i32
// BAND-NEXT: %[[TID:.+]] = arith.index_castui %{{.+}} : i32 to index
// BAND-NEXT: %[[WARP:.+]] = arith.divui %[[TID]], %c32 : index
// BAND-NEXT: %[[LANE:.+]] = arith.remui %[[TID]], %c32 : index
// BAND-NEXT: %[[G:.+]] = arith.divui %[[LANE]], %c4 : index
// BAND-NEXT: %[[T:.+]] = arith.remui %[[LANE]], %c4 : index
// BAND-NEXT: %[[WG1:.+]] = arith.divui %[[TID]], %c128 : index
// BAND-NEXT: %[[WG:.+]] = arith.subi %[[WG1]], %c1 : index
// BAND-NEXT: %[[W4:.+]] = arith.remui %[[WARP]], %c4 : index
// BAND-NEXT: %[[W16:.+]] = arith.muli %[[W4]], %c16 : index
// BAND-NEXT: %[[WG64:.+]] = arith.muli %[[WG]], %c64 : index
// BAND-NEXT: %[[ROW:.+]] = arith.addi %[[WG64]], %[[W16]] : index
// BAND: %[[OQ:.+]] = llvm.inline_asm has_side_effects "mov.u32 $0, $1;", "=r,r" %{{.+}} : (i32) -> i32
// BAND-NEXT: %[[Q0:.+]] = arith.index_castui %[[OQ]] : i32 to index
// BAND-NEXT: %[[QE:.+]] = arith.addi %[[Q0]], %c64 : index
// BAND-NEXT: %[[K0:.+]] = arith.addi %[[KB:.+]], %[[WG64]] : index
// BAND-NEXT: %[[KE:.+]] = arith.addi %[[K0]], %c64 : index
// BAND-NEXT: %[[KIN:.+]] = arith.cmpi sle, %[[KE]], %[[NK:.+]] : index
// BAND-NEXT: %[[QIN:.+]] = arith.cmpi sle, %[[QE]], %[[NQ:.+]] : index
// BAND-NEXT: %[[LEN:.+]] = arith.andi %[[QIN]], %[[KIN]] : i1
// BAND-NEXT: %[[KL:.+]] = arith.addi %[[K0]], %c63 : index
// BAND-NEXT: %[[EDGE:.+]] = arith.cmpi sle, %[[KL]], %[[Q0]] : index
// BAND-NEXT: %[[IN:.+]] = arith.andi %[[EDGE]], %[[LEN]] : i1
// BAND: scf.if %[[IN]] -> (f32,
// BAND-NEXT: scf.yield
// BAND-NEXT: } else {
// BAND-NEXT: %[[ONQ:.+]] = llvm.inline_asm has_side_effects "mov.u32 $0, $1;", "=r,r" %arg12 : (i32) -> i32
// BAND-NEXT: %[[MNQ:.+]] = arith.index_castui %[[ONQ]] : i32 to index
// BAND-NEXT: %[[ONK:.+]] = llvm.inline_asm has_side_effects "mov.u32 $0, $1;", "=r,r" %arg13 : (i32) -> i32
// BAND-NEXT: %[[MNK:.+]] = arith.index_castui %[[ONK]] : i32 to index
// BAND-NEXT: %[[T2:.+]] = arith.muli %[[T]], %c2 : index
// BAND-NEXT: %[[LQ:.+]] = arith.addi %[[Q0]], %[[T2]] : index
// BAND-NEXT: arith.subi %[[MNQ]], %[[LQ]] : index
// BAND-NEXT: %[[RG:.+]] = arith.addi %[[ROW]], %[[G]] : index
// BAND-NEXT: %[[KEY:.+]] = arith.addi %[[KB]], %[[RG]] : index
// BAND-NEXT: arith.cmpi slt, %[[KEY]], %[[MNK]] : index
func.func @softcap_causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>, attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 50.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %y = arith.mulf %t, %cap : f32
    attn.yield %y : f32
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
