func.func @backward(%q: tensor<1x2x5x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %o: tensor<1x2x5x4xf32>, %do: tensor<1x2x5x4xf32>, %lse: tensor<1x2x5xf32>, %bias: tensor<4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c3 = arith.constant 3 : index
    %i = arith.addi %h, %c3 : index
    %x = tensor.extract %bias[%i] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
    -> tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>
  return %dq, %dk, %dv : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>
}
