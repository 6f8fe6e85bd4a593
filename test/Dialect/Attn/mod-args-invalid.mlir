// RUN: fa-opt %s -split-input-file -verify-diagnostics

func.func @mod_args_without_score_mod(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<4xf32>) {
  // expected-error @+1 {{expected a score_mod or mask_mod to read the 1 mod_args, got none}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<4xf32>) : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mod_arg_element_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<4xf64>) {
  // expected-error @+1 {{expected mod_arg #0 element type f32, f16, bf16, i32 or i64, got 'f64'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<4xf64>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: tensor<4xf64>):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mod_arg_rank0(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<f32>) {
  // expected-error @+1 {{expected mod_arg #0 of rank at least 1, got 'tensor<f32>'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<f32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: tensor<f32>):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mod_arg_missing_block_arg(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<4xf32>) {
  // expected-error @+1 {{expected score_mod to take 6 arguments (score: f32, b, h, q_idx, kv_idx: index, then one per mod_arg of its type), got 5: ('f32', 'index', 'index', 'index', 'index')}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<4xf32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mod_arg_block_arg_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<4xf32>) {
  // expected-error @+1 {{expected score_mod argument #5 (mod_arg #0) of type 'tensor<4xf32>', got 'tensor<8xf32>'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<4xf32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: tensor<8xf32>):
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mod_arg_other_use(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<4xf32>) {
  // expected-error @+1 {{expected mod_arg #0 to be read by tensor.extract only, got a use by 'tensor.dim'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<4xf32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: tensor<4xf32>):
    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<4xf32>
    attn.yield %s : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

// The static bound check covers mod_args: h reaches 3 in a table of 2 rows.
func.func @mod_arg_read_bound(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %t: tensor<2xf32>) {
  %o, %l = attn.attention %q, %k, %v mod_args(%t : tensor<2xf32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: tensor<2xf32>):
    // expected-error @+1 {{index #0 is h, up to 3, outside the captured tensor's dimension of size 2}}
    %e = tensor.extract %x[%h] : tensor<2xf32>
    %r = arith.addf %s, %e : f32
    attn.yield %r : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}
