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

// -----

// Varlen: the packed tensors are viewed head-major with one batch
// ([T, H, D] → [1, H, T, D]), the offsets go to the online op, the dense
// finalisation runs, and O and LSE come back packed ([Tq, H, Dv], [H, Tq]).
// CHECK-LABEL: func @varlen
// CHECK: %[[QT:.+]] = linalg.transpose ins(%arg0 : tensor<?x4x32xbf16>) outs(%{{.+}} : tensor<4x?x32xbf16>) permutation = [1, 0, 2]
// CHECK: %[[Q:.+]] = tensor.expand_shape %[[QT]] {{\[}}[0, 1], [2], [3]] {{.+}} into tensor<1x4x?x32xbf16>
// CHECK: attn.online_attention %[[Q]], {{.+}} varlen(%arg3, %arg4 : tensor<4xi32>, tensor<4xi32>) {apply_mask, mask = #attn.mask<causal_bottom_right>}
// CHECK-SAME: tensor<1x4x?x32xbf16>, tensor<1x2x?x32xbf16>, tensor<1x2x?x32xbf16>, tensor<1x4x?x32xf32>
// CHECK: %[[ROWS:.+]]:2 = linalg.generic
// CHECK: %[[O:.+]] = linalg.generic
// CHECK: %[[OC:.+]] = tensor.collapse_shape %[[O]] {{\[}}[0, 1], [2], [3]] : tensor<1x4x?x32xbf16> into tensor<4x?x32xbf16>
// CHECK: %[[OP:.+]] = linalg.transpose ins(%[[OC]] : tensor<4x?x32xbf16>) outs(%{{.+}} : tensor<?x4x32xbf16>) permutation = [1, 0, 2]
// CHECK: %[[LSE:.+]] = tensor.collapse_shape %[[ROWS]]#1 {{\[}}[0, 1], [2]] : tensor<1x4x?xf32> into tensor<4x?xf32>
// CHECK: return %[[OP]], %[[LSE]]
func.func @varlen(%q: tensor<?x4x32xbf16>, %k: tensor<?x2x32xbf16>, %v: tensor<?x2x32xbf16>, %cuq: tensor<4xi32>, %cuk: tensor<4xi32>) -> (tensor<?x4x32xbf16>, tensor<4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<4xi32>, tensor<4xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<?x4x32xbf16>, tensor<?x2x32xbf16>, tensor<?x2x32xbf16> -> tensor<?x4x32xbf16>, tensor<4x?xf32>
  return %o, %lse : tensor<?x4x32xbf16>, tensor<4x?xf32>
}

// -----

// Sinks join each row once, at the finalisation, not as the running
// state's start: the online op is the plain one, and the rows generic reads
// sink[h] beside (m, l): m' = max(m, sink·log2e), α = 2^(m − base(m')),
// l' = α·l + 2^(sink·log2e − base(m')), 1/l and LSE of (m', l'), and O takes
// α/l'.
// CHECK-LABEL: func @sinks
// CHECK-SAME: %[[S:[^:]+]]: tensor<4xf32>)
// CHECK: %[[ACC:.+]], %[[M:.+]], %[[L:.+]] = attn.online_attention
// CHECK-NOT: sinks
// CHECK: %[[ROWS:.+]]:2 = linalg.generic {indexing_maps = [#[[ID:.+]], #[[ID]], #[[HEAD:.+]], #[[ID]], #[[ID]]]{{.*}} ins(%[[M]], %[[L]], %[[S]] : tensor<2x4x100xf32>, tensor<2x4x100xf32>, tensor<4xf32>)
// CHECK-NEXT: ^bb0(%[[RM:[^:]+]]: f32, %[[RL:[^:]+]]: f32, %[[RS:[^:]+]]: f32,
// CHECK:   %[[S2:.+]] = arith.mulf %[[RS]], %{{.+}} : f32
// CHECK:   %[[JOINED:.+]] = arith.maximumf %[[RM]], %[[S2]] : f32
// CHECK:   %[[BASE:.+]] = arith.select %{{.+}}, %{{.+}}, %[[JOINED]] : f32
// CHECK:   %[[D:.+]] = arith.subf %[[RM]], %[[BASE]] : f32
// CHECK:   %[[ALPHA:.+]] = math.exp2 %[[D]] : f32
// CHECK:   %[[DS:.+]] = arith.subf %[[S2]], %[[BASE]] : f32
// CHECK:   %[[PS:.+]] = math.exp2 %[[DS]] : f32
// CHECK:   %[[AL:.+]] = arith.mulf %[[ALPHA]], %[[RL]] : f32
// CHECK:   %[[L2:.+]] = arith.addf %[[AL]], %[[PS]] : f32
// CHECK:   math.log2 %[[L2]]
// CHECK:   %[[INV:.+]] = arith.mulf %[[ALPHA]], %{{.+}} : f32
// CHECK:   linalg.yield %[[INV]], %{{.+}}
// CHECK: linalg.generic {{.*}} ins(%[[ACC]], %[[ROWS]]#0
func.func @sinks(%q: tensor<2x4x100x32xbf16>, %k: tensor<2x2x70x32xbf16>, %v: tensor<2x2x70x16xbf16>, %s: tensor<4xf32>) -> (tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention %q, %k, %v sinks(%s : tensor<4xf32>) {mask = #attn.mask<causal>}
      : tensor<2x4x100x32xbf16>, tensor<2x2x70x32xbf16>, tensor<2x2x70x16xbf16> -> tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>
  return %o, %lse : tensor<2x4x100x16xbf16>, tensor<2x4x100xf32>
}

// -----

// A paged cache: K and V become dense views through the page table, the
// whole problem's Nk is their capacity (6 pages of 32), and the key counts
// go to the online op, whose tiles stop at each sequence's own.
// CHECK-LABEL: func @paged
// CHECK-SAME: (%{{.+}}: tensor<2x8x4x64xbf16>, %[[K:.+]]: tensor<16x32x2x64xbf16>, %[[V:.+]]: tensor<16x32x2x64xbf16>, %[[PT:.+]]: tensor<2x6xi32>, %[[N:.+]]: tensor<2xi32>)
// CHECK-DAG: %[[KV:.+]] = attn.paged_view %[[K]], %[[PT]] : tensor<16x32x2x64xbf16>, tensor<2x6xi32> -> tensor<2x2x192x64xbf16>
// CHECK-DAG: %[[VV:.+]] = attn.paged_view %[[V]], %[[PT]] : tensor<16x32x2x64xbf16>, tensor<2x6xi32> -> tensor<2x2x192x64xbf16>
// CHECK: attn.online_attention %{{.+}}, %[[KV]], %[[VV]], {{.+}} seqused_k(%[[N]] : tensor<2xi32>) {apply_mask, mask = #attn.mask<causal_bottom_right>}
func.func @paged(%q: tensor<2x8x4x64xbf16>, %k: tensor<16x32x2x64xbf16>, %v: tensor<16x32x2x64xbf16>, %pt: tensor<2x6xi32>, %n: tensor<2xi32>) -> (tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>) {
  %o, %lse = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x6xi32>, tensor<2xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<2x8x4x64xbf16>, tensor<16x32x2x64xbf16>, tensor<16x32x2x64xbf16> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  return %o, %lse : tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
}
