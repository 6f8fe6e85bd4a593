// RUN: fa-opt %s -split-input-file -verify-diagnostics

// fp8 attention: e4m3 Q, K, V need their descale factors, f32 [B, Hkv]
// each, and give a bf16 O; no score_mod, mask_mod or varlen.

func.func @no_descale(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>) {
  // expected-error @+1 {{expected descale(q, k, v) factors with f8E4M3FN inputs}}
  %o, %l = attn.attention %q, %k, %v : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @descale_shape(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %dq: tensor<2x4xf32>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected descale_q shape [2, 2], got [2, 4]}}
  %o, %l = attn.attention %q, %k, %v descale(%dq, %d, %d : tensor<2x4xf32>, tensor<2x2xf32>, tensor<2x2xf32>) : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @descale_type(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %d: tensor<2x2xf32>, %dv: tensor<2x2xbf16>) {
  // expected-error @+1 {{expected descale_v element type 'f32', got 'bf16'}}
  %o, %l = attn.attention %q, %k, %v descale(%d, %d, %dv : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xbf16>) : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @output_type(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected output element type 'bf16', got 'f8E4M3FN'}}
  %o, %l = attn.attention %q, %k, %v descale(%d, %d, %d : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xf8E4M3FN>, tensor<2x4x8xf32>
  return
}

// -----

func.func @mixed(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xbf16>, %v: tensor<2x2x8x16xf8E4M3FN>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected key element type to match query element type, got 'bf16' and 'f8E4M3FN'}}
  %o, %l = attn.attention %q, %k, %v descale(%d, %d, %d : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @descale_bf16(%q: tensor<2x4x8x16xbf16>, %k: tensor<2x2x8x16xbf16>, %v: tensor<2x2x8x16xbf16>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected descale factors only with f8E4M3FN inputs, got 'bf16'}}
  %o, %l = attn.attention %q, %k, %v descale(%d, %d, %d : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) : tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @score_mod(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected no score_mod or mask_mod with f8E4M3FN inputs (the fp8 forward has neither)}}
  %o, %l = attn.attention %q, %k, %v descale(%d, %d, %d : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %s : f32
  } : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

// The fp8 backward: e4m3 Q, K, V and dO with descale(q, k, v, do), f32
// [B, Hkv] each; O (the forward's) and the gradients bf16.
func.func @backward_no_descale(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xbf16>, %do: tensor<1x2x8x16xf8E4M3FN>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+1 {{expected descale(q, k, v) factors with f8E4M3FN inputs}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %do, %lse : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8xf32> -> tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return
}

// -----

func.func @backward_output_type(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xf8E4M3FN>, %do: tensor<1x2x8x16xf8E4M3FN>, %lse: tensor<1x2x8xf32>, %d: tensor<1x2xf32>) {
  // expected-error @+1 {{expected output element type 'bf16', got 'f8E4M3FN'}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %do, %lse descale(%d, %d, %d, %d : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8xf32> -> tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return
}

// -----

func.func @backward_grad_type(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xbf16>, %do: tensor<1x2x8x16xf8E4M3FN>, %lse: tensor<1x2x8xf32>, %d: tensor<1x2xf32>) {
  // expected-error @+1 {{expected grad_query element type 'bf16', got 'f8E4M3FN'}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %do, %lse descale(%d, %d, %d, %d : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8xf32> -> tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return
}

// -----

func.func @backward_grad_output_type(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xbf16>, %do: tensor<1x2x8x16xbf16>, %lse: tensor<1x2x8xf32>, %d: tensor<1x2xf32>) {
  // expected-error @+1 {{expected grad_output element type 'f8E4M3FN', got 'bf16'}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %do, %lse descale(%d, %d, %d, %d : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8xf32> -> tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return
}

// -----

func.func @backward_descale_do_shape(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xbf16>, %do: tensor<1x2x8x16xf8E4M3FN>, %lse: tensor<1x2x8xf32>, %d: tensor<1x2xf32>, %d4: tensor<1x4xf32>) {
  // expected-error @+1 {{expected descale_do shape [1, 2], got [1, 4]}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %do, %lse descale(%d, %d, %d, %d4 : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x4xf32>) : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8xf32> -> tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return
}

// -----

// Block descales: Q per (batch, query head, 64 rows), K per (batch, key
// head, 64 keys), V per (batch, key head); Nq = 130 has 3 blocks.
func.func @block_descale_q(%q: tensor<2x4x130x16xf8E4M3FN>, %k: tensor<2x2x70x16xf8E4M3FN>, %v: tensor<2x2x70x16xf8E4M3FN>, %dq: tensor<2x4x2xf32>, %dk: tensor<2x2x2xf32>, %dv: tensor<2x2xf32>) {
  // expected-error @+1 {{expected descale_q shape [2, 4, 3], got [2, 4, 2]}}
  %o, %l = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<2x4x2xf32>, tensor<2x2x2xf32>, tensor<2x2xf32>) : tensor<2x4x130x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN> -> tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
  return
}

// -----

func.func @block_descale_k(%q: tensor<2x4x130x16xf8E4M3FN>, %k: tensor<2x2x70x16xf8E4M3FN>, %v: tensor<2x2x70x16xf8E4M3FN>, %dq: tensor<2x4x3xf32>, %dk: tensor<2x4x2xf32>, %dv: tensor<2x2xf32>) {
  // expected-error @+1 {{expected descale_k shape [2, 2, 2], got [2, 4, 2]}}
  %o, %l = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<2x4x3xf32>, tensor<2x4x2xf32>, tensor<2x2xf32>) : tensor<2x4x130x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN> -> tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
  return
}

// -----

// A block Q with per-head K: the forms do not mix.
func.func @block_descale_mixed(%q: tensor<2x4x130x16xf8E4M3FN>, %k: tensor<2x2x70x16xf8E4M3FN>, %v: tensor<2x2x70x16xf8E4M3FN>, %dq: tensor<2x4x3xf32>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{expected descale_k shape [2, 2, 2], got [2, 2]}}
  %o, %l = attn.attention %q, %k, %v descale(%dq, %d, %d : tensor<2x4x3xf32>, tensor<2x2xf32>, tensor<2x2xf32>) : tensor<2x4x130x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN> -> tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
  return
}

// -----

func.func @block_descale_v(%q: tensor<2x4x130x16xf8E4M3FN>, %k: tensor<2x2x70x16xf8E4M3FN>, %v: tensor<2x2x70x16xf8E4M3FN>, %dq: tensor<2x4x3xf32>, %dk: tensor<2x2x2xf32>) {
  // expected-error @+1 {{expected descale_v shape [2, 2], got [2, 2, 2]}}
  %o, %l = attn.attention %q, %k, %v descale(%dq, %dk, %dk : tensor<2x4x3xf32>, tensor<2x2x2xf32>, tensor<2x2x2xf32>) : tensor<2x4x130x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN> -> tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
  return
}
