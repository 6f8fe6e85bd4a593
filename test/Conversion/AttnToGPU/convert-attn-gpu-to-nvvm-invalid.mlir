// RUN: fa-opt %s -split-input-file -verify-diagnostics -convert-attn-gpu-to-nvvm

// An attn op left on the way to NVVM is a kernel missing: an error, never
// a silent no-op.
func.func @leftover(%q: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  // expected-error @+1 {{'attn.attention' op was not lowered to GPU kernels (run convert-attn-to-gpu on the tiled form first)}}
  %o, %lse = attn.attention %q, %q, %q : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// The lowering reads the kernel's plan back from its attn.kernel_plan.
module attributes {gpu.container_module} {
  gpu.module @m {
    // expected-error @+1 {{'gpu.func' op expected an 'attn.kernel_plan' on a tile-level kernel}}
    gpu.func @k() kernel {
      attn_gpu.shared_memory 1024 x bf16
      gpu.return
    }
  }
}

// -----

// The plan it resolves from the tile ops' types and mask must be the one
// the kernel is named after.
module attributes {gpu.container_module} {
  gpu.module @m {
    // expected-error @+1 {{'gpu.func' op expected the kernel plan to name kernel fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a, got "fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a"}}
    gpu.func @k(%i: index, %x: f32) kernel attributes {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a", target = "sm_90a", warps = 4 : i64}} {
      attn_gpu.shared_memory 1024 x bf16
      %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
      %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64} : !attn_gpu.key_bounds<left = false, right = false>
      %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      %acc = attn_gpu.fill %x : !attn_gpu.fragment<16x64xf32, accumulator>
      %o = attn_gpu.mma_pv %s, %t, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.fragment<16x64xf32, accumulator>
      gpu.return
    }
  }
}

// -----

// One key loop per kernel: two Q·Kᵀ products are not a forward the
// lowering knows.
module attributes {gpu.container_module} {
  gpu.module @m {
    // expected-error @+1 {{'gpu.func' op expected exactly one 'attn_gpu.mma_qk' in a tile-level kernel, got 2}}
    gpu.func @k(%i: index) kernel attributes {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} {
      %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
      %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      %s2 = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      gpu.return
    }
  }
}

// -----

// A packed-GQA plan without the packed rows would store each row at the
// wrong (head, query).
module attributes {gpu.container_module} {
  gpu.module @m {
    // expected-error @+1 {{'gpu.func' op expected one 'attn_gpu.packed_rows' for a plan with pack_gqa}}
    gpu.func @k(%i: index, %x: f32) kernel attributes {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", pack_gqa, split_kv, stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_packgqa_splitkv", target = "sm_90a", warps = 4 : i64}} {
      attn_gpu.shared_memory 1024 x bf16
      %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
      %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64} : !attn_gpu.key_bounds<left = false, right = false>
      %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      %acc = attn_gpu.fill %x : !attn_gpu.fragment<16x64xf32, accumulator>
      %o = attn_gpu.mma_pv %s, %t, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.fragment<16x64xf32, accumulator>
      gpu.return
    }
  }
}

// -----

// Key bounds that claim a mask_mod the kernel does not have (or miss one
// it has) would lower to edges of the wrong plan.
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%i: index, %x: f32) kernel attributes {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} {
      attn_gpu.shared_memory 1024 x bf16
      %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
      // expected-error @+1 {{'attn_gpu.key_bounds' op expected mask_mod on the key bounds exactly when the kernel has an 'attn_gpu.mask_mod'}}
      %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64, mask_mod} : !attn_gpu.key_bounds<left = false, right = true>
      %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      %acc = attn_gpu.fill %x : !attn_gpu.fragment<16x64xf32, accumulator>
      %o = attn_gpu.mma_pv %s, %t, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.fragment<16x64xf32, accumulator>
      gpu.return
    }
  }
}

// -----

// A backward kernel (it reduces dQ) has one whole-tile test of Sᵀ: the
// lowering reads the mask's band from it.
module attributes {gpu.container_module} {
  gpu.module @m {
    // expected-error @+1 {{'gpu.func' op expected exactly one 'attn_gpu.transposed_bounds' in a tile-level kernel, got 0}}
    gpu.func @k(%i: index) kernel attributes {attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 1 : i64, tag = "bwd_bf16_d128_bq64_bkv128_w8_s1_none_sm90a", target = "sm_90a", warps = 8 : i64}} {
      %ds = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<128x64xbf16, stride = 72>
      %k = attn_gpu.shared_tile offset 9216 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
      attn_gpu.reduce_dq %ds, %k into %i[%i] rows %i below %i {columns = 128 : i64, row_elements = 128 : i64} : !attn_gpu.shared_tile<128x64xbf16, stride = 72>, !attn_gpu.shared_tile<128x128xbf16, stride = 136>
      gpu.return
    }
  }
}

// -----

// A wgmma backward's Sᵀ ops lower with the lane ids its code derived from
// its thread id before them (in scope at the op); without any, an error.
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%i: index, %d: i64) kernel attributes {attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, mma = "wgmma", stages = 2 : i64, tag = "bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a", target = "sm_90a", warps = 12 : i64}} {
      %s = attn_gpu.wgmma_qk(%d, %d, %d, %d), (%d, %d, %d, %d) of bf16 : <16x64xf32, accumulator>
      // expected-error @+1 {{'attn_gpu.transposed_bounds' op expected lane ids derived before it from the kernel's thread id (KernelBuilder::setupThreadIds)}}
      %q, %in = attn_gpu.transposed_bounds at [%i, %i] of [%i, %i] block_index %i {block_keys = 64 : i64, block_queries = 64 : i64}
      gpu.return
    }
  }
}

// -----

// A query-anchored score_mod (attn-gpu-anchor-score-mod) must be one whose
// q_idx enters as an added term: anchoring tanh(s) would be a wrong answer.
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%i: index, %x: f32) kernel attributes {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} {
      attn_gpu.shared_memory 1024 x bf16
      %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
      %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64} : !attn_gpu.key_bounds<left = false, right = false>
      %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
      // expected-error @+1 {{'attn_gpu.score_mod' op is query_anchored, but q_idx does not enter its score_mod as an added term}}
      %m = attn_gpu.score_mod %s scale %x at [%i, %i, %i] of [%i, %i] row %i key %i {query_anchored} : !attn_gpu.fragment<16x64xf32, accumulator> {
      ^bb0(%y: f32, %bb: index, %h: index, %qi: index, %kv: index):
        %r = math.tanh %y : f32
        attn_gpu.yield %r : f32
      }
      %acc = attn_gpu.fill %x : !attn_gpu.fragment<16x64xf32, accumulator>
      %o = attn_gpu.mma_pv %m, %t, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.fragment<16x64xf32, accumulator>
      gpu.return
    }
  }
}
