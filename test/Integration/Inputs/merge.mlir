func.func @merge(%o: tensor<3x1x2x4x2xf32>, %lse: tensor<3x1x2x4xf32>) -> (tensor<1x2x4x2xf32>, tensor<1x2x4xf32>) {
  %out, %l = attn.merge %o, %lse : tensor<3x1x2x4x2xf32>, tensor<3x1x2x4xf32> -> tensor<1x2x4x2xf32>, tensor<1x2x4xf32>
  return %out, %l : tensor<1x2x4x2xf32>, tensor<1x2x4xf32>
}
