// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-split-kv
// RUN: not fa-opt %s -split-input-file -attn-split-kv="splits=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: 'attn.online_attention' op expected positive splits and block-kv, got 0 and 64

// A running state that is not the empty one would be counted once per split.
func.func @running_state(%q: tensor<1x1x4x32xf32>, %k: tensor<1x1x64x32xf32>, %acc: tensor<1x1x4x32xf32>, %m: tensor<1x1x4xf32>, %i: index)
    -> (tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>) {
  // expected-error @+1 {{expected the initial state (acc, max, sum) = (0, -inf, 0) of attn-online-softmax}}
  %a, %mm, %ll = attn.online_attention %q, %k, %k, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x4x32xf32>, tensor<1x1x64x32xf32>, tensor<1x1x64x32xf32>, tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
      -> tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
  return %a, %mm, %ll : tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
}

// -----

// The unfinalised running state escapes: its meaning depends on the whole key
// range, so the split has nothing to replace it with.
func.func @escaping_state(%q: tensor<1x1x4x32xf32>, %k: tensor<1x1x64x32xf32>, %i: index)
    -> (tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e4 = tensor.empty() : tensor<1x1x4x32xf32>
  %e3 = tensor.empty() : tensor<1x1x4xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1x1x4x32xf32>) -> tensor<1x1x4x32xf32>
  %m = linalg.fill ins(%ninf : f32) outs(%e3 : tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
  %l = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
  // expected-error @+1 {{expected its results to be consumed only by the finalisation of attn-online-softmax (run attn-split-kv right after it)}}
  %a, %mm, %ll = attn.online_attention %q, %k, %k, %acc, %m, %l at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x4x32xf32>, tensor<1x1x64x32xf32>, tensor<1x1x64x32xf32>, tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
      -> tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
  return %a, %mm, %ll : tensor<1x1x4x32xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
}

// -----

// A varlen batch has no single key range to split.
func.func @varlen(%q: tensor<1x2x9x8xf32>, %k: tensor<1x1x7x8xf32>, %v: tensor<1x1x7x8xf32>, %acc: tensor<1x2x9x8xf32>, %m: tensor<1x2x9xf32>, %l: tensor<1x2x9xf32>, %cu: tensor<3xi32>)
    -> (tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>) {
  %c0 = arith.constant 0 : index
  %nq = arith.constant 9 : index
  %nk = arith.constant 7 : index
  // expected-error @+1 {{expected a dense problem: attn-split-kv does not split varlen (cu_seqlens) batches}}
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk] varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>)
      : tensor<1x2x9x8xf32>, tensor<1x1x7x8xf32>, tensor<1x1x7x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32> -> tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>
  return %a, %mm, %ll : tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>
}
