// RUN: fa-opt %s -split-input-file -attn-decompose -canonicalize -cse | FileCheck %s

// One online update becomes: S = Q·Kᵀ in f32, t = S·(scale·log2 e) with the
// mask applied as -inf, m_new = max(m, rowmax t), P = 2^(t − m_new),
// α = 2^(m − m_new), l_new = α·l + rowsum P, acc_new = α·acc + P·V.
// CHECK-LABEL: func @online
// CHECK-SAME: (%[[Q:.+]]: tensor<1x1x16x32xbf16>, %[[K:.+]]: tensor<1x1x8x32xbf16>, %[[V:.+]]: tensor<1x1x8x32xbf16>, %[[ACC:.+]]: tensor<1x1x16x32xf32>, %[[M:.+]]: tensor<1x1x16xf32>, %[[L:.+]]: tensor<1x1x16xf32>, %[[OFF:.+]]: index, %{{.+}}: index)
// CHECK-DAG: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[SCALE:.+]] = arith.constant 0.255034864 : f32
// CHECK: %[[S:.+]] = linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]], %[[K]] : {{.+}}) outs(%{{.+}} : tensor<1x1x16x8xf32>)
// CHECK:   arith.extf
// CHECK:   arith.mulf
// CHECK:   arith.addf
// CHECK: %[[T:.+]] = linalg.generic {{.+}} outs(%[[S]] : tensor<1x1x16x8xf32>)
// CHECK:   %[[I:.+]] = linalg.index 2
// CHECK:   %[[QPOS:.+]] = arith.addi %[[OFF]], %[[I]]
// CHECK:   %[[J:.+]] = linalg.index 3
// CHECK:   %[[KPOS:.+]] = arith.addi %[[OFF]], %[[J]]
// CHECK:   %[[SC:.+]] = arith.mulf %{{.+}}, %[[SCALE]]
// CHECK:   %[[VIS:.+]] = arith.cmpi sle, %[[KPOS]], %[[QPOS]]
// CHECK:   arith.select %[[VIS]], %[[SC]], %[[NINF]]
// CHECK: %[[MNEW:.+]] = linalg.generic {{.+}} ins(%[[T]] : tensor<1x1x16x8xf32>) outs(%[[M]] : tensor<1x1x16xf32>)
// CHECK:   arith.maximumf
// CHECK: %[[P:.+]] = linalg.generic {{.+}} ins(%[[MNEW]] : tensor<1x1x16xf32>) outs(%[[T]] : tensor<1x1x16x8xf32>)
// CHECK:   arith.cmpf oeq, %{{.+}}, %[[NINF]]
// CHECK:   arith.subf
// CHECK:   math.exp2
// CHECK: %[[ALPHA:.+]] = linalg.generic {{.+}} ins(%[[M]], %[[MNEW]] : {{.+}})
// CHECK:   math.exp2
// CHECK: %[[LSCALED:.+]] = linalg.generic {{.+}} ins(%[[ALPHA]], %[[L]] : {{.+}})
// CHECK: %[[LNEW:.+]] = linalg.generic {{.+}} ins(%[[P]] : tensor<1x1x16x8xf32>) outs(%[[LSCALED]] : tensor<1x1x16xf32>)
// CHECK: %[[ASCALED:.+]] = linalg.generic {{.+}} ins(%[[ALPHA]], %[[ACC]] : {{.+}})
// CHECK: %[[ANEW:.+]] = linalg.generic {{.+}} ins(%[[P]], %[[V]] : tensor<1x1x16x8xf32>, tensor<1x1x8x32xbf16>) outs(%[[ASCALED]] : tensor<1x1x16x32xf32>)
// CHECK: return %[[ANEW]], %[[MNEW]], %[[LNEW]]
func.func @online(%q: tensor<1x1x16x32xbf16>, %k: tensor<1x1x8x32xbf16>, %v: tensor<1x1x8x32xbf16>,
                  %acc: tensor<1x1x16x32xf32>, %m: tensor<1x1x16xf32>, %l: tensor<1x1x16xf32>, %i: index, %n: index)
    -> (tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>) {
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%i, %i, %i, %i] of [%n, %n] {apply_mask, mask = #attn.mask<causal>}
      : tensor<1x1x16x32xbf16>, tensor<1x1x8x32xbf16>, tensor<1x1x8x32xbf16>, tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return %a, %mm, %ll : tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
}

// -----

// score_mod is inlined into the score body after the scale; the mask is not
// evaluated without apply_mask.
// CHECK-LABEL: func @softcap
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK:   arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK:   arith.divf
// CHECK:   math.tanh
// CHECK:   arith.mulf
// CHECK:   arith.mulf
// CHECK-NOT: arith.cmpi
// CHECK:   linalg.yield
func.func @softcap(%q: tensor<1x1x4x8xf32>, %acc: tensor<1x1x4x8xf32>, %m: tensor<1x1x4xf32>, %i: index)
    -> (tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>) {
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i] {mask = #attn.mask<causal>} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kj: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
      -> tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
  return %a, %mm, %ll : tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
}

// -----

// The backward tile recomputes P = 2^(score·log2e − LSE·log2e) (zero where
// masked or where LSE = -inf, whose base is +inf) and forms the five products of seed 4.3.
// CHECK-LABEL: func @backward_tile
// CHECK: %[[S:.+]] = linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<1x1x16x32xbf16>, tensor<1x1x8x32xbf16>)
// CHECK: %[[P:.+]] = linalg.generic {{.+}} ins(%{{.+}} : tensor<1x1x16xf32>) outs(%[[S]] : tensor<1x1x16x8xf32>)
// CHECK-NEXT: ^bb0(%[[LSEV:[^:]+]]: f32, %[[SV:[^:]+]]: f32)
// CHECK:   %[[SCORE:.+]] = arith.mulf %[[SV]], %{{.+}} : f32
// CHECK:   %[[T:.+]] = arith.mulf %[[SCORE]], %[[LOG2E:.+]] : f32
// CHECK:   %[[EMPTY:.+]] = arith.cmpf oeq, %[[LSEV]], %{{.+}} : f32
// CHECK:   %[[L2:.+]] = arith.mulf %[[LSEV]], %[[LOG2E]] : f32
// CHECK:   %[[BASE:.+]] = arith.select %[[EMPTY]], %{{.+}}, %[[L2]] : f32
// CHECK:   %[[X:.+]] = arith.subf %[[T]], %[[BASE]] : f32
// CHECK:   math.exp2 %[[X]] : f32
// CHECK: %[[DV:.+]] = linalg.generic {{.+}} ins(%[[P]], %{{.+}} : tensor<1x1x16x8xf32>, tensor<1x1x16x32xbf16>)
// CHECK: %[[DP:.+]] = linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<1x1x16x32xbf16>, tensor<1x1x8x32xbf16>)
// CHECK: %[[DS:.+]] = linalg.generic {{.+}} ins(%[[P]], %{{.+}} : tensor<1x1x16x8xf32>, tensor<1x1x16xf32>) outs(%[[DP]] : tensor<1x1x16x8xf32>)
// CHECK:   arith.subf
// CHECK:   arith.mulf
// CHECK:   arith.mulf
// CHECK: %[[DK:.+]] = linalg.generic {{.+}} ins(%[[DS]], %{{.+}} : tensor<1x1x16x8xf32>, tensor<1x1x16x32xbf16>)
// CHECK: %[[DQ:.+]] = linalg.generic {{.+}} ins(%[[DS]], %{{.+}} : tensor<1x1x16x8xf32>, tensor<1x1x8x32xbf16>)
// CHECK: return %[[DQ]], %[[DK]], %[[DV]]
func.func @backward_tile(%q: tensor<1x1x16x32xbf16>, %k: tensor<1x1x8x32xbf16>, %do: tensor<1x1x16x32xbf16>,
                         %lse: tensor<1x1x16xf32>, %dq: tensor<1x1x16x32xf32>, %dk: tensor<1x1x8x32xf32>, %i: index)
    -> (tensor<1x1x16x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>) {
  %a, %b, %c = attn.backward_tile %q, %k, %k, %do, %lse, %lse into %dq, %dk, %dk at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x16x32xbf16>, tensor<1x1x8x32xbf16>, tensor<1x1x8x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16xf32>, tensor<1x1x16xf32>,
        tensor<1x1x16x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>
      -> tensor<1x1x16x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>
  return %a, %b, %c : tensor<1x1x16x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>
}

// -----

// attn.paged_view gathers: key n of sequence b is row n mod 32 of page
// page_table[b, n / 32], that page clamped into [0, 15].
// CHECK-LABEL: func @paged_view
// CHECK-SAME: (%[[P:.+]]: tensor<16x32x2x64xf32>, %[[PT:.+]]: tensor<2x6xi32>)
// CHECK: linalg.generic {{.+}} outs(%{{.+}} : tensor<2x2x192x64xf32>)
// CHECK:   %[[B:.+]] = linalg.index 0
// CHECK:   %[[H:.+]] = linalg.index 1
// CHECK:   %[[N:.+]] = linalg.index 2
// CHECK:   %[[D:.+]] = linalg.index 3
// CHECK:   %[[SLOT:.+]] = arith.divui %[[N]], %c32
// CHECK:   %[[RAW:.+]] = tensor.extract %[[PT]][%[[B]], %[[SLOT]]]
// CHECK:   %[[PAGE:.+]] = arith.index_cast %[[RAW]]
// CHECK:   %[[LO:.+]] = arith.maxsi %[[PAGE]], %c0
// CHECK:   %[[CL:.+]] = arith.minsi %[[LO]], %c15
// CHECK:   %[[ROW:.+]] = arith.remui %[[N]], %c32
// CHECK:   tensor.extract %[[P]][%[[CL]], %[[ROW]], %[[H]], %[[D]]]
func.func @paged_view(%p: tensor<16x32x2x64xf32>, %pt: tensor<2x6xi32>) -> tensor<2x2x192x64xf32> {
  %view = attn.paged_view %p, %pt : tensor<16x32x2x64xf32>, tensor<2x6xi32> -> tensor<2x2x192x64xf32>
  return %view : tensor<2x2x192x64xf32>
}
