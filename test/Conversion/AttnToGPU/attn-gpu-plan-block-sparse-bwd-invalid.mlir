// RUN: fa-opt %s -verify-diagnostics -attn-gpu-plan="mma=wgmma block-sparse=1 deterministic=1"

// A deterministic backward orders dQ over the dense band's key blocks.
func.func @deterministic_backward(%q: tensor<1x2x64x128xbf16>, %k: tensor<1x2x64x128xbf16>, %v: tensor<1x2x64x128xbf16>, %o: tensor<1x2x64x128xbf16>, %lse: tensor<1x2x64xf32>, %doc: tensor<?x?xi32>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>) {
  // expected-error @+1 {{expected no deterministic option on a block-sparse}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse mod_args(%doc : tensor<?x?xi32>) mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64xf32> -> tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>
}
