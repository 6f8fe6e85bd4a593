// RUN: fa-opt %s -split-input-file -verify-diagnostics

// attn.rotary: X [B, N, H, D], cos and sin [max_pos, R/2] of f32 or X's type
// with 2 <= R <= D, start i32 [B].

func.func @rotary_dim_too_large(%x: tensor<2x3x4x64xbf16>, %c: tensor<16x40xf32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected rotary_dim (2 x cos columns) in [2, head_dim], got 80 and head_dim 64}}
  %r = attn.rotary %x, %c, %c at %n : tensor<2x3x4x64xbf16>, tensor<16x40xf32>, tensor<16x40xf32>, tensor<2xi32> -> tensor<2x3x4x64xbf16>
  return
}

// -----

func.func @rotary_sin_shape(%x: tensor<2x3x4x64xbf16>, %c: tensor<16x16xf32>, %s: tensor<8x16xf32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected sin shape [16, 16], got [8, 16]}}
  %r = attn.rotary %x, %c, %s at %n : tensor<2x3x4x64xbf16>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<2xi32> -> tensor<2x3x4x64xbf16>
  return
}

// -----

func.func @rotary_table_type(%x: tensor<2x3x4x64xbf16>, %c: tensor<16x16xf16>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected cos element type f32 or 'bf16', got 'f16'}}
  %r = attn.rotary %x, %c, %c at %n : tensor<2x3x4x64xbf16>, tensor<16x16xf16>, tensor<16x16xf16>, tensor<2xi32> -> tensor<2x3x4x64xbf16>
  return
}

// -----

func.func @rotary_start(%x: tensor<2x3x4x64xbf16>, %c: tensor<16x16xf32>, %n: tensor<3xi32>) {
  // expected-error @+1 {{expected start shape [2], got [3]}}
  %r = attn.rotary %x, %c, %c at %n : tensor<2x3x4x64xbf16>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<3xi32> -> tensor<2x3x4x64xbf16>
  return
}

// -----

func.func @rotary_no_positions(%x: tensor<2x3x4x64xbf16>, %c: tensor<0x16xf32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected cos and sin to hold at least one position, got 0}}
  %r = attn.rotary %x, %c, %c at %n : tensor<2x3x4x64xbf16>, tensor<0x16xf32>, tensor<0x16xf32>, tensor<2xi32> -> tensor<2x3x4x64xbf16>
  return
}

// -----

// attn.kv_append: new rows [B, Nnew, Hkv, D] into caches of the same heads,
// head dim and element type.

func.func @append_heads(%k: tensor<2x3x4x64xbf16>, %kc: tensor<2x32x2x64xbf16>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected key rows of the cache's [kv_heads, head_dim] [2, 64], got [4, 64]}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n : tensor<2x3x4x64xbf16>, tensor<2x3x4x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2xi32> -> tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>
  return
}

// -----

func.func @append_cache_type(%k: tensor<2x3x2x64xbf16>, %kc: tensor<2x32x2x64xf16>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected key cache element type 'bf16', got 'f16'}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n : tensor<2x3x2x64xbf16>, tensor<2x3x2x64xbf16>, tensor<2x32x2x64xf16>, tensor<2x32x2x64xf16>, tensor<2xi32> -> tensor<2x32x2x64xf16>, tensor<2x32x2x64xf16>
  return
}

// -----

func.func @append_batch(%k: tensor<2x3x2x64xbf16>, %kc: tensor<3x32x2x64xbf16>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected a contiguous cache row per sequence, got 3 and batch 2}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n : tensor<2x3x2x64xbf16>, tensor<2x3x2x64xbf16>, tensor<3x32x2x64xbf16>, tensor<3x32x2x64xbf16>, tensor<2xi32> -> tensor<3x32x2x64xbf16>, tensor<3x32x2x64xbf16>
  return
}

// -----

func.func @append_value_tokens(%k: tensor<2x3x2x64xbf16>, %v: tensor<2x4x2x64xbf16>, %kc: tensor<2x32x2x64xbf16>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected key and value of one [batch, new_tokens, kv_heads], got [2, 3, 2, 64] and [2, 4, 2, 64]}}
  %a, %b = attn.kv_append %k, %v into %kc, %kc at %n : tensor<2x3x2x64xbf16>, tensor<2x4x2x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2xi32> -> tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>
  return
}

// -----

func.func @append_seqlens_type(%k: tensor<2x3x2x64xbf16>, %kc: tensor<2x32x2x64xbf16>, %n: tensor<2xi64>) {
  // expected-error @+1 {{expected cache_seqlens element type 'i32', got 'i64'}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n : tensor<2x3x2x64xbf16>, tensor<2x3x2x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2xi64> -> tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>
  return
}

// -----

func.func @append_table_rows(%k: tensor<2x3x2x64xbf16>, %kc: tensor<8x16x2x64xbf16>, %n: tensor<2xi32>, %pt: tensor<3x4xi32>) {
  // expected-error @+1 {{expected a page_table row per sequence, got 3 rows and batch 2}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n paged(%pt : tensor<3x4xi32>) : tensor<2x3x2x64xbf16>, tensor<2x3x2x64xbf16>, tensor<8x16x2x64xbf16>, tensor<8x16x2x64xbf16>, tensor<2xi32> -> tensor<8x16x2x64xbf16>, tensor<8x16x2x64xbf16>
  return
}

// -----

func.func @append_table_type(%k: tensor<2x3x2x64xbf16>, %kc: tensor<8x16x2x64xbf16>, %n: tensor<2xi32>, %pt: tensor<2x4xi64>) {
  // expected-error @+1 {{expected page_table to be a rank-2 tensor of i32 [batch, max_pages], got 'tensor<2x4xi64>'}}
  %a, %b = attn.kv_append %k, %k into %kc, %kc at %n paged(%pt : tensor<2x4xi64>) : tensor<2x3x2x64xbf16>, tensor<2x3x2x64xbf16>, tensor<8x16x2x64xbf16>, tensor<8x16x2x64xbf16>, tensor<2xi32> -> tensor<8x16x2x64xbf16>, tensor<8x16x2x64xbf16>
  return
}
