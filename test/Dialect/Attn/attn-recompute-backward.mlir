// RUN: fa-opt %s -split-input-file -attn-recompute-backward="block-q=64 block-kv=32" -canonicalize -cse | FileCheck %s
// RUN: fa-opt %s -split-input-file -attn-recompute-backward="block-q=64 block-kv=32 deterministic=false" -canonicalize -cse | FileCheck %s --check-prefix=PAR
// RUN: fa-opt %s -split-input-file -attn-recompute-backward -attn-decompose -canonicalize | FileCheck %s --check-prefix=NOSQ

// D = rowsum(dO∘O) first; then per (batch, key head) the key blocks in order
// (carrying dQ of the group's 2 query heads), and inside, the group's heads
// and the query blocks that can see the key block (causal: from the key
// block's first row on). P is recomputed by attn.backward_tile from LSE.
// CHECK-LABEL: func @causal_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<1x4x128x32xbf16>, %[[K:.+]]: tensor<1x2x128x32xbf16>, %[[V:.+]]: tensor<1x2x128x32xbf16>, %[[O:.+]]: tensor<1x4x128x32xbf16>, %[[DO:.+]]: tensor<1x4x128x32xbf16>, %[[LSE:.+]]: tensor<1x4x128xf32>)
// CHECK: %[[D:.+]] = linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[DO]], %[[O]] : {{.+}}) outs(%{{.+}} : tensor<1x4x128xf32>)
// CHECK: scf.forall (%[[HK:.+]]) in (2) shared_outs(%[[DQ:.+]] = %{{.+}}, %[[DK:.+]] = %{{.+}}, %[[DV:.+]] = %{{.+}})
// CHECK:   %[[H0:.+]] = arith.muli %[[HK]], %c2
// CHECK:   %[[DQG:.+]] = tensor.extract_slice %[[DQ]][0, %[[H0]], 0, 0] [1, 2, 128, 32]
// CHECK:   scf.for %[[KB:.+]] = %c0 to %c4 step %c1 iter_args(%[[DQACC:.+]] = %[[DQG]], {{.+}})
// CHECK:     %[[K0:.+]] = arith.muli %[[KB]], %c32
// CHECK:     tensor.extract_slice %[[K]][0, %[[HK]], %[[K0]], 0] [1, 1, 32, 32]
// CHECK:     %[[LO:.+]] = arith.maxsi %[[K0]], %c0
// CHECK:     %[[QB0:.+]] = arith.divui %[[LO]], %c64
// CHECK:     %[[QB1:.+]] = arith.maxsi %[[QB0]], %c2
// CHECK:     scf.for %[[G:.+]] = %c0 to %c2 step %c1
// CHECK:       %[[H:.+]] = arith.addi %[[H0]], %[[G]]
// CHECK:       scf.for %[[QB:.+]] = %[[QB0]] to %[[QB1]] step %c1
// CHECK:         tensor.extract_slice %[[LSE]][0, %[[H]], %{{.+}}] [1, 1, 64]
// CHECK:         tensor.extract_slice %[[D]][0, %[[H]], %{{.+}}] [1, 1, 64]
// CHECK:         scf.if
// CHECK:           attn.backward_tile {{.+}} {mask = #attn.mask<causal>}
// CHECK:         } else {
// CHECK:           attn.backward_tile {{.+}} {apply_mask, mask = #attn.mask<causal>}
// CHECK:         tensor.insert_slice %{{.+}} into %{{.+}}[0, %[[G]], %{{.+}}, 0] [1, 1, 64, 32]
// CHECK:     tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, %[[K0]], 0] [1, 1, 32, 32]
// CHECK:   scf.forall.in_parallel
// CHECK: arith.truncf %{{.+}} : f32 to bf16

// Without the deterministic order every (key head, key block) is parallel and
// writes its own partial dQ, summed over key blocks afterwards.
// PAR-LABEL: func @causal_gqa
// PAR: scf.forall (%{{.+}}, %{{.+}}) in (2, 4) shared_outs(%{{.+}} = %{{.+}}, {{.+}}) -> (tensor<4x1x4x128x32xf32>
// PAR: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%{{.+}} : tensor<4x1x4x128x32xf32>) outs(%{{.+}} : tensor<1x4x128x32xf32>)

// No Nq×Nk (128×128) value exists, only 64×64 tiles.
// NOSQ-LABEL: func @causal_gqa
// NOSQ-NOT: 128x128
// NOSQ: tensor<1x1x64x64xf32>
// NOSQ-NOT: 128x128
func.func @causal_gqa(%q: tensor<1x4x128x32xbf16>, %k: tensor<1x2x128x32xbf16>, %v: tensor<1x2x128x32xbf16>,
               %o: tensor<1x4x128x32xbf16>, %do: tensor<1x4x128x32xbf16>, %lse: tensor<1x4x128xf32>)
    -> (tensor<1x4x128x32xbf16>, tensor<1x2x128x32xbf16>, tensor<1x2x128x32xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>}
      : tensor<1x4x128x32xbf16>, tensor<1x2x128x32xbf16>, tensor<1x2x128x32xbf16>, tensor<1x4x128x32xbf16>, tensor<1x4x128x32xbf16>, tensor<1x4x128xf32>
      -> tensor<1x4x128x32xbf16>, tensor<1x2x128x32xbf16>, tensor<1x2x128x32xbf16>
  return %dq, %dk, %dv : tensor<1x4x128x32xbf16>, tensor<1x2x128x32xbf16>, tensor<1x2x128x32xbf16>
}

// -----

// Varlen: the packed tensors are viewed head-major [1, H, T, D]; a forall over
// (sequence, key head) slices the group's dQ and the head's dK, dV at the
// sequence's rows, runs its own key blocks, and the tiles see positions and
// lengths of their sequence. deterministic=false takes the same loops: a
// sequence's key blocks are its own. The gradients are packed again.
// CHECK-LABEL: func @varlen_bwd
// CHECK: linalg.transpose ins(%arg0 : tensor<?x4x32xbf16>) {{.+}} permutation = [1, 0, 2]
// CHECK: scf.forall (%[[S:.+]], %[[HK:.+]]) in (3, 2)
// CHECK:   tensor.extract %arg6[%[[S]]] : tensor<4xi32>
// CHECK:   tensor.extract %arg7[%[[S]]] : tensor<4xi32>
// CHECK:   %[[KSTART:.+]] = arith.minsi
// CHECK:   %[[KLEN:.+]] = arith.subi %{{.+}}, %[[KSTART]] : index
// CHECK:   %[[KBLOCKS:.+]] = arith.ceildivui %[[KLEN]], %c32
// CHECK:   tensor.extract_slice %{{.+}}[0, %[[HK]], %[[KSTART]], 0] [1, 1, %[[KLEN]], 32]
// CHECK:   scf.for %[[KB:.+]] = %c0 to %[[KBLOCKS]]
// CHECK:     %[[K0:.+]] = arith.muli %[[KB]], %c32
// CHECK:     %[[KROW:.+]] = arith.addi %[[KSTART]], %[[K0]]
// CHECK:     tensor.extract_slice %{{.+}}[0, %[[HK]], %[[KROW]], 0]
// CHECK:     attn.backward_tile {{.+}} at [%[[S]], %{{.+}}, %{{.+}}, %[[K0]]] of [%{{.+}}, %[[KLEN]]]
// CHECK: linalg.transpose {{.+}} permutation = [1, 0, 2]
// PAR-LABEL: func @varlen_bwd
// PAR: scf.forall (%{{.+}}, %{{.+}}) in (3, 2)
// PAR-NOT: tensor<?x1x4x?x32xf32>
func.func @varlen_bwd(%q: tensor<?x4x32xbf16>, %k: tensor<?x2x32xbf16>, %v: tensor<?x2x32xbf16>, %o: tensor<?x4x32xbf16>, %do: tensor<?x4x32xbf16>, %lse: tensor<4x?xf32>, %cuq: tensor<4xi32>, %cuk: tensor<4xi32>)
    -> (tensor<?x4x32xbf16>, tensor<?x2x32xbf16>, tensor<?x2x32xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse varlen(%cuq, %cuk : tensor<4xi32>, tensor<4xi32>) {mask = #attn.mask<causal>}
      : tensor<?x4x32xbf16>, tensor<?x2x32xbf16>, tensor<?x2x32xbf16>, tensor<?x4x32xbf16>, tensor<?x4x32xbf16>, tensor<4x?xf32>
      -> tensor<?x4x32xbf16>, tensor<?x2x32xbf16>, tensor<?x2x32xbf16>
  return %dq, %dk, %dv : tensor<?x4x32xbf16>, tensor<?x2x32xbf16>, tensor<?x2x32xbf16>
}
