// RUN: fa-opt %s -split-input-file -verify-diagnostics

func.func @gqa_heads(%q: tensor<1x32x8x16xf16>, %k: tensor<1x5x8x16xf16>, %v: tensor<1x5x8x16xf16>) {
  // expected-error @+1 {{expected key head count to divide query head count, got 5 and 32}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x32x8x16xf16>, tensor<1x5x8x16xf16>, tensor<1x5x8x16xf16> -> tensor<1x32x8x16xf16>, tensor<1x32x8xf32>
  return
}

// -----

func.func @rank(%q: tensor<4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected query to have rank 4 [batch, heads, seq, head_dim], got rank 3}}
  %o, %l = attn.attention %q, %k, %v : tensor<4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @elem(%q: tensor<1x4x8x16xi8>, %k: tensor<1x4x8x16xi8>, %v: tensor<1x4x8x16xi8>) {
  // expected-error @+1 {{expected query element type f16, bf16, f32 or f8E4M3FN, got 'i8'}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xi8>, tensor<1x4x8x16xi8>, tensor<1x4x8x16xi8> -> tensor<1x4x8x16xi8>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mixed(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xbf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected key element type to match query element type, got 'bf16' and 'f16'}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @head_dim(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x32xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected key head dim to equal query head dim, got 32 and 16}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x32xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @head_dim_big(%q: tensor<1x4x8x512xf16>, %k: tensor<1x4x8x512xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected query head dim in [1, 256], got 512}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x512xf16>, tensor<1x4x8x512xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @dynamic_head_dim(%q: tensor<1x4x8x?xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected static head dim of query}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x?xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @batch(%q: tensor<2x4x8x16xf16>, %k: tensor<3x4x8x16xf16>, %v: tensor<3x4x8x16xf16>) {
  // expected-error @+1 {{expected key and value batch size to equal query batch size, got 3, 3 and 2}}
  %o, %l = attn.attention %q, %k, %v : tensor<2x4x8x16xf16>, tensor<3x4x8x16xf16>, tensor<3x4x8x16xf16> -> tensor<2x4x8x16xf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @kv_heads(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x2x8x16xf16>) {
  // expected-error @+1 {{expected value head count to equal key head count, got 2 and 4}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x2x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @kv_len(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x9x16xf16>) {
  // expected-error @+1 {{expected value sequence length to equal key sequence length, got 9 and 8}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x9x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @out_shape(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x32xf16>) {
  // expected-error @+1 {{expected output shape [1, 4, 8, 32], got [1, 4, 8, 16]}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x32xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @out_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected output element type 'f16', got 'f32'}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
  return
}

// -----

func.func @lse_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected lse element type 'f32', got 'f16'}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf16>
  return
}

// -----

func.func @scale(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected scale to be finite and non-zero, got 0}}
  %o, %l = attn.attention %q, %k, %v {scale = 0.0 : f32} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_missing(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected window_left and window_right, or window(%left, %right), with mask window}}
  %o, %l = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = 4} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_negative(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected window sizes >= -1 (-1: unbounded), got -2 and 0}}
  %o, %l = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = -2, window_right = 0} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_on_causal(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{window sizes apply only to mask window, got mask causal}}
  %o, %l = attn.attention %q, %k, %v {mask = #attn.mask<causal>, window_left = 4, window_right = 0} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_runtime_on_causal(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %wl: i64, %wr: i64) {
  // expected-error @+1 {{window sizes apply only to mask window, got mask causal}}
  %o, %l = attn.attention %q, %k, %v window(%wl, %wr) {mask = #attn.mask<causal>} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_runtime_one_size(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %wl: i64) {
  // expected-error @+1 {{expected two run-time window sizes (left, right), got 1}}
  %o, %l = attn.attention %q, %k, %v window(%wl) {mask = #attn.mask<window>} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @window_runtime_and_attrs(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %wl: i64, %wr: i64) {
  // expected-error @+1 {{expected the window sizes either as window_left/window_right or as window(...) operands, got both}}
  %o, %l = attn.attention %q, %k, %v window(%wl, %wr) {mask = #attn.mask<window>, window_left = 4, window_right = 0} : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @score_mod_args(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected score_mod to take 5 arguments (score: f32, b, h, q_idx, kv_idx: index), got 1: ('f32')}}
  %o, %l = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

// Five arguments of the wrong types: the message names the first wrong one.
func.func @score_mod_arg_types(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected score_mod argument #2 (h) of type 'index', got 'i32'}}
  %o, %l = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32, %b: index, %h: i32, %qi: index, %kv: index):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @score_mod_score_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected score_mod argument #0 (score) of type 'f32', got 'f16'}}
  %o, %l = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f16, %b: index, %h: index, %qi: index, %kv: index):
    %x = arith.extf %s : f16 to f32
    attn.yield %x : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @score_mod_too_many(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected score_mod to take 5 arguments (score: f32, b, h, q_idx, kv_idx: index), got 6: ('f32', 'index', 'index', 'index', 'index', 'index')}}
  %o, %l = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %x: index):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @score_mod_yield(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected score_mod to end in attn.yield of one f32}}
  %o, %l = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %i : index
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @bwd_grad_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %o: tensor<1x4x8x16xf16>, %lse: tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected grad_key shape [1, 4, 8, 16], got [1, 2, 8, 16]}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse
      : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xf16>, tensor<1x2x8x16xf16>, tensor<1x4x8x16xf16>
  return
}

// -----

func.func @bwd_lse(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %o: tensor<1x4x8x16xf16>, %lse: tensor<1x4x9xf32>) {
  // expected-error @+1 {{expected lse shape [1, 4, 8], got [1, 4, 9]}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse
      : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x9xf32>
      -> tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>
  return
}

// -----

func.func @online_acc(%q: tensor<1x1x16x32xbf16>, %acc: tensor<1x1x16x32xbf16>, %m: tensor<1x1x16xf32>, %i: index) {
  // expected-error @+1 {{expected acc element type 'f32', got 'bf16'}}
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x32xbf16>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return
}

// -----

func.func @online_position(%q: tensor<1x1x16x32xbf16>, %acc: tensor<1x1x16x32xf32>, %m: tensor<1x1x16xf32>, %i: index) {
  // expected-error @+1 {{expected 4 offsets [b, h, q, kv] and 2 lengths [nq, nk], got 2 and 2}}
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i] of [%i, %i]
      : tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return
}

// -----

func.func @tile_heads(%q: tensor<1x2x16x32xbf16>, %k: tensor<1x1x16x32xbf16>, %acc: tensor<1x2x16x32xf32>, %kacc: tensor<1x1x16x32xf32>, %m: tensor<1x2x16xf32>, %i: index) {
  // expected-error @+1 {{expected one key head per query head in a tile, got 1 and 2}}
  %dq, %dk, %dv = attn.backward_tile %q, %k, %k, %q, %m, %m into %acc, %kacc, %kacc at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x2x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16xf32>, tensor<1x2x16xf32>,
        tensor<1x2x16x32xf32>, tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>
      -> tensor<1x2x16x32xf32>, tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>
  return
}

// -----

func.func @merge_rank(%o: tensor<1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>) {
  // expected-error @+1 {{expected partial_output to have rank 5 [splits, batch, heads, seq, head_dim], got rank 4}}
  %out, %lse = attn.merge %o, %l : tensor<1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_partial_elem(%o: tensor<4x1x32x1x128xbf16>, %l: tensor<4x1x32x1xf32>) {
  // expected-error @+1 {{expected partial_output element type f32, got 'bf16'}}
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xbf16>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_no_parts(%o: tensor<0x1x32x1x128xf32>, %l: tensor<0x1x32x1xf32>) {
  // expected-error @+1 {{expected at least one partial result, got 0}}
  %out, %lse = attn.merge %o, %l : tensor<0x1x32x1x128xf32>, tensor<0x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_split_count(%o: tensor<4x1x32x1x128xf32>, %l: tensor<3x1x32x1xf32>) {
  // expected-error @+1 {{expected partial_lse shape [4, 1, 32, 1], got [3, 1, 32, 1]}}
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xf32>, tensor<3x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_out_shape(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>) {
  // expected-error @+1 {{expected output shape [1, 32, 1, 128], got [1, 32, 1, 64]}}
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x64xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_out_elem(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>) {
  // expected-error @+1 {{expected output element type f16, bf16 or f32, got 'i8'}}
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xi8>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_lse(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>) {
  // expected-error @+1 {{expected lse element type 'f32', got 'f16'}}
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf16>
  return
}

// -----

func.func @merge_sinks_count(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{expected sinks of one per query head, got 8 sinks and 32 heads}}
  %out, %lse = attn.merge %o, %l sinks(%s : tensor<8xf32>) : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_sinks_type(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>, %s: tensor<32xbf16>) {
  // expected-error @+1 {{expected sinks to be a rank-1 tensor of f32 [heads], got 'tensor<32xbf16>'}}
  %out, %lse = attn.merge %o, %l sinks(%s : tensor<32xbf16>) : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

func.func @merge_sinks_rank(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>, %s: tensor<1x32xf32>) {
  // expected-error @+1 {{expected sinks to be a rank-1 tensor of f32 [heads], got 'tensor<1x32xf32>'}}
  %out, %lse = attn.merge %o, %l sinks(%s : tensor<1x32xf32>) : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return
}

// -----

// Dynamic inputs leave the extents open; the results must still agree with
// each other: the output fixes batch 2, the lse says 3.
func.func @dynamic_results_disagree(%q: tensor<?x?x?x16xf16>, %k: tensor<?x?x?x16xf16>, %v: tensor<?x?x?x16xf16>) {
  // expected-error @+1 {{expected lse shape [2, 4, 8], got [3, 4, 8]}}
  %o, %l = attn.attention %q, %k, %v : tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16> -> tensor<2x4x8x16xf16>, tensor<3x4x8xf32>
  return
}

// -----

func.func @dynamic_query_rows_disagree(%q: tensor<1x4x?x16xf16>, %k: tensor<1x4x?x16xf16>, %v: tensor<1x4x?x16xf16>) {
  // expected-error @+1 {{expected lse shape [1, 4, 8], got [1, 4, 9]}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x9xf32>
  return
}

// -----

// Key and value batch sizes must agree with each other when the query's is
// dynamic.
func.func @dynamic_query_kv_batches_disagree(%q: tensor<?x4x8x16xf16>, %k: tensor<2x4x8x16xf16>, %v: tensor<3x4x8x16xf16>) {
  // expected-error @+1 {{expected key and value batch size to equal query batch size, got 2, 3 and ?}}
  %o, %l = attn.attention %q, %k, %v : tensor<?x4x8x16xf16>, tensor<2x4x8x16xf16>, tensor<3x4x8x16xf16> -> tensor<?x4x8x16xf16>, tensor<?x4x8xf32>
  return
}

// -----

// The output's head count, learnt from a result, must still be a multiple of
// the key heads.
func.func @dynamic_heads_from_result(%q: tensor<1x?x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected key head count to divide query head count, got 4 and 6}}
  %o, %l = attn.attention %q, %k, %v : tensor<1x?x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x6x8x16xf16>, tensor<1x?x8xf32>
  return
}

// -----

// The backward: the gradients fix the extents the inputs leave open.
func.func @dynamic_backward_disagree(%q: tensor<?x?x?x16xf16>, %o: tensor<?x?x?x16xf16>, %lse: tensor<?x?x?xf32>) {
  // expected-error @+1 {{expected grad_key shape [2, ?, ?, 16], got [5, 4, 8, 16]}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %o, %lse
      : tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16>, tensor<?x?x?x16xf16>, tensor<?x?x?xf32>
      -> tensor<2x4x8x16xf16>, tensor<5x4x8x16xf16>, tensor<?x?x?x16xf16>
  return
}

// -----

// A score_mod indexing a captured table with h where H (8) exceeds the table.
func.func @score_mod_read_heads(%q: tensor<1x8x4x16xf16>, %slopes: tensor<4xf32>) {
  %o, %l = attn.attention %q, %q, %q score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    // expected-error @+1 {{'tensor.extract' op index #0 is h, up to 7, outside the captured tensor's dimension of size 4}}
    %x = tensor.extract %slopes[%h] : tensor<4xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16> -> tensor<1x8x4x16xf16>, tensor<1x8x4xf32>
  return
}

// -----

func.func @score_mod_read_constant(%q: tensor<1x8x4x16xf16>, %bias: tensor<8x6xf32>) {
  %o, %l = attn.attention %q, %q, %q score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c6 = arith.constant 6 : index
    // expected-error @+1 {{'tensor.extract' op index #1 = 6 is outside the captured tensor's dimension of size 6}}
    %x = tensor.extract %bias[%h, %c6] : tensor<8x6xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16> -> tensor<1x8x4x16xf16>, tensor<1x8x4xf32>
  return
}

// -----

func.func @score_mod_read_empty(%q: tensor<1x8x4x16xf16>, %bias: tensor<0xf32>, %i: index) {
  %o, %l = attn.attention %q, %q, %q score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    // expected-error @+1 {{'tensor.extract' op reads dimension 0 of a tensor captured by a score_mod, which is empty}}
    %x = tensor.extract %bias[%i] : tensor<0xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16>, tensor<1x8x4x16xf16> -> tensor<1x8x4x16xf16>, tensor<1x8x4xf32>
  return
}

// -----

// The backward: kv_idx reaches Nk - 1 = 9 in a table of 8.
func.func @score_mod_read_backward(%q: tensor<1x2x4x16xf16>, %k: tensor<1x2x10x16xf16>, %lse: tensor<1x2x4xf32>, %table: tensor<8xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %k, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index):
    // expected-error @+1 {{'tensor.extract' op index #0 is kv_idx, up to 9, outside the captured tensor's dimension of size 8}}
    %x = tensor.extract %table[%kv] : tensor<8xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<1x2x4x16xf16>, tensor<1x2x10x16xf16>, tensor<1x2x10x16xf16>, tensor<1x2x4x16xf16>, tensor<1x2x4x16xf16>, tensor<1x2x4xf32>
    -> tensor<1x2x4x16xf16>, tensor<1x2x10x16xf16>, tensor<1x2x10x16xf16>
  return
}

// -----

func.func @varlen_rank(%q: tensor<1x4x8x16xf16>, %k: tensor<8x4x16xf16>, %v: tensor<8x4x16xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expected varlen query to have rank 3 [tokens, heads, head_dim], got rank 4}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>) : tensor<1x4x8x16xf16>, tensor<8x4x16xf16>, tensor<8x4x16xf16> -> tensor<8x4x16xf16>, tensor<4x8xf32>
  return
}

// -----

func.func @varlen_offsets_type(%q: tensor<8x4x16xf16>, %k: tensor<8x4x16xf16>, %v: tensor<8x4x16xf16>, %cu: tensor<3xi64>) {
  // expected-error @+1 {{expected cu_seqlens_q to be a rank-1 tensor of i32 [batch + 1], got 'tensor<3xi64>'}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<3xi64>, tensor<3xi64>) : tensor<8x4x16xf16>, tensor<8x4x16xf16>, tensor<8x4x16xf16> -> tensor<8x4x16xf16>, tensor<4x8xf32>
  return
}

// -----

func.func @varlen_offsets_sizes(%q: tensor<8x4x16xf16>, %k: tensor<8x4x16xf16>, %v: tensor<8x4x16xf16>, %cuq: tensor<3xi32>, %cuk: tensor<4xi32>) {
  // expected-error @+1 {{expected cu_seqlens_q and cu_seqlens_k of one size, got 3 and 4}}
  %o, %l = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<3xi32>, tensor<4xi32>) : tensor<8x4x16xf16>, tensor<8x4x16xf16>, tensor<8x4x16xf16> -> tensor<8x4x16xf16>, tensor<4x8xf32>
  return
}

// -----

func.func @varlen_no_offsets(%q: tensor<8x4x16xf16>, %k: tensor<8x4x16xf16>, %v: tensor<8x4x16xf16>, %cu: tensor<0xi32>) {
  // expected-error @+1 {{expected cu_seqlens_q to hold at least one offset, got 0}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<0xi32>, tensor<0xi32>) : tensor<8x4x16xf16>, tensor<8x4x16xf16>, tensor<8x4x16xf16> -> tensor<8x4x16xf16>, tensor<4x8xf32>
  return
}

// -----

func.func @varlen_lse_layout(%q: tensor<8x4x16xf16>, %k: tensor<6x2x16xf16>, %v: tensor<6x2x16xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expected lse shape [4, 8], got [8, 4]}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>) : tensor<8x4x16xf16>, tensor<6x2x16xf16>, tensor<6x2x16xf16> -> tensor<8x4x16xf16>, tensor<8x4xf32>
  return
}

// -----

func.func @varlen_kv_tokens(%q: tensor<8x4x16xf16>, %k: tensor<6x2x16xf16>, %v: tensor<5x2x16xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expected value sequence length to equal key sequence length, got 5 and 6}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>) : tensor<8x4x16xf16>, tensor<6x2x16xf16>, tensor<5x2x16xf16> -> tensor<8x4x16xf16>, tensor<4x8xf32>
  return
}

// -----

func.func @varlen_grad_key(%q: tensor<8x4x16xf16>, %k: tensor<6x2x16xf16>, %v: tensor<6x2x16xf16>, %o: tensor<8x4x16xf16>, %lse: tensor<4x8xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expected grad_key shape [6, 2, 16], got [6, 4, 16]}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>)
      : tensor<8x4x16xf16>, tensor<6x2x16xf16>, tensor<6x2x16xf16>, tensor<8x4x16xf16>, tensor<8x4x16xf16>, tensor<4x8xf32>
      -> tensor<8x4x16xf16>, tensor<6x4x16xf16>, tensor<6x2x16xf16>
  return
}
