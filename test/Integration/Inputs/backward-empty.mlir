// Backwards with no queries or no keys (static): zero-size or zero results.
func.func @no_queries(%q: tensor<1x2x0x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x3xf32>, %o: tensor<1x2x0x3xf32>, %do: tensor<1x2x0x3xf32>, %lse: tensor<1x2x0xf32>)
    -> (tensor<1x2x0x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x3xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>, scale = 0.5 : f32}
      : tensor<1x2x0x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x3xf32>, tensor<1x2x0x3xf32>, tensor<1x2x0x3xf32>, tensor<1x2x0xf32>
      -> tensor<1x2x0x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x3xf32>
  return %dq, %dk, %dv : tensor<1x2x0x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x3xf32>
}

func.func @no_keys(%q: tensor<1x2x7x4xbf16>, %k: tensor<1x1x0x4xbf16>, %v: tensor<1x1x0x3xbf16>, %o: tensor<1x2x7x3xbf16>, %do: tensor<1x2x7x3xbf16>, %lse: tensor<1x2x7xf32>)
    -> (tensor<1x2x7x4xbf16>, tensor<1x1x0x4xbf16>, tensor<1x1x0x3xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {scale = 0.5 : f32}
      : tensor<1x2x7x4xbf16>, tensor<1x1x0x4xbf16>, tensor<1x1x0x3xbf16>, tensor<1x2x7x3xbf16>, tensor<1x2x7x3xbf16>, tensor<1x2x7xf32>
      -> tensor<1x2x7x4xbf16>, tensor<1x1x0x4xbf16>, tensor<1x1x0x3xbf16>
  return %dq, %dk, %dv : tensor<1x2x7x4xbf16>, tensor<1x1x0x4xbf16>, tensor<1x1x0x3xbf16>
}
