// RUN: fa-opt %s -split-input-file -verify-diagnostics -convert-attn-to-gpu

// Nothing on the GPU path starts from the untiled op.
func.func @untiled(%q: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  // expected-error @+1 {{expected the tiled form on the GPU path: run attn-gpu-plan, attn-online-softmax or attn-recompute-backward, and attn-tile first (the fa-attn-to-gpu pipeline)}}
  %o, %lse = attn.attention %q, %q, %q : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// A tile op the planning pass never saw (e.g. tiled for the CPU) is not
// silently left behind.
func.func @unplanned(%q: tensor<1x1x16x64xbf16>, %acc: tensor<1x1x16x64xf32>, %m: tensor<1x1x16xf32>, %i: index)
    -> (tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>) {
  // expected-error @+1 {{expected an 'attn.kernel_plan' attribute (from attn-gpu-plan)}}
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i]
      : tensor<1x1x16x64xbf16>, tensor<1x1x16x64xbf16>, tensor<1x1x16x64xbf16>, tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return %a, %mm, %ll : tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
}

// -----

// A planned tile op outside the plan's query-block loop has no grid to map.
func.func @untiled_planned(%q: tensor<1x1x16x64xbf16>, %acc: tensor<1x1x16x64xf32>, %m: tensor<1x1x16xf32>, %i: index)
    -> (tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>) {
  // expected-error @+1 {{expected to lie in the query-block loop of its kernel plan (from attn-tile or attn-recompute-backward)}}
  %a, %mm, %ll = attn.online_attention %q, %q, %q, %acc, %m, %m at [%i, %i, %i, %i] of [%i, %i]
      {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, target = "sm_90a", warps = 4 : i64}}
      : tensor<1x1x16x64xbf16>, tensor<1x1x16x64xbf16>, tensor<1x1x16x64xbf16>, tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  return %a, %mm, %ll : tensor<1x1x16x64xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
}

// -----

// The quantisation of fp8 inputs has no GPU kernel: the function's other ops
// are not dropped silently with it.
func.func @quantize(%x: tensor<1x2x64x128xbf16>) -> tensor<1x2x64x128xf8E4M3FN> {
  // expected-error @+1 {{has no GPU kernel: quantise (and rotate) Q, K and V before the fp8 kernel, e.g. with fa.quantize_fp8(q, k, v, rotate=...), and pass the fp8 tensors and their descales to it}}
  %x8, %s = attn.quantize %x : tensor<1x2x64x128xbf16> -> tensor<1x2x64x128xf8E4M3FN>, tensor<1x2xf32>
  return %x8 : tensor<1x2x64x128xf8E4M3FN>
}
