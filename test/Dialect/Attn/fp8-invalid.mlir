// RUN: fa-opt %s -split-input-file -verify-diagnostics

// fp8 attention: e4m3 Q, K, V need their descale factors, f32 [B, Hkv]
// each, and give a bf16 O; no score_mod, mask_mod, varlen or backward.

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

func.func @backward(%q: tensor<1x2x8x16xf8E4M3FN>, %o: tensor<1x2x8x16xf8E4M3FN>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+1 {{expected f16, bf16 or f32 inputs: the fp8 forward has no backward, got 'f8E4M3FN'}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %o, %lse : tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8xf32> -> tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>
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
