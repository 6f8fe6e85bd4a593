func.func @small(%q: tensor<1x2x3x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x2xf32>)
    -> (tensor<1x2x3x2xf32>, tensor<1x2x3xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>, scale = 0.5 : f32}
      : tensor<1x2x3x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x2xf32> -> tensor<1x2x3x2xf32>, tensor<1x2x3xf32>
  return %o, %lse : tensor<1x2x3x2xf32>, tensor<1x2x3xf32>
}
