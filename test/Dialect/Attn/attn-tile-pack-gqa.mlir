// RUN: fa-opt %s -split-input-file -attn-tile="block-q=16 block-kv=32 pack-gqa=1" -canonicalize | FileCheck %s
// RUN: fa-opt %s -split-input-file -attn-tile="block-q=16 block-kv=32" -canonicalize | FileCheck %s --check-prefix=PLAIN

// Packed GQA, G = 8 / 2 = 4 heads per key head, block-q 16: a tile holds the
// 4 heads of key head hk, 4 queries of each; the forall runs over
// (batch, key head, query block) and every K/V block is sliced once for the
// 4 heads. Nq = 9: blocks of 4, 4 and 1 queries.
// CHECK-LABEL: func @packed
// CHECK: scf.forall (%[[B:.+]], %[[HK:.+]], %[[QB:.+]]) in (2, 2, 3) shared_outs(%[[ACC:.+]] = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) {
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %c4
// CHECK:   %[[QS:.+]] = arith.minsi %{{.+}}, %c4
// CHECK:   %[[H0:.+]] = arith.muli %[[HK]], %c4
// CHECK:   %[[QT:.+]] = tensor.extract_slice %{{.+}}[%[[B]], %[[H0]], %[[Q0]], 0] [1, 4, %[[QS]], 32] {{.+}} to tensor<1x4x?x32xbf16>
// CHECK:   scf.for %[[KB:.+]] = %c0 to %c2 step %c1
// CHECK:     %[[K0:.+]] = arith.muli %[[KB]], %c32
// CHECK:     tensor.extract_slice %{{.+}}[%[[B]], %[[HK]], %[[K0]], 0] [1, 1, 32, 32]
// CHECK:     attn.online_attention %[[QT]], {{.+}} at [%[[B]], %[[H0]], %[[Q0]], %[[K0]]] of [%c9, %c64]
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice %{{.+}} into %[[ACC]][%[[B]], %[[H0]], %[[Q0]], 0] [1, 4, %[[QS]], 32]
// CHECK: } {attn.pack_gqa}
// PLAIN-LABEL: func @packed
// PLAIN: scf.forall (%{{.+}}, %{{.+}}) in (2, 8)
// PLAIN-NOT: attn.pack_gqa
func.func @packed(%q: tensor<2x8x9x32xbf16>, %k: tensor<2x2x64x32xbf16>, %v: tensor<2x2x64x32xbf16>,
                  %acc: tensor<2x8x9x32xf32>, %m: tensor<2x8x9xf32>, %l: tensor<2x8x9xf32>) -> (tensor<2x8x9x32xf32>, tensor<2x8x9xf32>, tensor<2x8x9xf32>) {
  %c0 = arith.constant 0 : index
  %nq = arith.constant 9 : index
  %nk = arith.constant 64 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk]
      : tensor<2x8x9x32xbf16>, tensor<2x2x64x32xbf16>, tensor<2x2x64x32xbf16>, tensor<2x8x9x32xf32>, tensor<2x8x9xf32>, tensor<2x8x9xf32>
      -> tensor<2x8x9x32xf32>, tensor<2x8x9xf32>, tensor<2x8x9xf32>
  return %a, %mm, %ll : tensor<2x8x9x32xf32>, tensor<2x8x9xf32>, tensor<2x8x9xf32>
}

// -----

// Causal bottom-right decode with G = 6 (not dividing block-q 16): 2 queries
// of each head per tile; the key band of a tile is that of its queries
// [q0, q0 + 2), and the mask of each tile sees its heads and queries through
// the tile's offsets.
// CHECK-LABEL: func @causal_group6
// CHECK: scf.forall (%[[HK:.+]], %[[QB:.+]]) in (2, 2)
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %c2
// CHECK:   %[[H0:.+]] = arith.muli %[[HK]], %c6
// CHECK:   tensor.extract_slice %{{.+}}[0, %[[H0]], %[[Q0]], 0] [1, 6, %{{.+}}, 16]
// CHECK:   %[[QE:.+]] = arith.addi %[[Q0]], %c2
// CHECK:   arith.minsi %[[QE]], %c3
// CHECK:   scf.if
// CHECK:     attn.online_attention {{.+}} at [%c0, %[[H0]], %[[Q0]], %{{.+}}] of [%c3, %c40] {mask = #attn.mask<causal_bottom_right>}
// CHECK:     attn.online_attention {{.+}} {apply_mask, mask = #attn.mask<causal_bottom_right>}
func.func @causal_group6(%q: tensor<1x12x3x16xf16>, %k: tensor<1x2x40x16xf16>, %v: tensor<1x2x40x16xf16>,
                         %acc: tensor<1x12x3x16xf32>, %m: tensor<1x12x3xf32>, %l: tensor<1x12x3xf32>) -> (tensor<1x12x3x16xf32>, tensor<1x12x3xf32>, tensor<1x12x3xf32>) {
  %c0 = arith.constant 0 : index
  %nq = arith.constant 3 : index
  %nk = arith.constant 40 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk] {apply_mask, mask = #attn.mask<causal_bottom_right>}
      : tensor<1x12x3x16xf16>, tensor<1x2x40x16xf16>, tensor<1x2x40x16xf16>, tensor<1x12x3x16xf32>, tensor<1x12x3xf32>, tensor<1x12x3xf32>
      -> tensor<1x12x3x16xf32>, tensor<1x12x3xf32>, tensor<1x12x3xf32>
  return %a, %mm, %ll : tensor<1x12x3x16xf32>, tensor<1x12x3xf32>, tensor<1x12x3xf32>
}

// -----

// Run-time head counts (the GPU path): G = H / Hkv and the queries per head
// n = max(block-q / G, 1) are computed, and the tile is G heads wide.
// CHECK-LABEL: func @dynamic
// CHECK-DAG: %[[HKV:.+]] = tensor.dim %arg1, %c1 : tensor<?x?x?x64xbf16>
// CHECK-DAG: %[[H:.+]] = tensor.dim %arg0, %c1 : tensor<?x?x?x64xbf16>
// CHECK: %[[G:.+]] = arith.divui %[[H]], %[[HKV]]
// CHECK: %[[PER:.+]] = arith.divui %c16, %[[G]]
// CHECK: %[[N:.+]] = arith.maxui %[[PER]], %c1
// CHECK: %[[NB:.+]] = arith.ceildivui %{{.+}}, %[[N]]
// CHECK: %[[HKV2:.+]] = tensor.dim %arg1, %c1
// CHECK: scf.forall (%{{.+}}, %[[HK:.+]], %[[QB:.+]]) in (%{{.+}}, %[[HKV2]], %[[NB]])
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %[[N]]
// CHECK:   %[[H0:.+]] = arith.muli %[[HK]], %[[G]]
// CHECK:   tensor.extract_slice %{{.+}}[%{{.+}}, %[[H0]], %[[Q0]], 0] [1, %[[G]], %{{.+}}, 64]
func.func @dynamic(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>,
                   %acc: tensor<?x?x?x64xf32>, %m: tensor<?x?x?xf32>, %l: tensor<?x?x?xf32>,
                   %nq: index, %nk: index) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk]
      : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
      -> tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
  return %a, %mm, %ll : tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
}
