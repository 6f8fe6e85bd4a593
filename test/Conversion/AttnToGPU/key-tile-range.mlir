// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" -canonicalize -cse | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu -canonicalize -cse | FileCheck %s

// Bottom-right causal with Nq > Nk puts whole query blocks above the band:
// the band's upper key bound (qEnd + Nk - Nq) is negative there. It is
// clamped to [0, Nk] before the unsigned ceil-division, so such a block runs
// no key tile (O = 0, LSE = -inf) instead of looping over 2^57 of them.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_f16_d128
// CHECK: %[[QB:.+]] = arith.muli %block_id_x, %c{{64|128}} : index
// CHECK: %[[QE:.+]] = arith.addi %[[QB]], %c{{64|128}} : index
// CHECK: %[[QEND:.+]] = arith.minsi %[[QE]], %[[NQ:.+]] : index
// CHECK: %[[SHIFT:.+]] = arith.subi %[[NK:.+]], %[[NQ]] : index
// CHECK: %[[HI:.+]] = arith.addi %[[QEND]], %[[SHIFT]] : index
// CHECK: %[[HIK:.+]] = arith.minsi %[[HI]], %[[NK]] : index
// CHECK: %[[HI0:.+]] = arith.maxsi %[[HIK]], %c0 : index
// CHECK: %[[UP:.+]] = arith.addi %[[HI0]], %c{{63|127}} : index
// CHECK: arith.divui %[[UP]], %c{{64|128}} : index
func.func @bottom_right(%q: tensor<?x?x?x128xf16>, %k: tensor<?x?x?x128xf16>, %v: tensor<?x?x?x128xf16>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16> -> tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
}
