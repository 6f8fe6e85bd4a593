// RUN: fa-opt %s -split-input-file | fa-opt | FileCheck %s
// RUN: fa-opt %s -split-input-file -mlir-print-op-generic | fa-opt | FileCheck %s

// flash_attn_with_kvcache's append: the new keys rotated at their positions
// (attn.rotary), then written into a paged cache after each sequence's rows.

// CHECK-LABEL: func @append_paged_rotary
// CHECK: %[[KR:.+]] = attn.rotary %{{.*}}, %{{.*}}, %{{.*}} at %[[N:.+]] {interleaved} : tensor<2x3x2x64xbf16>, tensor<128x16xf32>, tensor<128x16xf32>, tensor<2xi32> -> tensor<2x3x2x64xbf16>
// CHECK: attn.kv_append %[[KR]], %{{.*}} into %{{.*}}, %{{.*}} at %[[N]] paged(%{{.*}} : tensor<2x4xi32>) : tensor<2x3x2x64xbf16>, tensor<2x3x2x32xbf16>, tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>, tensor<2xi32> -> tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>
func.func @append_paged_rotary(%k: tensor<2x3x2x64xbf16>, %v: tensor<2x3x2x32xbf16>, %kc: tensor<8x16x2x64xbf16>, %vc: tensor<8x16x2x32xbf16>, %n: tensor<2xi32>, %pt: tensor<2x4xi32>, %cos: tensor<128x16xf32>, %sin: tensor<128x16xf32>) -> (tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>) {
  %kr = attn.rotary %k, %cos, %sin at %n {interleaved} : tensor<2x3x2x64xbf16>, tensor<128x16xf32>, tensor<128x16xf32>, tensor<2xi32> -> tensor<2x3x2x64xbf16>
  %kc2, %vc2 = attn.kv_append %kr, %v into %kc, %vc at %n paged(%pt : tensor<2x4xi32>) : tensor<2x3x2x64xbf16>, tensor<2x3x2x32xbf16>, tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>, tensor<2xi32> -> tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>
  return %kc2, %vc2 : tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>
}

// -----

// A contiguous cache [B, Ncap, Hkv, D] and a query rotated at one position
// per sequence (flash-attn's non-causal q); dynamic extents.

// CHECK-LABEL: func @append_contiguous
// CHECK: attn.rotary %{{.*}} at %{{.*}} {same_position} : tensor<?x?x8x128xf16>, tensor<?x64xf16>
// CHECK: attn.kv_append %{{.*}}, %{{.*}} into %{{.*}}, %{{.*}} at %{{.*}} : tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?xi32> -> tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>
func.func @append_contiguous(%q: tensor<?x?x8x128xf16>, %k: tensor<?x?x2x128xf16>, %v: tensor<?x?x2x128xf16>, %kc: tensor<?x?x2x128xf16>, %vc: tensor<?x?x2x128xf16>, %n: tensor<?xi32>, %cos: tensor<?x64xf16>, %sin: tensor<?x64xf16>) -> (tensor<?x?x8x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>) {
  %qr = attn.rotary %q, %cos, %sin at %n {same_position} : tensor<?x?x8x128xf16>, tensor<?x64xf16>, tensor<?x64xf16>, tensor<?xi32> -> tensor<?x?x8x128xf16>
  %kc2, %vc2 = attn.kv_append %k, %v into %kc, %vc at %n : tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>, tensor<?xi32> -> tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>
  return %qr, %kc2, %vc2 : tensor<?x?x8x128xf16>, tensor<?x?x2x128xf16>, tensor<?x?x2x128xf16>
}
