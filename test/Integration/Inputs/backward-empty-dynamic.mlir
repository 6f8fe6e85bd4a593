func.func @bwd(%q: tensor<?x2x?x4xf32>, %k: tensor<?x1x?x4xf32>, %v: tensor<?x1x?x3xf32>, %o: tensor<?x2x?x3xf32>, %do: tensor<?x2x?x3xf32>, %lse: tensor<?x2x?xf32>)
    -> (tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x3xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal_bottom_right>, scale = 0.5 : f32}
      : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x3xf32>, tensor<?x2x?x3xf32>, tensor<?x2x?x3xf32>, tensor<?x2x?xf32>
      -> tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x3xf32>
  return %dq, %dk, %dv : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x3xf32>
}
