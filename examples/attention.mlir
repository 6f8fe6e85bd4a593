// Causal grouped-query attention: 8 query heads share 2 key/value heads.
func.func @attention(%q: tensor<1x8x256x64xbf16>, %k: tensor<1x2x256x64xbf16>, %v: tensor<1x2x256x64xbf16>)
    -> (tensor<1x8x256x64xbf16>, tensor<1x8x256xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<1x8x256x64xbf16>, tensor<1x2x256x64xbf16>, tensor<1x2x256x64xbf16>
      -> tensor<1x8x256x64xbf16>, tensor<1x8x256xf32>
  return %o, %lse : tensor<1x8x256x64xbf16>, tensor<1x8x256xf32>
}
