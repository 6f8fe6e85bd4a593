// RUN: fa-opt %s -split-input-file -attn-decompose | FileCheck %s --enable-var-scope

// The rotation: each column j sums x[(j / 64)·64 + k]·H[j mod 64, k] over k
// in f32 against Sylvester's constant matrix, then scales by 1/√64 and
// rounds once to bf16. D = 192 rotates three groups of 64.
// CHECK-DAG: #[[$X:.+]] = affine_map<(d0, d1, d2) -> (d0, (d1 floordiv 64) * 64 + d2)>
// CHECK-DAG: #[[$H:.+]] = affine_map<(d0, d1, d2) -> (d1 mod 64, d2)>
// CHECK-LABEL: func.func @hadamard
// CHECK: %[[M:.+]] = arith.constant dense<{{.+}}> : tensor<64x64xf32>
// CHECK: %[[S:.+]] = linalg.generic {indexing_maps = [#[[$X]], #[[$H]], #{{.+}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.+}}, %[[M]] : tensor<4x192xbf16>, tensor<64x64xf32>)
// CHECK: arith.extf
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[S]] : tensor<4x192xf32>)
// CHECK: arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK: arith.truncf %{{.+}} : f32 to bf16
func.func @hadamard(%x: tensor<4x192xbf16>) -> tensor<4x192xbf16> {
  %r = attn.hadamard %x : tensor<4x192xbf16> -> tensor<4x192xbf16>
  return %r : tensor<4x192xbf16>
}

// -----

// An odd D rotates groups of one column: the identity.
// CHECK-LABEL: func.func @odd
// CHECK-NEXT: return %arg0
func.func @odd(%x: tensor<4x33xf32>) -> tensor<4x33xf32> {
  %r = attn.hadamard %x : tensor<4x33xf32> -> tensor<4x33xf32>
  return %r : tensor<4x33xf32>
}

// -----

// Per-group factors: row maxima of |x|, then each of the [1, 2] factors
// loops over its 4 heads' rows; amax / 448, 1 for an all-zero group; x /
// factor[b, h / 4] clamped to ±448 and encoded by integer ops.
// CHECK-LABEL: func.func @per_group
// CHECK: %[[ROWS:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.+}} : tensor<1x8x40x16xbf16>) outs(%{{.+}} : tensor<1x8x40xf32>)
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK: %[[F:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x2xf32>)
// CHECK: scf.for
// CHECK: scf.for
// CHECK: tensor.extract %[[ROWS]]
// CHECK: arith.cmpf ogt
// CHECK: arith.divf %{{.+}}, %{{.+}} : f32
// CHECK: %[[X8:.+]] = linalg.generic {{.*}} ins(%{{.+}} : tensor<1x8x40x16xbf16>) outs(%{{.+}} : tensor<1x8x40x16xf8E4M3FN>)
// CHECK: arith.divui %{{.+}}, %c4
// CHECK: tensor.extract %[[F]]
// CHECK: arith.maximumf
// CHECK: arith.minimumf
// CHECK: math.roundeven
// CHECK: arith.trunci %{{.+}} : i32 to i8
// CHECK: arith.bitcast %{{.+}} : i8 to f8E4M3FN
// CHECK: return %[[X8]], %[[F]]
func.func @per_group(%x: tensor<1x8x40x16xbf16>) -> (tensor<1x8x40x16xf8E4M3FN>, tensor<1x2xf32>) {
  %x8, %s = attn.quantize %x : tensor<1x8x40x16xbf16> -> tensor<1x8x40x16xf8E4M3FN>, tensor<1x2xf32>
  return %x8, %s : tensor<1x8x40x16xf8E4M3FN>, tensor<1x2xf32>
}

// -----

// Block factors: one loop over the block's rows, min(N, 64·(i + 1)) at the
// ragged end; x reads factor[b, h, n / 64].
// CHECK-LABEL: func.func @blocks
// CHECK: %[[F:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<2x1x2xf32>)
// CHECK: arith.minui
// CHECK: scf.for
// CHECK-NOT: scf.for
// CHECK: linalg.generic
// CHECK: arith.divui %{{.+}}, %c64
// CHECK: tensor.extract %[[F]]
func.func @blocks(%x: tensor<2x1x70x16xf32>) -> (tensor<2x1x70x16xf8E4M3FN>, tensor<2x1x2xf32>) {
  %x8, %s = attn.quantize %x : tensor<2x1x70x16xf32> -> tensor<2x1x70x16xf8E4M3FN>, tensor<2x1x2xf32>
  return %x8, %s : tensor<2x1x70x16xf8E4M3FN>, tensor<2x1x2xf32>
}
