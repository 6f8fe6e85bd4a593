// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="split-kv=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefix=SPLIT

// convert-attn-to-gpu maps the tiled loops of the mma.sync forward to the
// grid and its tile op to the GPU tile level: the kernel's schedule as
// attn_gpu ops, with the key-block loop an scf.for carrying the (max, sum,
// acc) fragments. convert-attn-gpu-to-nvvm lowers them (its own test).

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a(%[[Q:[^:]+]]: memref<1099511627776xbf16>, %[[K:[^:]+]]: memref<1099511627776xbf16>, %[[V:[^:]+]]: memref<1099511627776xbf16>, %[[O:[^:]+]]: memref<1099511627776xbf16>, %[[LSE:[^:]+]]: memref<1099511627776xf32>, {{.+}}, %[[SCALE:[^:]+]]: f32, {{.+}}) kernel attributes {attn.kernel_plan = {{{.*}}tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a"
// The forall's (query block, head, batch) are the CTA's block ids.
// CHECK: %[[QBLOCK:.+]] = gpu.block_id  x
// CHECK: %[[HEAD:.+]] = gpu.block_id  y
// CHECK: %[[BATCH:.+]] = gpu.block_id  z
// CHECK: %[[QBEGIN:.+]] = arith.muli %[[QBLOCK]], %{{.+}} : index
// Q | K | V, rows padded to 136 elements (attn-gpu-pipeline makes K and V
// rings of the plan's stages: its own test).
// CHECK: attn_gpu.shared_memory 26112 x bf16
// CHECK: %[[QT:.+]] = attn_gpu.shared_tile offset 0 : <64x128xbf16, stride = 136>
// CHECK: attn_gpu.async_copy %[[Q]][%{{.+}}] rows %[[QBEGIN]] below %{{.+}} stride %{{.+}} into %[[QT]]
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[ROW:.+]] = attn_gpu.warp_row_offset : index
// D = 128: Q stays in registers for the whole key loop.
// CHECK-NEXT: %[[QF:.+]] = attn_gpu.load_operand_a %[[QT]][%[[ROW]]] : <64x128xbf16, stride = 136> -> <16x128xbf16, operand_a>
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds at [%[[BATCH]], %[[HEAD]], %[[QBEGIN]]] of [%{{.+}}, %{{.+}}] row %[[ROW]] {block_rows = 64 : i64, mask = #attn.mask<causal>} : <left = false, right = true>
// CHECK: %[[M0:.+]] = attn_gpu.fill %{{.+}} : <16x1xf32, rows>
// CHECK: %[[L0:.+]] = attn_gpu.fill %{{.+}} : <16x1xf32, rows>
// CHECK: %[[ACC0:.+]] = attn_gpu.fill %{{.+}} : <16x128xf32, accumulator>
// The key loop, unpipelined: copy K(j) and V(j), read each once it has landed.
// CHECK: %[[RES:.+]]:3 = scf.for %[[J:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[M:.+]] = %[[M0]], %[[L:.+]] = %[[L0]], %[[ACC:.+]] = %[[ACC0]]) -> (!attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x128xf32, accumulator>)
// CHECK: %[[KEY:.+]] = arith.muli %[[J]], %{{.+}} : index
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[KT:.+]] = attn_gpu.shared_tile offset 8704 : <64x128xbf16, stride = 136>
// CHECK-NEXT: attn_gpu.async_copy %[[K]][%{{.+}}] rows %[[KEY]] below {{.+}} into %[[KT]]
// CHECK-NEXT: %[[VT:.+]] = attn_gpu.shared_tile offset 17408 : <64x128xbf16, stride = 136>
// CHECK-NEXT: attn_gpu.async_copy %[[V]][%{{.+}}] rows %[[KEY]] below {{.+}} into %[[VT]]
// CHECK-NEXT: attn_gpu.async_wait 1
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[S:.+]] = attn_gpu.mma_qk %[[QF]], %[[KT]] : !attn_gpu.fragment<16x128xbf16, operand_a>, <64x128xbf16, stride = 136> -> <16x64xf32, accumulator>
// CHECK-NEXT: %[[SM:.+]] = attn_gpu.mask %[[S]], %[[BOUNDS]] key %[[KEY]] : <16x64xf32, accumulator>, <left = false, right = true>
// CHECK-NEXT: %[[P:.+]], %[[M1:.+]], %[[L1:.+]], %[[ACC1:.+]] = attn_gpu.online_softmax %[[SM]], %[[M]], %[[L]], %[[ACC]] scale %{{.+}} :
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[ACC2:.+]] = attn_gpu.mma_pv %[[P]], %[[VT]], %[[ACC1]] : <16x64xf32, accumulator>, <64x128xbf16, stride = 136>, <16x128xf32, accumulator>
// CHECK-NEXT: scf.yield %[[M1]], %[[L1]], %[[ACC2]]
// CHECK: attn_gpu.async_wait 0
// CHECK: %[[INV:.+]], %[[LSEV:.+]] = attn_gpu.finalize_softmax %[[RES]]#0, %[[RES]]#1
// CHECK-NEXT: attn_gpu.store_output %[[RES]]#2, %[[INV]], %[[LSEV]] to %[[O]][%{{.+}} stride %{{.+}}], %[[LSE]][%{{.+}}] rows %[[QBEGIN]] + %[[ROW]] below %{{.+}}
// CHECK-NEXT: gpu.return
// SPLIT-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_splitkv
// A split's partial O rows are contiguous f32 in the workspace: no stride.
// SPLIT: attn_gpu.store_output %{{.+}} to %{{.+}}[%{{.+}}], %{{.+}}[%{{.+}}] rows {{.+}} : {{.+}}, memref<1099511627776xf32>, memref<1099511627776xf32>
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// D = 256: Q is re-read from shared memory at every k step (no fragment
// held across the loop); a window has both band edges.
// CHECK-LABEL: gpu.module @fa_fwd_f16_d256_
// CHECK: %[[QT:.+]] = attn_gpu.shared_tile offset 0 : <{{[0-9]+}}x256xf16, stride = 264>
// CHECK: %[[ROW:.+]] = attn_gpu.warp_row_offset
// CHECK-NOT: attn_gpu.load_operand_a
// CHECK: attn_gpu.key_bounds {{.+}} {block_rows = {{[0-9]+}} : i64, mask = #attn.mask<window>, window_left = 32 : i64, window_right = 8 : i64} : <left = true, right = true>
// CHECK: attn_gpu.mma_qk %[[QT]][%[[ROW]]], %{{.+}} : !attn_gpu.shared_tile<{{[0-9]+}}x256xf16, stride = 264>, <{{[0-9]+}}x256xf16, stride = 264> -> <16x{{[0-9]+}}xf32, accumulator>
func.func @window_d256(%q: tensor<?x?x?x256xf16>, %k: tensor<?x?x?x256xf16>, %v: tensor<?x?x?x256xf16>) -> (tensor<?x?x?x256xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 8 : i64} : tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16> -> tensor<?x?x?x256xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x256xf16>, tensor<?x?x?xf32>
}

// -----

// A score_mod rides into the kernel as the region of attn_gpu.score_mod,
// applied to the score fragment before the mask; with it the softmax's
// factor is log2(e) alone (the region applies the scale).
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_softcap
// CHECK: %[[LOG2E:.+]] = arith.constant 1.44269502 : f32
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds {{.+}} : <left = false, right = false>
// CHECK: scf.for
// CHECK: %[[S:.+]] = attn_gpu.mma_qk
// CHECK: %[[MOD:.+]] = attn_gpu.score_mod %[[S]] scale %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x64xf32, accumulator> {
// CHECK-NEXT: ^bb0(%[[X:.+]]: f32, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index):
// CHECK: math.tanh
// CHECK: attn_gpu.yield %{{.+}} : f32
// CHECK-NEXT: }
// CHECK-NEXT: attn_gpu.mask %[[MOD]], %[[BOUNDS]]
// CHECK-NEXT: attn_gpu.online_softmax {{.+}} scale %[[LOG2E]]
func.func @softcap(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// A mask_mod: an attn_gpu.mask_mod region (the attn op's, yielding i1)
// after the Q·Kᵀ product and before the band, on 32-key tiles; the key
// bounds know of it (their rows keep an upper edge without a band).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv32_w4_s2_none_sm90a_maskmod_prefix_lm(
// CHECK-SAME: mask_mod = "prefix_lm"
// CHECK: %[[BOUNDS:.+]] = attn_gpu.key_bounds {{.+}} {block_rows = 64 : i64, mask_mod} : <left = false, right = true>
// CHECK: %[[S:.+]] = attn_gpu.mma_qk {{.+}} -> <16x32xf32, accumulator>
// CHECK: %[[MM:.+]] = attn_gpu.mask_mod %[[S]] at [%{{.+}}, %{{.+}}, %{{.+}}] of [%{{.+}}, %{{.+}}] row %{{.+}} key %[[KEY:[^ ]+]] : <16x32xf32, accumulator> {
// CHECK-NEXT: ^bb0(%{{.+}}: index, %{{.+}}: index, %[[QI:[^:]+]]: index, %[[KV:[^:]+]]: index, %{{.+}}: tensor<?xi32>):
// CHECK: arith.cmpi slt, %[[KV]]
// CHECK: attn_gpu.yield %{{.+}} : i1
// CHECK-NEXT: }
// CHECK-NEXT: attn_gpu.mask %[[MM]], %[[BOUNDS]] key %[[KEY]]
func.func @prefix_lm(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %prefix: tensor<?xi32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%prefix : tensor<?xi32>) {attn.mask_mod_name = "prefix_lm"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?xi32>):
    %p = tensor.extract %t[%b] : tensor<?xi32>
    %pi = arith.index_cast %p : i32 to index
    %in = arith.cmpi slt, %kv, %pi : index
    %causal = arith.cmpi sle, %kv, %qi : index
    %keep = arith.ori %in, %causal : i1
    attn.yield %keep : i1
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
