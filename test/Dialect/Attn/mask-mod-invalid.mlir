// RUN: fa-opt %s -split-input-file -verify-diagnostics

func.func @mask_mod_arg_count(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected mask_mod to take 4 arguments (b, h, q_idx, kv_idx: index), got 5: ('f32', 'index', 'index', 'index', 'index')}}
  %o, %l = attn.attention %q, %k, %v mask_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = arith.constant true
    attn.yield %t : i1
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mask_mod_arg_type(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %d: tensor<8xi32>) {
  // expected-error @+1 {{expected mask_mod argument #4 (mod_arg #0) of type 'tensor<8xi32>', got 'tensor<8xi64>'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%d : tensor<8xi32>) mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: tensor<8xi64>):
    %t = arith.constant true
    attn.yield %t : i1
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mask_mod_yields_f32(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{expected mask_mod to end in attn.yield of one i1, got ('f32')}}
  %o, %l = attn.attention %q, %k, %v mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %t = arith.constant 1.0 : f32
    attn.yield %t : f32
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mask_mod_mod_arg_use(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %d: tensor<8xi32>) {
  // expected-error @+1 {{expected mask_mod's mod_arg #0 to be read by tensor.extract only, got a use by 'tensor.dim'}}
  %o, %l = attn.attention %q, %k, %v mod_args(%d : tensor<8xi32>) mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: tensor<8xi32>):
    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<8xi32>
    %r = arith.cmpi slt, %j, %n : index
    attn.yield %r : i1
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @mask_mod_index_out_of_range(%q: tensor<2x4x8x16xf16>, %k: tensor<2x4x8x16xf16>, %v: tensor<2x4x8x16xf16>, %d: tensor<2x6xi32>) {
  %o, %l = attn.attention %q, %k, %v mod_args(%d : tensor<2x6xi32>) mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: tensor<2x6xi32>):
    // expected-error @+1 {{index #1 is kv_idx, up to 7, outside the captured tensor's dimension of size 6}}
    %dk = tensor.extract %x[%b, %j] : tensor<2x6xi32>
    %z = arith.constant 0 : i32
    %r = arith.cmpi eq, %dk, %z : i32
    attn.yield %r : i1
  } : tensor<2x4x8x16xf16>, tensor<2x4x8x16xf16>, tensor<2x4x8x16xf16> -> tensor<2x4x8x16xf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @mask_mod_with_score_mod_args(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %s: tensor<4xf32>, %d: tensor<8xi32>) {
  // expected-error @+1 {{expected mask_mod to take 6 arguments (b, h, q_idx, kv_idx: index, then one per mod_arg of its type), got 5: ('index', 'index', 'index', 'index', 'tensor<8xi32>')}}
  %o, %l = attn.attention %q, %k, %v mod_args(%s, %d : tensor<4xf32>, tensor<8xi32>) score_mod {
  ^bb0(%x: f32, %b: index, %h: index, %i: index, %j: index, %t: tensor<4xf32>, %u: tensor<8xi32>):
    attn.yield %x : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %u: tensor<8xi32>):
    %t = arith.constant true
    attn.yield %t : i1
  } : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}
