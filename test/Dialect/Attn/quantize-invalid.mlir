// RUN: fa-opt %s -split-input-file -verify-diagnostics

func.func @hadamard_int(%x: tensor<2x8xi32>) {
  // expected-error @+1 {{expected a ranked tensor of f16, bf16 or f32, got 'tensor<2x8xi32>'}}
  %r = attn.hadamard %x : tensor<2x8xi32> -> tensor<2x8xi32>
  return
}

// -----

func.func @hadamard_dynamic(%x: tensor<2x?xf32>) {
  // expected-error @+1 {{expected a static, non-empty last dimension, got ?}}
  %r = attn.hadamard %x : tensor<2x?xf32> -> tensor<2x?xf32>
  return
}

// -----

func.func @hadamard_result(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{expected result element type 'bf16', got 'f32'}}
  %r = attn.hadamard %x : tensor<2x8xbf16> -> tensor<2x8xf32>
  return
}

// -----

func.func @quantize_rank(%x: tensor<8x64x16xbf16>) {
  // expected-error @+1 {{expected input [B, H, N, D] of f16, bf16 or f32, got 'tensor<8x64x16xbf16>'}}
  %r, %s = attn.quantize %x : tensor<8x64x16xbf16> -> tensor<8x64x16xf8E4M3FN>, tensor<1x8xf32>
  return
}

// -----

func.func @quantize_result(%x: tensor<1x8x64x16xbf16>) {
  // expected-error @+1 {{expected result element type 'f8E4M3FN', got 'bf16'}}
  %r, %s = attn.quantize %x : tensor<1x8x64x16xbf16> -> tensor<1x8x64x16xbf16>, tensor<1x8xf32>
  return
}

// -----

func.func @quantize_groups(%x: tensor<1x8x64x16xbf16>) {
  // expected-error @+1 {{expected descale groups G to divide the head count, got H = 8 and G = 3}}
  %r, %s = attn.quantize %x : tensor<1x8x64x16xbf16> -> tensor<1x8x64x16xf8E4M3FN>, tensor<1x3xf32>
  return
}

// -----

func.func @quantize_dynamic_heads(%x: tensor<1x?x64x16xbf16>) {
  // expected-error @+1 {{expected a static head count and descale groups, got H = ? and G = 2}}
  %r, %s = attn.quantize %x : tensor<1x?x64x16xbf16> -> tensor<1x?x64x16xf8E4M3FN>, tensor<1x2xf32>
  return
}

// -----

func.func @quantize_batch(%x: tensor<2x8x64x16xbf16>) {
  // expected-error @+1 {{expected descale shape [2, 2], got [1, 2]}}
  %r, %s = attn.quantize %x : tensor<2x8x64x16xbf16> -> tensor<2x8x64x16xf8E4M3FN>, tensor<1x2xf32>
  return
}

// -----

func.func @quantize_blocks(%x: tensor<1x8x65x16xf32>) {
  // expected-error @+1 {{expected descale (block form) shape [1, 8, 2], got [1, 8, 1]}}
  %r, %s = attn.quantize %x : tensor<1x8x65x16xf32> -> tensor<1x8x65x16xf8E4M3FN>, tensor<1x8x1xf32>
  return
}

// -----

func.func @quantize_descale_type(%x: tensor<1x8x64x16xf32>) {
  // expected-error @+1 {{expected descale element type 'f32', got 'f16'}}
  %r, %s = attn.quantize %x : tensor<1x8x64x16xf32> -> tensor<1x8x64x16xf8E4M3FN>, tensor<1x8xf16>
  return
}

// -----

func.func @quantize_descale_rank(%x: tensor<1x8x64x16xf32>) {
  // expected-error @+1 {{expected descale [B, G] (one factor per group of heads) or [B, H, ceil(N/64)] (per 64-row block), got [8]}}
  %r, %s = attn.quantize %x : tensor<1x8x64x16xf32> -> tensor<1x8x64x16xf8E4M3FN>, tensor<8xf32>
  return
}
