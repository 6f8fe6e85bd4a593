// RUN: fa-opt %s -split-input-file -attn-online-softmax | FileCheck %s

// The softmax becomes (m, l, acc) started at (-inf, 0, 0), one online update
// over all keys, and the finalisation per row 1/l and LSE = ln2·(m + log2 l)
// (0 and -inf for a row that saw no key), then O = acc·(1/l).

// CHECK-LABEL: func @causal
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x100x32xbf16>, %[[K:.+]]: tensor<2x2x70x32xbf16>, %[[V:.+]]: tensor<2x2x70x16xbf16>)
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[ACC0:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.+}} : tensor<2x4x100x16xf32>)
// CHECK: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK: %[[M0:.+]] = linalg.fill ins(%[[NINF]] : f32) outs(%{{.+}} : tensor<2x4x100xf32>)
// CHECK: %[[L0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<2x4x100xf32>)
// CHECK: %[[ACC:.+]], %[[M:.+]], %[[L:.+]] = attn.online_attention %[[Q]], %[[K]], %[[V]], %[[ACC0]], %[[M0]], %[[L0]]
// CHECK-SAME: {apply_mask, mask = #attn.mask<causal>}
// CHECK: %[[ROWS:.+]]:2 = linalg.generic {{.*}} ins(%[[M]], %[[L]] : tensor<2x4x100xf32>, tensor<2x4x100xf32>)
// CHECK-NEXT: ^bb0(%[[RM:[^:]+]]: f32, %[[RL:[^:]+]]: f32,
// CHECK:   %[[EMPTY:.+]] = arith.cmpf oeq, %[[RL]], %{{.+}} : f32
// CHECK:   %[[INV:.+]] = arith.divf %{{.+}}, %[[RL]] : f32
// CHECK:   %[[INVSUM:.+]] = arith.select %[[EMPTY]], %{{.+}}, %[[INV]] : f32
// CHECK:   %[[LOG2L:.+]] = math.log2 %[[RL]] : f32
// CHECK:   %[[LSE2:.+]] = arith.addf %[[RM]], %[[LOG2L]] : f32
// CHECK:   %[[LN2:.+]] = arith.constant 0.693147182 : f32
// CHECK:   %[[NAT:.+]] = arith.mulf %[[LSE2]], %[[LN2]] : f32
// CHECK:   %[[NI:.+]] = arith.constant 0xFF800000 : f32
// CHECK:   %[[LSEV:.+]] = arith.select %[[EMPTY]], %[[NI]], %[[NAT]] : f32
// CHECK:   linalg.yield %[[INVSUM]], %[[LSEV]]
// CHECK: %[[O:.+]] = linalg.generic {{.*}} ins(%[[ACC]], %[[ROWS]]#0 : tensor<2x4x100x16xf32>, tensor<2x4x100xf32>)
// CHECK:   arith.mulf
// CHECK:   arith.truncf %{{.+}} : f32 to bf16
// CHECK: return %[[O]], %[[ROWS]]#1
func.func @causal(%q: tensor<2x4x100x32xbf16>, %k: tensor<2x2x70x32xbf16>, %v: tensor<2x2x70x16xbf16>) -> (tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<2x4x100x32xbf16>, tensor<2x2x70x32xbf16>, tensor<2x2x70x16xbf16> -> tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>
  return %o, %lse : tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>
}

// -----

// Without a mask nothing is masked; score_mod and scale move to the online op.
// CHECK-LABEL: func @score_mod
// CHECK: attn.online_attention
// CHECK-NOT: apply_mask
// CHECK-SAME: {scale = 5.000000e-01 : f32} score_mod {
// CHECK: math.tanh
// CHECK: attn.yield
// CHECK-NOT: arith.truncf
func.func @score_mod(%q: tensor<1x1x?x8xf32>, %k: tensor<1x1x?x8xf32>, %v: tensor<1x1x?x8xf32>) -> (tensor<1x1x?x8xf32>, tensor<1x1x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = math.tanh %s : f32
    attn.yield %t : f32
  } : tensor<1x1x?x8xf32>, tensor<1x1x?x8xf32>, tensor<1x1x?x8xf32> -> tensor<1x1x?x8xf32>, tensor<1x1x?xf32>
  return %o, %lse : tensor<1x1x?x8xf32>, tensor<1x1x?xf32>
}
