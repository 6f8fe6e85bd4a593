// RUN: fa-opt %s -attn-tile="block-q=0" -verify-diagnostics

func.func @zero_block(%q: tensor<1x1x16x8xf32>, %acc: tensor<1x1x16x8xf32>, %m: tensor<1x1x16xf32>, %i: index)
    -> tensor<1x1x16x8xf32> {
  // expected-error @+1 {{expected positive block sizes, got block-q 0 and block-kv 64}}
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x8xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return %a : tensor<1x1x16x8xf32>
}
