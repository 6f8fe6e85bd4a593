func.func @dyn(%q: tensor<?x2x?x4xf32>, %k: tensor<?x1x?x4xf32>, %v: tensor<?x1x?x2xf32>)
    -> (tensor<?x2x?x2xf32>, tensor<?x2x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>, scale = 0.5 : f32}
      : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x2xf32> -> tensor<?x2x?x2xf32>, tensor<?x2x?xf32>
  return %o, %lse : tensor<?x2x?x2xf32>, tensor<?x2x?xf32>
}
