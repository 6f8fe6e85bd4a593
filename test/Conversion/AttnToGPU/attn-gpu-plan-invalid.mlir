// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan


// dK and dV accumulate in registers: above D + Dv = 256 the backward splits
// their columns over CTAs in equal slices that are multiples of 8, which
// 248 = 8 · 31 has none of.
func.func @backward_big(%q: tensor<1x2x64x248xbf16>, %k: tensor<1x2x64x248xbf16>, %v: tensor<1x2x64x248xbf16>, %o: tensor<1x2x64x248xbf16>, %do: tensor<1x2x64x248xbf16>, %lse: tensor<1x2x64xf32>) -> (tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>) {
  // expected-error @+1 {{expected D and Dv to split into column slices that are multiples of 8 with D + Dv <= 256 per slice for the backward (dK and dV live in registers), got D 248 and Dv 248}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64xf32> -> tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>, tensor<1x2x64x248xbf16>
}

// -----

// f32 inputs run mma.sync kernels on TF32 tensor cores; the backward exists
// with TF32 products only (the pass's tf32 option).
func.func @f32_backward(%q: tensor<1x2x64x64xf32>, %k: tensor<1x2x64x64xf32>, %v: tensor<1x2x64x64xf32>, %o: tensor<1x2x64x64xf32>, %do: tensor<1x2x64x64xf32>, %lse: tensor<1x2x64xf32>) -> (tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>) {
  // expected-error @+1 {{expected tf32 for an f32 backward (one TF32 product per multiply; the f32-accurate 3xTF32 backward is not built: its dK, dV and split operands spill)}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64xf32> -> tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>
  return %dq, %dk, %dv : tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>, tensor<1x2x64x64xf32>
}

// -----

// Every head dim gets a forward and (D + Dv <= 256 after rounding each up to
// a multiple of 8) a backward; above that the column slices of the split
// backward must be multiples of 8, which 130 has none of.
func.func @odd_head_split(%q: tensor<1x2x64x130xbf16>, %k: tensor<1x2x64x130xbf16>, %v: tensor<1x2x64x130xbf16>, %o: tensor<1x2x64x130xbf16>, %do: tensor<1x2x64x130xbf16>, %lse: tensor<1x2x64xf32>) -> (tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>) {
  // expected-error @+1 {{expected D and Dv to split into column slices that are multiples of 8 with D + Dv <= 256 per slice for the backward (dK and dV live in registers), got D 130 and Dv 130}}
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64xf32> -> tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>, tensor<1x2x64x130xbf16>
}

// -----

// Varlen forwards have a GPU kernel on wgmma only: the mma.sync plan refuses
// them rather than building a dense kernel.
func.func @varlen(%q: tensor<64x4x64xbf16>, %k: tensor<64x4x64xbf16>, %v: tensor<64x4x64xbf16>, %cu: tensor<3xi32>) -> (tensor<64x4x64xbf16>, tensor<4x64xf32>) {
  // expected-error @+1 {{varlen (cu_seqlens) batches have GPU forwards on mma = wgmma only, got mma = mma_sync}}
  %o, %l = attn.attention %q, %k, %v varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>) : tensor<64x4x64xbf16>, tensor<64x4x64xbf16>, tensor<64x4x64xbf16> -> tensor<64x4x64xbf16>, tensor<4x64xf32>
  return %o, %l : tensor<64x4x64xbf16>, tensor<4x64xf32>
}

// -----

// The kernels read the function's arguments: arithmetic on Q before the op
// would vanish with the function, so it is refused.
func.func @scaled_query(%q: tensor<1x2x64x128xbf16>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>) {
  // expected-error @+1 {{'arith.addf' op would be dropped by the GPU path: a function compiled to GPU kernels holds only attn ops, constants, tensor.dim and its return (the kernels read the function's arguments and write its results); move this op to another function}}
  %q2 = arith.addf %q, %q : tensor<1x2x64x128xbf16>
  %o, %lse = attn.attention %q2, %q, %q : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
  return %o, %lse : tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
}

// -----

// ... and so is work on its results.
func.func @negated_lse(%q: tensor<1x2x64x128xbf16>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>) {
  %o, %lse = attn.attention %q, %q, %q : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
  // expected-error @+1 {{'arith.negf' op would be dropped by the GPU path}}
  %n = arith.negf %lse : tensor<1x2x64xf32>
  return %o, %n : tensor<1x2x64x128xbf16>, tensor<1x2x64xf32>
}

// -----

// The fp8 backward's kernel is the wgmma one (sm_90a).
func.func @fp8_backward(%q: tensor<1x2x64x128xf8E4M3FN>, %o: tensor<1x2x64x128xbf16>, %lse: tensor<1x2x64xf32>, %s: tensor<1x2xf32>) -> (tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>) {
  // expected-error @+1 {{expected f8E4M3FN kernels with mma = wgmma on sm_90a, got a backward with mma = mma_sync}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %q, %lse descale(%s, %s, %s, %s : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) : tensor<1x2x64x128xf8E4M3FN>, tensor<1x2x64x128xf8E4M3FN>, tensor<1x2x64x128xf8E4M3FN>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xf8E4M3FN>, tensor<1x2x64xf32> -> tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>
  return %dq, %dk, %dv : tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>, tensor<1x2x64x128xbf16>
}
