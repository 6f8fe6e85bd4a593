// RUN: not fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:mod=unknown_extent 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:mod=wrong_count 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:mod=static_bound 2>&1 | FileCheck %s --check-prefix=STATIC

// fa.dims binds a mod_arg's extents to problem sizes (docs/ABI.md "mod_args"):
// names it does not know, an entry per dimension, and static extents that
// it would rebind are errors naming the function and the mod_arg.

// NAME: @unknown_extent mod_arg 0: fa.dims[0] must be one of "any", "batch", "heads", "kv_heads", "nq", "nk", "nq+nk-1"
func.func @unknown_extent(%s: f32, %b: index, %h: index, %q: index, %kv: index, %t: tensor<?xf32> {fa.dims = ["seq"]}) -> f32 {
  %x = tensor.extract %t[%h] : tensor<?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}

// COUNT: @wrong_count mod_arg 0: fa.dims has 1 entries for a rank-2 tensor
func.func @wrong_count(%s: f32, %b: index, %h: index, %q: index, %kv: index, %t: tensor<?x?xf32> {fa.dims = ["heads"]}) -> f32 {
  %x = tensor.extract %t[%h, %kv] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}

// STATIC: @static_bound mod_arg 0: dimension 0 is static (16) but fa.dims binds it to heads
func.func @static_bound(%s: f32, %b: index, %h: index, %q: index, %kv: index, %t: tensor<16xf32> {fa.dims = ["heads"]}) -> f32 {
  %x = tensor.extract %t[%h] : tensor<16xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}
