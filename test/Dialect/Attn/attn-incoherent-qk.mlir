// RUN: fa-opt %s -split-input-file -attn-incoherent-qk -verify-diagnostics | FileCheck %s --enable-var-scope

// Q and K are rotated before their quantisation; V is not.
// CHECK-LABEL: func.func @rotate
// CHECK-SAME: (%[[Q:.+]]: tensor<1x8x64x128xbf16>, %[[K:.+]]: tensor<1x2x64x128xbf16>, %[[V:.+]]: tensor<1x2x64x128xbf16>)
// CHECK: %[[QR:.+]] = attn.hadamard %[[Q]] : tensor<1x8x64x128xbf16> -> tensor<1x8x64x128xbf16>
// CHECK: %[[Q8:.+]], %[[DQ:.+]] = attn.quantize %[[QR]]
// CHECK: %[[KR:.+]] = attn.hadamard %[[K]]
// CHECK: %[[K8:.+]], %[[DK:.+]] = attn.quantize %[[KR]]
// CHECK: %[[V8:.+]], %[[DV:.+]] = attn.quantize %[[V]]
// CHECK: attn.attention %[[Q8]], %[[K8]], %[[V8]] descale(%[[DQ]], %[[DK]], %[[DV]]
// CHECK-NOT: attn.hadamard
func.func @rotate(%q: tensor<1x8x64x128xbf16>, %k: tensor<1x2x64x128xbf16>, %v: tensor<1x2x64x128xbf16>)
    -> (tensor<1x8x64x128xbf16>, tensor<1x8x64xf32>) {
  %q8, %dq = attn.quantize %q : tensor<1x8x64x128xbf16> -> tensor<1x8x64x128xf8E4M3FN>, tensor<1x2xf32>
  %k8, %dk = attn.quantize %k : tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xf8E4M3FN>, tensor<1x2xf32>
  %v8, %dv = attn.quantize %v : tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xf8E4M3FN>, tensor<1x2xf32>
  %o, %lse = attn.attention %q8, %k8, %v8 descale(%dq, %dk, %dv : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) {mask = #attn.mask<causal>}
      : tensor<1x8x64x128xf8E4M3FN>, tensor<1x2x64x128xf8E4M3FN>, tensor<1x2x64x128xf8E4M3FN> -> tensor<1x8x64x128xbf16>, tensor<1x8x64xf32>
  return %o, %lse : tensor<1x8x64x128xbf16>, tensor<1x8x64xf32>
}

// -----

// Already rotated inputs stay as they are (the pass is idempotent).
// CHECK-LABEL: func.func @rotated
// CHECK-COUNT-2: attn.hadamard
// CHECK-NOT: attn.hadamard
func.func @rotated(%q: tensor<1x2x64x64xf32>, %v: tensor<1x2x64x64xf32>) -> tensor<1x2x64x64xbf16> {
  %qr = attn.hadamard %q : tensor<1x2x64x64xf32> -> tensor<1x2x64x64xf32>
  %kr = attn.hadamard %v : tensor<1x2x64x64xf32> -> tensor<1x2x64x64xf32>
  %q8, %dq = attn.quantize %qr : tensor<1x2x64x64xf32> -> tensor<1x2x64x64xf8E4M3FN>, tensor<1x2xf32>
  %k8, %dk = attn.quantize %kr : tensor<1x2x64x64xf32> -> tensor<1x2x64x64xf8E4M3FN>, tensor<1x2xf32>
  %v8, %dv = attn.quantize %v : tensor<1x2x64x64xf32> -> tensor<1x2x64x64xf8E4M3FN>, tensor<1x2xf32>
  %o, %lse = attn.attention %q8, %k8, %v8 descale(%dq, %dk, %dv : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>)
      : tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN> -> tensor<1x2x64x64xbf16>, tensor<1x2x64xf32>
  return %o : tensor<1x2x64x64xbf16>
}

// -----

// One quantisation serving Q, K and V (self-attention of one tensor, H =
// Hkv) is copied: the attention's Q and K read the rotated copy, V keeps
// the original. Block descales rotate alike.
// CHECK-LABEL: func.func @shared
// CHECK-SAME: (%[[X:.+]]: tensor<1x2x96x64xf32>, %{{.+}}: tensor<1x2xf32>)
// CHECK: %[[X8:.+]], %[[DX:.+]] = attn.quantize %[[X]] : tensor<1x2x96x64xf32> -> tensor<1x2x96x64xf8E4M3FN>, tensor<1x2x2xf32>
// CHECK: %[[XR:.+]] = attn.hadamard %[[X]]
// CHECK: %[[R8:.+]], %[[DR:.+]] = attn.quantize %[[XR]]
// CHECK: attn.attention %[[R8]], %[[R8]], %[[X8]] descale(%[[DR]], %[[DR]], %{{.+}} :
func.func @shared(%x: tensor<1x2x96x64xf32>, %dv: tensor<1x2xf32>) -> tensor<1x2x96x64xbf16> {
  %x8, %dx = attn.quantize %x : tensor<1x2x96x64xf32> -> tensor<1x2x96x64xf8E4M3FN>, tensor<1x2x2xf32>
  %o, %lse = attn.attention %x8, %x8, %x8 descale(%dx, %dx, %dv : tensor<1x2x2xf32>, tensor<1x2x2xf32>, tensor<1x2xf32>)
      : tensor<1x2x96x64xf8E4M3FN>, tensor<1x2x96x64xf8E4M3FN>, tensor<1x2x96x64xf8E4M3FN> -> tensor<1x2x96x64xbf16>, tensor<1x2x96xf32>
  return %o : tensor<1x2x96x64xbf16>
}

// -----

// fp8 inputs quantised elsewhere cannot be rotated: a warning, no change.
// CHECK-LABEL: func.func @given
// CHECK-NOT: attn.hadamard
func.func @given(%q: tensor<1x2x64x64xf8E4M3FN>, %k: tensor<1x2x64x64xf8E4M3FN>, %d: tensor<1x2xf32>) -> tensor<1x2x64x64xbf16> {
  // expected-warning @+1 {{Q and K are not quantised here (attn.quantize of both the fp8 input and its descale): they cannot be rotated}}
  %o, %lse = attn.attention %q, %k, %k descale(%d, %d, %d : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>)
      : tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN> -> tensor<1x2x64x64xbf16>, tensor<1x2x64xf32>
  return %o : tensor<1x2x64x64xbf16>
}
