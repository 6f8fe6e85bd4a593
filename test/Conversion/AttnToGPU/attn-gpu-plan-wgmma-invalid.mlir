// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan="mma=wgmma"

func.func @d96(%q: tensor<1x2x64x96xbf16>, %k: tensor<1x2x64x96xbf16>, %v: tensor<1x2x64x96xbf16>) -> (tensor<1x2x64x96xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{expected D = Dv in {64, 128} for mma = wgmma, got D 96 and Dv 96}}
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16> -> tensor<1x2x64x96xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x96xbf16>, tensor<1x2x64xf32>
}

// -----

func.func @backward_d96(%q: tensor<1x2x64x96xbf16>, %k: tensor<1x2x64x96xbf16>, %v: tensor<1x2x64x96xbf16>, %o: tensor<1x2x64x96xbf16>, %do: tensor<1x2x64x96xbf16>, %lse: tensor<1x2x64xf32>) -> (tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>) {
  // expected-error @+1 {{expected D = Dv in {64, 128} for mma = wgmma, got D 96 and Dv 96}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64xf32> -> tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>, tensor<1x2x64x96xbf16>
}
