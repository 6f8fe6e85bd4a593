// RUN: fa-opt %s -split-input-file -attn-decompose -canonicalize -cse | FileCheck %s --enable-var-scope

// attn.rotary becomes one linalg.generic over the rotated rows: each column
// reads itself and its partner, cos and sin at start[b] + n (clamped), and
// rotates in f32 with separately rounded products (x1·c − x2·s,
// x1·s + x2·c), rounded once; columns past rotary_dim are copied.

// CHECK-LABEL: func @rotary
// CHECK: linalg.generic
// CHECK-DAG: tensor.extract %{{.*}} : tensor<2x3x4x64xbf16>
// CHECK-DAG: tensor.extract %{{.*}} : tensor<16x16xf32>
// CHECK: arith.mulf
// CHECK: arith.subf
// CHECK: arith.addf
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK-NOT: math.fma
// CHECK: linalg.yield
func.func @rotary(%x: tensor<2x3x4x64xbf16>, %c: tensor<16x16xf32>, %s: tensor<16x16xf32>, %n: tensor<2xi32>) -> tensor<2x3x4x64xbf16> {
  %r = attn.rotary %x, %c, %s at %n {interleaved} : tensor<2x3x4x64xbf16>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<2xi32> -> tensor<2x3x4x64xbf16>
  return %r : tensor<2x3x4x64xbf16>
}

// -----

// attn.kv_append on a paged cache becomes a loop over sequences and new rows
// carrying both caches: row max(n[b], 0) + t, if below the capacity
// (max_pages · page_size = 64), is inserted at page page_table[b, row / 16]
// (clamped into the pool), slot row mod 16.

// CHECK-LABEL: func @append_paged
// CHECK: scf.for %[[B:.+]] = {{.*}} iter_args(%[[KC:.+]] = %{{.*}}, %[[VC:.+]] = %{{.*}}) -> (tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>)
// CHECK: scf.for %[[T:.+]] = {{.*}} iter_args
// CHECK: arith.cmpi ult, %{{.*}}, %c64
// CHECK: scf.if
// CHECK: tensor.extract %{{.*}} : tensor<2x4xi32>
// CHECK: tensor.extract_slice %{{.*}} : tensor<2x3x2x64xbf16> to tensor<1x1x2x64xbf16>
// CHECK: tensor.insert_slice %{{.*}} : tensor<1x1x2x64xbf16> into tensor<8x16x2x64xbf16>
// CHECK: tensor.insert_slice %{{.*}} : tensor<1x1x2x32xbf16> into tensor<8x16x2x32xbf16>
// CHECK-NOT: attn.kv_append
func.func @append_paged(%k: tensor<2x3x2x64xbf16>, %v: tensor<2x3x2x32xbf16>, %kc: tensor<8x16x2x64xbf16>, %vc: tensor<8x16x2x32xbf16>, %n: tensor<2xi32>, %pt: tensor<2x4xi32>) -> (tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>) {
  %kc2, %vc2 = attn.kv_append %k, %v into %kc, %vc at %n paged(%pt : tensor<2x4xi32>) : tensor<2x3x2x64xbf16>, tensor<2x3x2x32xbf16>, tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>, tensor<2xi32> -> tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>
  return %kc2, %vc2 : tensor<8x16x2x64xbf16>, tensor<8x16x2x32xbf16>
}

// -----

// A contiguous cache: row r of sequence b is [b, r]; the capacity is Ncap.

// CHECK-LABEL: func @append_contiguous
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.cmpi ult, %{{.*}}, %c40
// CHECK-NOT: tensor<2x4xi32>
// CHECK: tensor.insert_slice %{{.*}} : tensor<1x1x2x64xf16> into tensor<2x40x2x64xf16>
func.func @append_contiguous(%k: tensor<2x3x2x64xf16>, %kc: tensor<2x40x2x64xf16>, %n: tensor<2xi32>) -> tensor<2x40x2x64xf16> {
  %kc2, %vc2 = attn.kv_append %k, %k into %kc, %kc at %n : tensor<2x3x2x64xf16>, tensor<2x3x2x64xf16>, tensor<2x40x2x64xf16>, tensor<2x40x2x64xf16>, tensor<2xi32> -> tensor<2x40x2x64xf16>, tensor<2x40x2x64xf16>
  return %kc2 : tensor<2x40x2x64xf16>
}
