// Entries whose results alias: one buffer twice, an argument, a constant.
func.func @twice(%q: tensor<1x2x3x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x2xf32>)
    -> (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32}
      : tensor<1x2x3x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x2xf32> -> tensor<1x2x3x2xf32>, tensor<1x2x3xf32>
  return %o, %o : tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
}

func.func @argument(%q: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  return %q, %q : tensor<2x3xf32>, tensor<2x3xf32>
}

func.func @constant() -> tensor<2xf32> {
  %c = arith.constant dense<[1.5, -2.0]> : tensor<2xf32>
  return %c : tensor<2xf32>
}
