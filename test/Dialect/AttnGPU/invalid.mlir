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

func.func @bounds_rows_and_block(%i: index, %rows: !attn_gpu.packed_rows) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected packed rows or a block begin, not both}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i rows %rows block %i {block_rows = 64 : i64, mask = #attn.mask<causal>} : !attn_gpu.key_bounds<left = false, right = true>
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

// -----

func.func @staged_partials(%acc: !attn_gpu.fragment<16x64xf32, accumulator>, %r: !attn_gpu.fragment<16x1xf32, rows>, %o: memref<64xf32>, %l: memref<64xf32>, %s: memref<64xbf16, 3>, %i: index) {
  // expected-error @+1 {{'attn_gpu.store_output' op expected a staged store of plain rows with a row stride (the wgmma forward's epilogue)}}
  attn_gpu.store_output %acc, %r, %r to %o[%i], %l[%i] rows %i + %i below %i staged in %s group %i : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<64xf32>, memref<64xf32>, memref<64xbf16, 3>
  return
}

// -----

func.func @packed_rows_block(%i: index) {
  // expected-error @+1 {{'attn_gpu.packed_rows' op expected block_rows in steps of a warp's 16, got 40}}
  %rows, %q0 = attn_gpu.packed_rows key_head %i block %i of [%i, %i, %i, %i] {block_rows = 40 : i64} : !attn_gpu.packed_rows
  return
}

// -----

func.func @gather_elements(%q: memref<1024xf16>, %i: index, %rows: !attn_gpu.packed_rows, %t: !attn_gpu.shared_tile<64x64xbf16, stride = 72>) {
  // expected-error @+1 {{'attn_gpu.async_gather' op expected the source's elements ('f16') to be the tile's ('bf16')}}
  attn_gpu.async_gather %q[%i] strides [%i, %i, %i] rows %rows into %t : memref<1024xf16>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  return
}

// -----

// A mask_mod keeps the rows' upper edges: bounds without them would drop
// the keys past Nk.
func.func @bounds_mask_mod(%i: index) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected bounds with left = 0, right = 1 for mask none with a mask_mod, got '!attn_gpu.key_bounds<left = false, right = false>'}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i {block_rows = 64 : i64, mask_mod} : !attn_gpu.key_bounds<left = false, right = false>
  return
}

// -----

func.func @mask_mod_yield(%s: !attn_gpu.fragment<16x32xf32, accumulator>, %i: index) {
  %m = attn_gpu.mask_mod %s at [%i, %i, %i] of [%i, %i] row %i key %i : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%bb: index, %h: index, %qi: index, %kv: index):
    %x = arith.constant 1.0 : f32
    // expected-error @+1 {{'attn_gpu.yield' op expected a mask_mod to yield 'i1', got 'f32'}}
    attn_gpu.yield %x : f32
  }
  return
}

// -----

func.func @score_mod_yield(%s: !attn_gpu.fragment<16x32xf32, accumulator>, %i: index, %x: f32) {
  %m = attn_gpu.score_mod %s scale %x at [%i, %i, %i] of [%i, %i] row %i key %i : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%y: f32, %bb: index, %h: index, %qi: index, %kv: index):
    %t = arith.constant true
    // expected-error @+1 {{'attn_gpu.yield' op expected a score_mod to yield 'f32', got 'i1'}}
    attn_gpu.yield %t : i1
  }
  return
}

// -----

func.func @mask_mod_args(%s: !attn_gpu.fragment<16x32xf32, accumulator>, %i: index) {
  // expected-error @+1 {{'attn_gpu.mask_mod' op expected (index, index, index, index) leading mask_mod arguments}}
  %m = attn_gpu.mask_mod %s at [%i, %i, %i] of [%i, %i] row %i key %i : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%y: f32, %bb: index, %h: index, %qi: index):
    %t = arith.constant true
    attn_gpu.yield %t : i1
  }
  return
}

// -----

// Packed rows land in a split's f32 partials, rows as LSE's.
func.func @packed_store_stride(%acc: !attn_gpu.fragment<16x64xf32, accumulator>, %r: !attn_gpu.fragment<16x1xf32, rows>, %o: memref<1024xf32>, %lse: memref<64xf32>, %i: index, %rows: !attn_gpu.packed_rows) {
  // expected-error @+1 {{'attn_gpu.store_output' op expected packed rows to store f32 partial rows, without a row stride}}
  attn_gpu.store_output %acc, %r, %r to %o[%i stride %i], %lse[%i] rows %i + %i below %i packed %rows
      : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<1024xf32>, memref<64xf32>
  return
}

// -----

// A window's sizes come as attributes or as run-time operands, not both.
func.func @window_twice(%i: index) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected window_left and window_right, or window(%left, %right), exactly with a window mask}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i window(%i, %i) {block_rows = 64 : i64, mask = #attn.mask<window>, window_left = 8 : i64, window_right = 0 : i64} : !attn_gpu.key_bounds<left = true, right = true>
  return
}

// -----

func.func @window_one_size(%i: index) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected two run-time window sizes (left, right), got 1}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i window(%i) {block_rows = 64 : i64, mask = #attn.mask<window>} : !attn_gpu.key_bounds<left = true, right = true>
  return
}

// -----

func.func @window_sizes_without_window(%i: index) {
  // expected-error @+1 {{'attn_gpu.key_bounds' op expected window_left and window_right, or window(%left, %right), exactly with a window mask}}
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %i window(%i, %i) {block_rows = 64 : i64, mask = #attn.mask<causal>} : !attn_gpu.key_bounds<left = false, right = true>
  return
}

// -----

func.func @columns_layout() {
  // expected-error @+1 {{expected the columns layout in n8 tiles, got 12 columns}}
  %x = "test.x"() : () -> !attn_gpu.fragment<16x12xf32, columns>
  return
}

// -----

// dS takes the kernel's scale, a score_mod's derivative or prescaled
// probabilities: one of them.
func.func @gradient_factor(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %d: !attn_gpu.fragment<16x64xf32, columns>, %s: f32) {
  // expected-error @+1 {{expected one of the scale, a score_mod's derivative or prescaled probabilities}}
  %ds = attn_gpu.score_gradient %p, %p, %d scale %s derivative %p : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>, !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @gradient_delta(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %d: !attn_gpu.fragment<16x32xf32, columns>, %s: f32) {
  // expected-error @+1 {{expected accumulator scores and a columns Delta of 64 columns, got '!attn_gpu.fragment<16x32xf32, columns>'}}
  %ds = attn_gpu.score_gradient %p, %p, %d scale %s : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x32xf32, columns>
  return
}

// -----

func.func @gradient_factor_none(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %d: !attn_gpu.fragment<16x64xf32, columns>) {
  // expected-error @+1 {{expected one of the scale, a score_mod's derivative or prescaled probabilities}}
  %ds = attn_gpu.score_gradient %p, %p, %d : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

// Delta comes from one place.
func.func @gradient_two_deltas(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %d: !attn_gpu.fragment<16x64xf32, columns>, %stats: memref<30720xf32, 3>, %i: index, %s: f32) {
  // expected-error @+1 {{expected Delta as a fragment or from statistics}}
  %ds = attn_gpu.score_gradient %p, %p, %d delta(%stats[%i] : memref<30720xf32, 3>) scale %s : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

// A scaled Delta is one the statistics warp stored, times the scale.
func.func @gradient_scaled_delta_fragment(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %d: !attn_gpu.fragment<16x64xf32, columns>, %s: f32) {
  // expected-error @+1 {{expected scaled_delta with the scale and Delta from statistics}}
  %ds = attn_gpu.score_gradient %p, %p, %d scale %s {scaled_delta} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

func.func @gradient_scaled_delta_prescaled(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %stats: memref<30720xf32, 3>, %i: index) {
  // expected-error @+1 {{expected scaled_delta with the scale and Delta from statistics}}
  %ds = attn_gpu.score_gradient %p, %p delta(%stats[%i] : memref<30720xf32, 3>) {prescaled, scaled_delta} : !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

// Folded addends are a stage's (the statistics warp's), not a tile's padding.
func.func @probs_folded_beside_tile(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %stats: memref<30720xf32, 3>, %l: f32) {
  %kt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  // expected-error @+1 {{expected folded_lse with statistics at a base}}
  %p, %d = attn_gpu.recompute_probs %s, %stats beside %kt scale %l {folded_lse} : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

// LSE at a base: Delta is read where dS is made.
func.func @probs_delta_at_base(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %stats: memref<30720xf32, 3>, %i: index, %l: f32) {
  // expected-error @+1 {{expected no Delta from statistics at a base (its score_gradient reads it)}}
  %p, %d = attn_gpu.recompute_probs %s, %stats[%i] scale %l : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3> -> !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

func.func @probs_two_stats(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %stats: memref<30720xf32, 3>, %i: index, %l: f32) {
  %kt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  // expected-error @+1 {{expected the statistics at a base or beside a tile}}
  %p, %d = attn_gpu.recompute_probs %s, %stats[%i] beside %kt scale %l : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, columns>
  return
}

// -----

// LSE and Delta live in a fixed tile's row padding: a ring stage moves.
func.func @row_stats_stage(%lse: memref<64xf32>, %i: index) {
  %stats = attn_gpu.shared_f32_view : memref<30720xf32, 3>
  %kt = attn_gpu.shared_tile offset 0 stage %i of 8704 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  // expected-error @+1 {{expected the statistics' tile as an unstaged attn_gpu.shared_tile at an even offset}}
  attn_gpu.async_copy_row_stats %lse, %lse[%i] rows %i below %i into %stats beside %kt {block_rows = 64 : i64} : memref<64xf32>, memref<64xf32>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  return
}

// -----

// 2 · 64 statistics need 32 padding rows; a 16-row tile has 16.
func.func @row_stats_room(%lse: memref<64xf32>, %i: index) {
  %stats = attn_gpu.shared_f32_view : memref<30720xf32, 3>
  %kt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<16x128xbf16, stride = 136>
  // expected-error @+1 {{expected block_rows in steps of 16 whose LSE and Delta fit the padding of the tile's 16 rows, got 64}}
  attn_gpu.async_copy_row_stats %lse, %lse[%i] rows %i below %i into %stats beside %kt {block_rows = 64 : i64} : memref<64xf32>, memref<64xf32>, memref<30720xf32, 3>, !attn_gpu.shared_tile<16x128xbf16, stride = 136>
  return
}

// -----

func.func @slice_width(%p: !attn_gpu.fragment<16x64xf32, accumulator>, %acc: !attn_gpu.fragment<16x192xf32, accumulator>, %i: index) {
  %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x128xbf16, stride = 136>
  // expected-error @+1 {{expected an accumulator of at most 128 columns, got '!attn_gpu.fragment<16x192xf32, accumulator>'}}
  %r = attn_gpu.mma_pv %p, %t columns %i, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x128xbf16, stride = 136>, !attn_gpu.fragment<16x192xf32, accumulator>
  return
}

// -----

func.func @reduce_dq_columns(%i: index) {
  %ds = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<128x64xbf16, stride = 72>
  %k = attn_gpu.shared_tile offset 9216 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  // expected-error @+1 {{expected every column of K without a first_column}}
  attn_gpu.reduce_dq %ds, %k into %i[%i] rows %i below %i {columns = 64 : i64, row_elements = 128 : i64} : !attn_gpu.shared_tile<128x64xbf16, stride = 72>, !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  return
}

// -----

func.func @transposed_bounds_window(%i: index) {
  // expected-error @+1 {{expected window_left and window_right, or window(%left, %right), exactly with a window mask}}
  %q, %in = attn_gpu.transposed_bounds at [%i, %i] of [%i, %i] {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<window>}
  return
}

// -----

func.func @transposed_bounds_queries(%i: index) {
  // expected-error @+1 {{expected block_queries in steps of 8, got 12}}
  %q, %in = attn_gpu.transposed_bounds at [%i, %i] of [%i, %i] block_index %i {block_keys = 64 : i64, block_queries = 12 : i64, mask = #attn.mask<causal>}
  return
}

// -----

gpu.module @roles {
  gpu.func @over_budget() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    // expected-error @+1 {{expected budgets within the 168 registers per thread of 384 threads at entry (producer <= 168 <= consumer, producer + 2 x consumer <= 504), got 32 and 240}}
    attn_gpu.warp_specialize producer registers 32 {
    } consumers registers 240 {
    ^bb0(%c: index):
    }
    gpu.return
  }
}

// -----

gpu.module @roles {
  gpu.func @odd_budget() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    // expected-error @+1 {{expected register budgets that are multiples of 8 in [24, 256], got 236}}
    attn_gpu.warp_specialize producer registers 24 {
    } consumers registers 236 {
    ^bb0(%c: index):
    }
    gpu.return
  }
}

// -----

gpu.module @roles {
  gpu.func @no_block_size() kernel {
    // expected-error @+1 {{expected to lie in a gpu.func with known_block_size (setmaxnreg needs the .maxntid cap)}}
    attn_gpu.warp_specialize producer registers 24 {
    } consumers registers 240 {
    ^bb0(%c: index):
    }
    gpu.return
  }
}

// -----

gpu.module @roles {
  gpu.func @one_group() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    // expected-error @+1 {{expected whole warpgroups and at least two, got 128 threads}}
    attn_gpu.warp_specialize producer registers 24 {
    } consumers registers 240 {
    ^bb0(%c: index):
    }
    gpu.return
  }
}

// -----

gpu.module @roles {
  gpu.func @no_consumer_index() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    // expected-error @+1 {{expected no producer argument and one index argument (the consumer) of the consumers}}
    attn_gpu.warp_specialize producer registers 24 {
    } consumers registers 240 {
    }
    gpu.return
  }
}

// -----

func.func @swizzle_padded() {
  // expected-error @+1 {{expected a swizzled tile's columns to be a multiple of 64 and its stride to be them (rows) or 64 (slabs), got 128 columns, stride 136}}
  %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x128xbf16, stride = 136, swizzle>
  return
}

// -----

func.func @swizzle_narrow() {
  // expected-error @+1 {{expected a swizzled tile's columns to be a multiple of 64 and its stride to be them (rows) or 64 (slabs), got 96 columns, stride 96}}
  %t = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x96xbf16, stride = 96, swizzle>
  return
}

// -----

gpu.module @producer {
  gpu.func @block_size() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    // expected-error @+1 {{expected a known_block_size of 96 threads (2 consumer warps and the producer), got array<i32: 64, 1, 1>}}
    attn_gpu.producer_warp after 2 warps {
    } consumers {
    }
    gpu.return
  }
}

// -----

gpu.module @producer {
  gpu.func @no_consumers() kernel {
    // expected-error @+1 {{expected 1 to 31 consumer warps, got 0}}
    attn_gpu.producer_warp after 0 warps {
    } consumers {
    }
    gpu.return
  }
}

// -----

func.func @ring_misaligned() {
  // expected-error @+1 {{expected the ring's barriers at a non-negative multiple of 8 bytes, got 12}}
  attn_gpu.ring_init at 12 slots 2 producers 32 consumers 64
  return
}

// -----

func.func @ring_no_slots(%i: index) {
  // expected-error @+1 {{expected at least one slot, got 0}}
  attn_gpu.ring_wait %i at 0 slots 0
  return
}

// -----

func.func @ring_no_threads() {
  // expected-error @+1 {{expected producer and consumer thread counts >= 1, got 32 and 0}}
  attn_gpu.ring_init at 0 slots 2 producers 32 consumers 0
  return
}

// -----

func.func @shift_type(%m: !attn_gpu.fragment<16x1xf32, rows>, %d: !attn_gpu.fragment<16x64xf32, accumulator>) {
  // expected-error @+1 {{expected a shift of the max's type '!attn_gpu.fragment<16x1xf32, rows>', got '!attn_gpu.fragment<16x64xf32, accumulator>'}}
  %f:2 = attn_gpu.finalize_softmax %m, %m shift %d : !attn_gpu.fragment<16x64xf32, accumulator> : !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows> -> !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>
  return
}

// -----

func.func @shift_layout(%i: index, %x: f32) {
  // expected-error @+1 {{expected a shift in the rows layout, got '!attn_gpu.fragment<16x64xf32, accumulator>'}}
  %d = attn_gpu.score_mod_shift scale %x at [%i, %i, %i] of [%i, %i] row %i : !attn_gpu.fragment<16x64xf32, accumulator> {
  ^bb0(%s: f32, %bb: index, %h: index, %qi: index, %kv: index):
    attn_gpu.yield %s : f32
  }
  return
}

// -----

func.func @tma_row_swizzle(%map: !llvm.ptr, %i: index) {
  %t = attn_gpu.shared_tile offset 4096 : !attn_gpu.shared_tile<64x128xbf16, stride = 128, swizzle>
  // expected-error @+1 {{expected a TMA copy's tile to be swizzled 64-column slabs (stride = 64, swizzle), got '!attn_gpu.shared_tile<64x128xbf16, stride = 128, swizzle>'}}
  attn_gpu.tma_copy %map[%i, %i, %i] into %t ring %i at 0 slots 2 thread 64 : !llvm.ptr, !attn_gpu.shared_tile<64x128xbf16, stride = 128, swizzle>
  return
}

// -----

func.func @tma_misaligned(%map: !llvm.ptr, %i: index) {
  %t = attn_gpu.shared_tile offset 256 : !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  // expected-error @+1 {{expected a TMA copy's tile and its stages at multiples of 1024 bytes (the 128-byte swizzle's period), got offset 256 and stage 0 elements of 2 bytes}}
  attn_gpu.tma_copy %map[%i, %i, %i] into %t ring %i at 0 slots 2 thread 64 : !llvm.ptr, !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  return
}

// -----

func.func @tma_coords(%map: !llvm.ptr, %i: index) {
  %t = attn_gpu.shared_tile offset 4096 : !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  // expected-error @+1 {{expected the head and batch coordinates after the row (a 4-D map), got 1 coordinates}}
  attn_gpu.tma_copy %map[%i, %i] into %t ring %i at 0 slots 2 thread 64 : !llvm.ptr, !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  return
}

// -----

func.func @tma_copy_paged(%k: memref<?xbf16>, %map: !llvm.ptr, %table: !llvm.ptr, %i: index) {
  %t = attn_gpu.shared_tile offset 4096 : !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  // expected-error @+1 {{expected a TMA-capable copy to give the map's head coordinate (1 operands, got 2)}}
  attn_gpu.async_copy %k[%i] rows %i below %i stride %i paged(%table[%i, %i, %i] : !llvm.ptr) tma(%map[%i, %i] : !llvm.ptr) into %t : memref<?xbf16>, !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  return
}

// -----

func.func @tma_copy_unpaged_one_coord(%k: memref<?xbf16>, %map: !llvm.ptr, %i: index) {
  %t = attn_gpu.shared_tile offset 4096 : !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  // expected-error @+1 {{expected a TMA-capable copy to give the map's head and batch coordinates (2 operands, got 1)}}
  attn_gpu.async_copy %k[%i] rows %i below %i stride %i tma(%map[%i] : !llvm.ptr) into %t : memref<?xbf16>, !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  return
}

// -----

func.func @tma_paged_coords(%map: !llvm.ptr, %i: index, %p: i32) {
  %t = attn_gpu.shared_tile offset 4096 : !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  // expected-error @+1 {{expected a paged TMA copy to give the head coordinate and a page and offset per 16-key group (8 for 64 rows), got 1 coordinates and 2 pages and offsets}}
  attn_gpu.tma_copy %map[%i, %i] pages(%p, %p) into %t ring %i at 0 slots 2 thread 64 : !llvm.ptr, !attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>
  return
}

// -----

func.func @page_walk_results(%table: !llvm.ptr<1>, %i: index) {
  // expected-error @+1 {{expected a page and an offset per group (8 results for 4 groups), got 2}}
  %w:2 = attn_gpu.page_walk %table[%i, %i, %i] rows %i below %i groups 4 : !llvm.ptr<1> -> i32, i32
  return
}

// -----

func.func @ring_arrive_thread(%i: index) {
  // expected-error @+1 {{expected the arriving thread in [0, 1024), got 1024}}
  attn_gpu.ring_arrive %i at 0 slots 2 thread 1024
  return
}

// -----

func.func @wgmma_qk_steps(%d: i64) {
  // expected-error @+1 {{expected one Q and one K descriptor per k step, got 2 and 1}}
  %s = attn_gpu.wgmma_qk (%d, %d), (%d) of bf16 : !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @wgmma_qk_width(%d: i64) {
  // expected-error @+1 {{expected an accumulator of 8 to 256 columns in n8 steps (a wgmma m64nN), got '!attn_gpu.fragment<16x264xf32, accumulator>'}}
  %s = attn_gpu.wgmma_qk (%d), (%d) of bf16 : !attn_gpu.fragment<16x264xf32, accumulator>
  return
}

// -----

func.func @wgmma_qk_type(%d: i64) {
  // expected-error @+1 {{expected bf16, f16 or f8E4M3FN operands, got 'f32'}}
  %s = attn_gpu.wgmma_qk (%d), (%d) of f32 : !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @wgmma_pv_registers(%p: i32, %d: i64, %acc: !attn_gpu.fragment<16x64xf32, accumulator>) {
  // expected-error @+1 {{expected four P registers per V descriptor (k step), got 2 and 1}}
  %o = attn_gpu.wgmma_pv (%p, %p), (%d), %acc of bf16 : !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @wgmma_qk_fp8_mn_major(%d: i64) {
  // expected-error @+1 {{expected K-major e4m3 operands (an 8-bit wgmma has no transpose)}}
  %s = attn_gpu.wgmma_qk (%d), (%d) mn_major of f8E4M3FN : !attn_gpu.fragment<16x64xf32, accumulator>
  return
}

// -----

func.func @online_softmax_lazy(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %scale: f32) {
  // expected-error @+1 {{expected a positive lazy rescale threshold, got 0}}
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %scale {lazy_rescale_log2 = 0.0 : f64} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}

// -----

func.func @transpose_wide_long(%s: memref<64xbf16, 3>, %i: index) {
  // expected-error @+1 {{'attn_gpu.transpose_fp8_tile' op expected a multiple of 64 rows and of 128 columns (more than 128 rows only at 128 columns), got 192 x 256}}
  attn_gpu.transpose_fp8_tile %s[%i] to [%i] {rows = 192, cols = 256} : memref<64xbf16, 3>
  return
}

// -----

func.func @online_softmax_scale_count(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %scale: f32) {
  // expected-error @+1 {{expected 2 scales for 64 columns in blocks of 32, got 1}}
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %scale {scale_block = 32 : i64} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}

// -----

func.func @online_softmax_scale_block(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %scale: f32) {
  // expected-error @+1 {{expected a scale block of a positive multiple of 8 columns, got 12}}
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %scale, %scale, %scale, %scale, %scale, %scale {scale_block = 12 : i64} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}

// -----

func.func @online_softmax_scales(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %scale: f32) {
  // expected-error @+1 {{expected one scale without a scale block, got 2}}
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %scale, %scale : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}
