// RUN: fa-opt %s -attn-online-softmax -attn-split-kv="splits=4 block-kv=16" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-online-softmax -attn-split-kv="splits=4 block-kv=16" -attn-tile -attn-decompose | FileCheck %s --check-prefix=DECOMP --enable-var-scope

// A sink is one more partial of the merge (LSE = sink, O = 0): attn-split-kv
// moves the attention's sinks to attn.merge, and the splits' partials are
// finalised without them (each split alone would count the sink once more).
// CHECK-LABEL: func @sinks
// CHECK-SAME: %[[S:[^:]+]]: tensor<4xf32>
// CHECK: scf.forall
// CHECK:   attn.online_attention
// CHECK-NOT: sinks
// CHECK: } {attn.key_splits = 4 : i64}
// CHECK: %[[ROWS:.+]]:2 = linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<4x1x4x8xf32>, tensor<4x1x4x8xf32>)
// CHECK: %[[O:.+]], %[[LSE:.+]] = attn.merge %{{.+}}, %[[ROWS]]#1 sinks(%[[S]] : tensor<4xf32>) : tensor<4x1x4x8x16xf32>, tensor<4x1x4x8xf32> -> tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
// CHECK: return %[[O]], %[[LSE]]

// attn-decompose starts the merge's running max from the sink broadcast per
// head, and its weight sum from the sink's weight e^(sink - M).
// DECOMP-LABEL: func @sinks
// DECOMP-SAME: %[[S:[^:]+]]: tensor<4xf32>
// DECOMP: %[[M0:.+]] = linalg.generic {{.*}} ins(%[[S]] : tensor<4xf32>) outs(%{{.+}} : tensor<1x4x8xf32>)
// DECOMP: %[[M:.+]] = linalg.generic {{.*}} outs(%[[M0]] : tensor<1x4x8xf32>)
// DECOMP:   arith.maximumf
// DECOMP: %[[W0:.+]] = linalg.generic {{.*}} ins(%[[S]], %[[M]] : tensor<4xf32>, tensor<1x4x8xf32>)
// DECOMP:   math.exp2
// DECOMP: linalg.generic {{.*}} outs(%[[W0]] : tensor<1x4x8xf32>)
// DECOMP:   arith.addf
func.func @sinks(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x64x16xf32>, %v: tensor<1x4x64x16xf32>, %s: tensor<4xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>) {
  %o, %lse = attn.attention %q, %k, %v sinks(%s : tensor<4xf32>)
      : tensor<1x4x8x16xf32>, tensor<1x4x64x16xf32>, tensor<1x4x64x16xf32> -> tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
}
