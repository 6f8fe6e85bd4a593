// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan="mma=wgmma"

func.func @d80(%q: tensor<1x2x64x80xbf16>, %k: tensor<1x2x64x80xbf16>, %v: tensor<1x2x64x80xbf16>) -> (tensor<1x2x64x80xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{expected (D, Dv) in {(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)} for mma = wgmma, got D 80 and Dv 80}}
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16> -> tensor<1x2x64x80xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x80xbf16>, tensor<1x2x64xf32>
}

// -----

func.func @backward_d80(%q: tensor<1x2x64x80xbf16>, %k: tensor<1x2x64x80xbf16>, %v: tensor<1x2x64x80xbf16>, %o: tensor<1x2x64x80xbf16>, %do: tensor<1x2x64x80xbf16>, %lse: tensor<1x2x64xf32>) -> (tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>) {
  // expected-error @+1 {{expected (D, Dv) in {(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)} for mma = wgmma, got D 80 and Dv 80}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64xf32> -> tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>, tensor<1x2x64x80xbf16>
}
