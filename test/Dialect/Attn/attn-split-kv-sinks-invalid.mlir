// RUN: fa-opt %s -attn-online-softmax -attn-split-kv -verify-diagnostics

// A sink joins each whole row once; attn-split-kv, whose partials would each
// be finalised, refuses a problem with sinks instead of counting it per split.
func.func @sinks(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x64x16xf32>, %v: tensor<1x4x64x16xf32>, %s: tensor<4xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected attention without sinks: attn-split-kv does not split a problem whose rows join a sink}}
  %o, %lse = attn.attention %q, %k, %v sinks(%s : tensor<4xf32>)
      : tensor<1x4x8x16xf32>, tensor<1x4x64x16xf32>, tensor<1x4x64x16xf32> -> tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
}
