// attn.quantize in both forms and attn.hadamard, for quantize.test.
func.func @quantize(%x: tensor<1x2x70x8xf32>)
    -> (tensor<1x2x70x8xf8E4M3FN>, tensor<1x1xf32>, tensor<1x2x70x8xf8E4M3FN>, tensor<1x2x2xf32>) {
  %g8, %g = attn.quantize %x : tensor<1x2x70x8xf32> -> tensor<1x2x70x8xf8E4M3FN>, tensor<1x1xf32>
  %b8, %b = attn.quantize %x : tensor<1x2x70x8xf32> -> tensor<1x2x70x8xf8E4M3FN>, tensor<1x2x2xf32>
  return %g8, %g, %b8, %b : tensor<1x2x70x8xf8E4M3FN>, tensor<1x1xf32>, tensor<1x2x70x8xf8E4M3FN>, tensor<1x2x2xf32>
}

func.func @rotate(%x: tensor<3x24xf32>) -> tensor<3x24xf32> {
  %r = attn.hadamard %x : tensor<3x24xf32> -> tensor<3x24xf32>
  return %r : tensor<3x24xf32>
}
