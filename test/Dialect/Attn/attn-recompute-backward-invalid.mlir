// RUN: fa-opt %s -attn-recompute-backward -verify-diagnostics

// The backward differentiates score_mod itself; an op without a derivative
// rule that depends on the score is rejected by name.
func.func @sin(%q: tensor<1x1x8x16xf32>, %lse: tensor<1x1x8xf32>)
    -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) {
  // expected-error @+1 {{cannot differentiate score_mod op 'math.sin' with respect to the score}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %r = math.sin %s : f32
    attn.yield %r : f32
  } : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8xf32>
      -> tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
  return %dq, %dk, %dv : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
}
