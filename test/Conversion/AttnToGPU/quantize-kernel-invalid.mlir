// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan="mma=wgmma quantize=bf16"

// The quantiser rides on the fp8 forward, whose inputs it prepares.
func.func @quantize_bf16(%q: tensor<1x2x64x128xbf16>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{quantize (bf16, f16 or f32 inputs) comes with the fp8 forward, got 'bf16' for a forward of bf16}}
  %o, %lse = attn.attention %q, %q, %q : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
}
