// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-split-kv="splits=3 block-kv=64" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-split-kv="splits=3 block-kv=64" -attn-tile | FileCheck %s --check-prefix=TILED --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-split-kv -attn-tile -attn-decompose -canonicalize | FileCheck %s --check-prefix=DECOMP

// The key range of a whole problem is cut into 3 splits of whole 64-key
// blocks: split s takes keys [min(s·nblk/3·64, Nk), min((s+1)·nblk/3·64, Nk)).
// Each runs the online update from the empty state with its absolute key
// offset (the causal mask measures positions in the whole problem), the
// partials are finalised into O_s (f32) and LSE_s, and attn.merge joins them
// into O (bf16) and LSE. The whole problem's init and finalisation are gone.
// CHECK-LABEL: func @decode
// CHECK-SAME: (%[[Q:.+]]: tensor<1x8x1x64xbf16>, %[[K:.+]]: tensor<1x2x300x64xbf16>, %[[V:.+]]: tensor<1x2x300x64xbf16>)
// CHECK-NOT: linalg.fill {{.*}} -> tensor<1x8x1x64xf32>
// CHECK: %[[ACC0:.+]] = linalg.fill {{.*}} -> tensor<3x1x8x1x64xf32>
// CHECK: %[[M0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<3x1x8x1xf32>)
// CHECK: %[[L0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<3x1x8x1xf32>)
// CHECK-DAG: %[[NK:.+]] = arith.constant 300 : index
// CHECK-DAG: %[[BKV:.+]] = arith.constant 64 : index
// CHECK-DAG: %[[S:.+]] = tensor.dim %[[ACC0]], %{{.+}} : tensor<3x1x8x1x64xf32>
// CHECK: %[[NBLK:.+]] = arith.ceildivui %[[NK]], %[[BKV]]
// CHECK: %[[PARTS:.+]]:3 = scf.forall (%[[SPLIT:.+]]) in (3) shared_outs(%[[ACC:.+]] = %[[ACC0]], %[[M:.+]] = %[[M0]], %[[L:.+]] = %[[L0]])
// CHECK:   %[[B0:.+]] = arith.muli %[[SPLIT]], %[[NBLK]]
// CHECK:   %[[B1:.+]] = arith.divui %[[B0]], %[[S]]
// CHECK:   %[[K0U:.+]] = arith.muli %[[B1]], %[[BKV]]
// CHECK:   %[[K0:.+]] = arith.minui %[[K0U]], %[[NK]]
// CHECK:   %[[NEXT:.+]] = arith.addi %[[SPLIT]], %{{.+}}
// CHECK:   arith.muli %[[NEXT]], %[[NBLK]]
// CHECK:   %[[K1:.+]] = arith.minui %{{.+}}, %[[NK]]
// CHECK:   %[[LEN:.+]] = arith.subi %[[K1]], %[[K0]]
// CHECK:   %[[KS:.+]] = tensor.extract_slice %[[K]][0, 0, %[[K0]], 0] [1, 2, %[[LEN]], 64] [1, 1, 1, 1] : tensor<1x2x300x64xbf16> to tensor<1x2x?x64xbf16>
// CHECK:   %[[VS:.+]] = tensor.extract_slice %[[V]][0, 0, %[[K0]], 0] [1, 2, %[[LEN]], 64]
// CHECK:   %[[KABS:.+]] = arith.addi %{{.+}}, %[[K0]]
// CHECK:   %[[LS:.+]] = tensor.extract_slice %[[L]][%[[SPLIT]], 0, 0, 0] [1, 1, 8, 1] [1, 1, 1, 1] : tensor<3x1x8x1xf32> to tensor<1x8x1xf32>
// CHECK:   %[[MS:.+]] = tensor.extract_slice %[[M]][%[[SPLIT]], 0, 0, 0] [1, 1, 8, 1]
// CHECK:   %[[AS:.+]] = tensor.extract_slice %[[ACC]][%[[SPLIT]], 0, 0, 0, 0] [1, 1, 8, 1, 64] [1, 1, 1, 1, 1] : tensor<3x1x8x1x64xf32> to tensor<1x8x1x64xf32>
// CHECK:   %[[NA:.+]], %[[NM:.+]], %[[NL:.+]] = attn.online_attention %[[Q]], %[[KS]], %[[VS]], %[[AS]], %[[MS]], %[[LS]] at [%{{.+}}, %{{.+}}, %{{.+}}, %[[KABS]]] of [%{{.+}}, %{{.+}}]
// CHECK-SAME: {apply_mask, mask = #attn.mask<causal_bottom_right>}
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice %[[NA]] into %[[ACC]][%[[SPLIT]], 0, 0, 0, 0] [1, 1, 8, 1, 64]
// CHECK:     tensor.parallel_insert_slice %[[NM]] into %[[M]][%[[SPLIT]], 0, 0, 0] [1, 1, 8, 1]
// CHECK:     tensor.parallel_insert_slice %[[NL]] into %[[L]][%[[SPLIT]], 0, 0, 0] [1, 1, 8, 1]
// CHECK: } {attn.key_splits = 3 : i64}
// CHECK: %[[ROWS:.+]]:2 = linalg.generic {{.*}} ins(%[[PARTS]]#1, %[[PARTS]]#2 : tensor<3x1x8x1xf32>, tensor<3x1x8x1xf32>)
// CHECK:   math.log2
// CHECK: %[[PO:.+]] = linalg.generic {{.*}} ins(%[[PARTS]]#0, %[[ROWS]]#0 : tensor<3x1x8x1x64xf32>, tensor<3x1x8x1xf32>)
// CHECK-NOT: arith.truncf
// CHECK: } -> tensor<3x1x8x1x64xf32>
// CHECK: %[[O:.+]], %[[LSE:.+]] = attn.merge %[[PO]], %[[ROWS]]#1 : tensor<3x1x8x1x64xf32>, tensor<3x1x8x1xf32> -> tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>
// CHECK: return %[[O]], %[[LSE]]

// attn-tile tiles each split as a whole problem: its query-block forall and
// key-block loop sit inside the split forall, the merge after it.
// TILED-LABEL: func @decode
// TILED: scf.forall (%{{.+}}) in (3)
// TILED:   scf.forall (%{{.+}}, %{{.+}}, %{{.+}}) in
// TILED:     scf.for
// TILED:       attn.online_attention
// TILED: } {attn.key_splits = 3 : i64}
// TILED: attn.merge

// The CPU decomposition of the merge: max of the partial LSEs, weights
// 2^((LSE_s − base(M))·log2e), their sum, the weighted sum of O_s, and the
// row finalisation 1/W, M + ln W.
// DECOMP-LABEL: func @decode
// DECOMP-NOT: attn.
// DECOMP: arith.maximumf
// DECOMP: math.exp2
// DECOMP: math.log2
// DECOMP: return
func.func @decode(%q: tensor<1x8x1x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> (tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>}
      : tensor<1x8x1x64xbf16>, tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16> -> tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>
  return %o, %lse : tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>
}

// -----

// Dynamic key lengths and score_mod: the split count of key blocks is read
// at run time and the score_mod region is cloned into the split's op.
// CHECK-LABEL: func @dynamic_mod
// CHECK-SAME: %[[K:[^:]+]]: tensor<2x1x?x32xf16>
// CHECK: tensor.dim %[[K]], %{{.+}} : tensor<2x1x?x32xf16>
// CHECK: arith.ceildivui
// CHECK: scf.forall (%{{.+}}) in (3)
// CHECK: attn.online_attention
// CHECK-NOT: apply_mask
// CHECK-SAME: score_mod {
// CHECK: math.tanh
// CHECK: attn.merge {{.*}} : tensor<3x2x4x?x16xf32>, tensor<3x2x4x?xf32> -> tensor<2x4x?x16xf16>, tensor<2x4x?xf32>
func.func @dynamic_mod(%q: tensor<2x4x?x32xf16>, %k: tensor<2x1x?x32xf16>, %v: tensor<2x1x?x16xf16>) -> (tensor<2x4x?x16xf16>, tensor<2x4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = math.tanh %s : f32
    attn.yield %t : f32
  } : tensor<2x4x?x32xf16>, tensor<2x1x?x32xf16>, tensor<2x1x?x16xf16> -> tensor<2x4x?x16xf16>, tensor<2x4x?xf32>
  return %o, %lse : tensor<2x4x?x16xf16>, tensor<2x4x?xf32>
}
