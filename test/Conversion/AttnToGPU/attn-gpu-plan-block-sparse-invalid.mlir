// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan="mma=wgmma block-sparse=1"

// A block mask is built from a mask_mod: without one there is nothing to
// build it from.
func.func @no_mask_mod(%q: tensor<1x2x64x128xbf16>, %k: tensor<1x2x64x128xbf16>, %v: tensor<1x2x64x128xbf16>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{expected a mask_mod for a block-sparse kernel (its block mask is built from the mask_mod)}}
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
}

// -----

// The mask_mod carries the whole mask: an enum mask beside it is refused.
func.func @causal(%q: tensor<1x2x64x128xbf16>, %k: tensor<1x2x64x128xbf16>, %v: tensor<1x2x64x128xbf16>, %doc: tensor<?x?xi32>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{expected mask = none for a block-sparse kernel (the mask_mod carries the whole mask), got mask = causal}}
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {mask = #attn.mask<causal>} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
}
