// score_mods reading a captured bias table of 4 entries with indices that
// leave it (clamped: AttentionOp's rule) and with the entries the clamp gives.
func.func @past_end(%q: tensor<1x2x5x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %bias: tensor<4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c3 = arith.constant 3 : index
    %i = arith.addi %h, %c3 : index
    %x = tensor.extract %bias[%i] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32> -> tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
  return %o, %lse : tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
}

func.func @last(%q: tensor<1x2x5x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %bias: tensor<4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c3 = arith.constant 3 : index
    %x = tensor.extract %bias[%c3] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32> -> tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
  return %o, %lse : tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
}

// q_idx - kv_idx - 10 is negative for every pair: the first entry.
func.func @before_start(%q: tensor<1x2x5x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %bias: tensor<4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c10 = arith.constant 10 : index
    %d = arith.subi %qi, %kv : index
    %i = arith.subi %d, %c10 : index
    %x = tensor.extract %bias[%i] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32> -> tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
  return %o, %lse : tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
}

func.func @first(%q: tensor<1x2x5x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %bias: tensor<4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.5 : f32} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c0 = arith.constant 0 : index
    %x = tensor.extract %bias[%c0] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x5x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32> -> tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
  return %o, %lse : tensor<1x2x5x4xf32>, tensor<1x2x5xf32>
}
