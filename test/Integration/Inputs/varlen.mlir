// Two packed sequences (query totals 5, key totals 7) of a varlen forward.
func.func @varlen(%q: tensor<5x2x4xf32>, %k: tensor<7x1x4xf32>, %v: tensor<7x1x4xf32>,
                  %cuq: tensor<3xi32>, %cuk: tensor<3xi32>) -> (tensor<5x2x4xf32>, tensor<2x5xf32>) {
  %o, %lse = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<3xi32>, tensor<3xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<5x2x4xf32>, tensor<7x1x4xf32>, tensor<7x1x4xf32> -> tensor<5x2x4xf32>, tensor<2x5xf32>
  return %o, %lse : tensor<5x2x4xf32>, tensor<2x5xf32>
}
