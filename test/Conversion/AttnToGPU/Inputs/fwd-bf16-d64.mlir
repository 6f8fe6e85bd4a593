func.func @f(%q: tensor<1x2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>, %v: tensor<1x2x128x64xbf16>)
    -> (tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.125 : f32}
      : tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16> -> tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>
  return %o, %lse : tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>
}
