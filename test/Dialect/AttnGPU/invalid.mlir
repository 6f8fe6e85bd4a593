// RUN: fa-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect

func.func @fragment_rows() {
  // expected-error @+1 {{expected a warp's 16 rows, got 32}}
  %x = "test.x"() : () -> !attn_gpu.fragment<32x64xf32, accumulator>
  return
}

// -----

func.func @operand_a_steps() {
  // expected-error @+1 {{expected operand_a columns in k16 steps, got 72}}
  %x = "test.x"() : () -> !attn_gpu.fragment<16x72xbf16, operand_a>
  return
}

// -----

func.func @tile_stride() {
  // expected-error @+1 {{expected a row stride of at least the columns padded to 16 (80), got 72}}
  %x = "test.x"() : () -> !attn_gpu.shared_tile<64x72xbf16, stride = 72>
  return
}

// -----

func.func @stage_without_extent(%i: index) {
  // expected-error @+1 {{'attn_gpu.shared_tile' op expected a stage together with its stage_elements}}
  %t = "attn_gpu.shared_tile"(%i) {offset = 0 : i64} : (index) -> !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  return
}

// -----

func.func @bounds_for_mask(%i: index) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected bounds with left = 0, right = 1 for mask causal, got '!attn_gpu.key_bounds<left = false, right = false>'}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64, mask = #attn.mask<causal>} : !attn_gpu.key_bounds<left = false, right = false>
  return
}

// -----

func.func @qk_scores(%i: index) {
  %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  // expected-error @+1 {{'attn_gpu.mma_qk' op expected 16x64xf32 accumulator scores, got '!attn_gpu.fragment<16x32xf32, accumulator>'}}
  %s = attn_gpu.mma_qk %t[%i], %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x32xf32, accumulator>
  return
}

// -----

func.func @qk_query_row(%i: index) {
  %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  // expected-error @+1 {{'attn_gpu.mma_qk' op expected the warp's row of a shared query tile}}
  %s = attn_gpu.mma_qk %t, %t : !attn_gpu.shared_tile<64x64xbf16, stride = 72>, !attn_gpu.shared_tile<64x64xbf16, stride = 72> -> !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @partial_rows(%acc: !attn_gpu.fragment<16x64xf32, accumulator>, %r: !attn_gpu.fragment<16x1xf32, rows>, %o: memref<64xbf16>, %l: memref<64xf32>, %i: index) {
  // expected-error @+1 {{'attn_gpu.store_output' op expected f32 partial rows without a row stride, got 'bf16'}}
  attn_gpu.store_output %acc, %r, %r to %o[%i], %l[%i] rows %i + %i below %i : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<64xbf16>, memref<64xf32>
  return
}
