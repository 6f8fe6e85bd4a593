// RUN: fa-opt %s | fa-opt | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -mlir-print-op-generic | fa-opt | FileCheck %s --enable-var-scope

// Every tile op and type round-trips through its custom syntax.

// CHECK-LABEL: func @schedule
func.func @schedule(%q: memref<1024xbf16>, %o: memref<1024xbf16>, %lse: memref<64xf32>,
                    %i: index, %scale: f32, %smem: memref<1024xbf16, 3>) {
  // CHECK: attn_gpu.shared_memory 43520 x bf16
  attn_gpu.shared_memory 43520 x bf16
  // CHECK: %[[Q:.+]] = attn_gpu.shared_tile offset 0 {{.*}}: {{.*}}<64x128xbf16, stride = 136>
  %qt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x128xbf16, stride = 136>
  // CHECK: attn_gpu.shared_tile offset 0 {{.*}}: {{.*}}<64x128xbf16, stride = 128, swizzle>
  %swz = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x128xbf16, stride = 128, swizzle>
  // CHECK: %[[K:.+]] = attn_gpu.shared_tile offset 8704 stage %{{.+}} of 8704 {{.*}}: {{.*}}<64x128xbf16, stride = 136>
  %kt = attn_gpu.shared_tile offset 8704 stage %i of 8704 : !attn_gpu.shared_tile<64x128xbf16, stride = 136>
  // CHECK: attn_gpu.async_copy %{{.+}}[%{{.+}}] rows %{{.+}} below %{{.+}} stride %{{.+}} into %[[Q]]
  attn_gpu.async_copy %q[%i] rows %i below %i stride %i into %qt : memref<1024xbf16>, !attn_gpu.shared_tile<64x128xbf16, stride = 136>
  // CHECK: attn_gpu.async_wait 1
  attn_gpu.async_wait 1
  // CHECK: %[[ROW:.+]] = attn_gpu.warp_row_offset : index
  %row = attn_gpu.warp_row_offset : index
  // CHECK: %[[QF:.+]] = attn_gpu.load_operand_a %[[Q]][%[[ROW]]] {{.*}}: {{.*}}<64x128xbf16, stride = 136> -> {{.*}}<16x128xbf16, operand_a>
  %qf = attn_gpu.load_operand_a %qt[%row] : !attn_gpu.shared_tile<64x128xbf16, stride = 136> -> !attn_gpu.fragment<16x128xbf16, operand_a>
  // CHECK: attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %[[ROW]] {block_rows = 64 : i64, mask = #attn.mask<window>, window_left = 8 : i64, window_right = 0 : i64} {{.*}}: {{.*}}<left = true, right = true>
  %b = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %row {block_rows = 64 : i64, mask = #attn.mask<window>, window_left = 8 : i64, window_right = 0 : i64} : !attn_gpu.key_bounds<left = true, right = true>
  // A window whose sizes are run-time values (a kernel's window parameters).
  // CHECK: attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %[[ROW]] window(%{{.+}}, %{{.+}}) {block_rows = 64 : i64, mask = #attn.mask<window>} {{.*}}: {{.*}}<left = true, right = true>
  %brt = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %row window(%i, %i) {block_rows = 64 : i64, mask = #attn.mask<window>} : !attn_gpu.key_bounds<left = true, right = true>
  // CHECK: attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %[[ROW]] block %{{.+}} window(%{{.+}}, %{{.+}}) {block_rows = 64 : i64, mask = #attn.mask<window>} {{.*}}: {{.*}}<left = true, right = true>
  %bwg = attn_gpu.key_bounds at [%i, %i, %i] of [%i, %i] row %row block %i window(%i, %i) {block_rows = 64 : i64, mask = #attn.mask<window>} : !attn_gpu.key_bounds<left = true, right = true>
  %zero = arith.constant 0.0 : f32
  // CHECK: attn_gpu.fill %{{.+}} {{.*}}: {{.*}}<16x1xf32, rows>
  %m = attn_gpu.fill %zero : !attn_gpu.fragment<16x1xf32, rows>
  %acc = attn_gpu.fill %zero : !attn_gpu.fragment<16x128xf32, accumulator>
  // CHECK: %[[S:.+]] = attn_gpu.mma_qk %[[QF]], %[[K]] {{.*}}: {{.*}}<16x128xbf16, operand_a>, {{.*}}<64x128xbf16, stride = 136> -> {{.*}}<16x64xf32, accumulator>
  %s = attn_gpu.mma_qk %qf, %kt : !attn_gpu.fragment<16x128xbf16, operand_a>, !attn_gpu.shared_tile<64x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: attn_gpu.mma_qk %[[Q]][%[[ROW]]], %[[K]]
  %s2 = attn_gpu.mma_qk %qt[%row], %kt : !attn_gpu.shared_tile<64x128xbf16, stride = 136>, !attn_gpu.shared_tile<64x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: attn_gpu.score_mod %[[S]] scale %{{.+}} at [{{.+}}] of [{{.+}}] row %[[ROW]] key %{{.+}} {{.*}}: {{.*}}<16x64xf32, accumulator> {
  // CHECK: math.tanh
  %sm = attn_gpu.score_mod %s scale %scale at [%i, %i, %i] of [%i, %i] row %row key %i : !attn_gpu.fragment<16x64xf32, accumulator> {
  ^bb0(%x: f32, %bb: index, %h: index, %qi: index, %kv: index):
    %t = math.tanh %x : f32
    attn_gpu.yield %t : f32
  }
  // CHECK: attn_gpu.mask %{{.+}}, %{{.+}} key %{{.+}} {{.*}}: {{.*}}<16x64xf32, accumulator>, {{.*}}<left = true, right = true>
  %mk = attn_gpu.mask %sm, %b key %i : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.key_bounds<left = true, right = true>
  // CHECK: attn_gpu.mask %{{.+}}, %{{.+}} key %{{.+}} {every_element} : {{.*}}<16x64xf32, accumulator>
  %mke = attn_gpu.mask %sm, %b key %i {every_element} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.key_bounds<left = true, right = true>
  // CHECK: %[[P:[^,]+]], %{{.+}}, %{{.+}}, %[[PA:[^,]+]] = attn_gpu.online_softmax
  %p:4 = attn_gpu.online_softmax %mk, %m, %m, %acc scale %scale
      : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x128xf32, accumulator>
      -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x128xf32, accumulator>
  // CHECK: attn_gpu.mma_pv %[[P]], %[[K]], %[[PA]]
  %o2 = attn_gpu.mma_pv %p#0, %kt, %p#3 : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x128xbf16, stride = 136>, !attn_gpu.fragment<16x128xf32, accumulator>
  // CHECK: %[[SHIFT:.+]] = attn_gpu.score_mod_shift scale %{{.+}} at [{{.+}}] of [{{.+}}] row %[[ROW]] : <16x1xf32, rows> {
  %d = attn_gpu.score_mod_shift scale %scale at [%i, %i, %i] of [%i, %i] row %row : !attn_gpu.fragment<16x1xf32, rows> {
  ^bb0(%x: f32, %bb: index, %h: index, %qi: index, %kv: index):
    attn_gpu.yield %x : f32
  }
  // CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} shift %[[SHIFT]] :
  %g:2 = attn_gpu.finalize_softmax %p#1, %p#2 shift %d : !attn_gpu.fragment<16x1xf32, rows> : !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows> -> !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>
  // CHECK: %[[INV:[^,]+]], %[[LSE:[^ ]+]] = attn_gpu.finalize_softmax
  %f:2 = attn_gpu.finalize_softmax %p#1, %p#2 : !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows> -> !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>
  // CHECK: attn_gpu.store_output %{{.+}}, %[[INV]], %[[LSE]] to %{{.+}}[%{{.+}} stride %{{.+}}], %{{.+}}[%{{.+}}] rows %{{.+}} + %[[ROW]] below %{{.+}}
  attn_gpu.store_output %o2, %f#0, %f#1 to %o[%i stride %i], %lse[%i] rows %i + %row below %i
      : !attn_gpu.fragment<16x128xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<1024xbf16>, memref<64xf32>
  // CHECK: attn_gpu.store_output %{{.+}}, %[[INV]], %[[LSE]] to %{{.+}}[%{{.+}} stride %{{.+}}], %{{.+}}[%{{.+}}] rows %{{.+}} + %[[ROW]] below %{{.+}} staged in %{{.+}} group %{{.+}} : {{.+}}, memref<1024xbf16>, memref<64xf32>, memref<1024xbf16, 3>
  attn_gpu.store_output %o2, %f#0, %f#1 to %o[%i stride %i], %lse[%i] rows %i + %row below %i staged in %smem group %i
      : !attn_gpu.fragment<16x128xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<1024xbf16>, memref<64xf32>, memref<1024xbf16, 3>
  // CHECK: attn_gpu.transpose_fp8_tile %{{.+}}[%{{.+}}] to [%{{.+}}] {cols = 256 : i64, rows = 64 : i64} : memref<1024xbf16, 3>
  attn_gpu.transpose_fp8_tile %smem[%i] to [%i] {rows = 64, cols = 256} : memref<1024xbf16, 3>
  return
}

// Packed GQA: the rows' (head, query) mapping is a value the ops that need
// a row's position take; mask_mod is a region like score_mod's, yielding i1.
// CHECK-LABEL: func @packed
func.func @packed(%q: memref<1024xbf16>, %o: memref<1024xf32>, %lse: memref<64xf32>,
                  %i: index, %doc: tensor<?x?xi32>) {
  // CHECK: %[[ROWS:[^,]+]], %[[Q0:[^ ]+]] = attn_gpu.packed_rows key_head %{{.+}} block %{{.+}} of [%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] {block_rows = 64 : i64} : !attn_gpu.packed_rows
  %rows, %q0 = attn_gpu.packed_rows key_head %i block %i of [%i, %i, %i, %i] {block_rows = 64 : i64} : !attn_gpu.packed_rows
  %qt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  // CHECK: attn_gpu.async_gather %{{.+}}[%{{.+}}] strides [%{{.+}}, %{{.+}}, %{{.+}}] rows %[[ROWS]] into %{{.+}} : memref<1024xbf16>, {{.*}}<64x64xbf16, stride = 72>
  attn_gpu.async_gather %q[%i] strides [%i, %i, %i] rows %rows into %qt : memref<1024xbf16>, !attn_gpu.shared_tile<64x64xbf16, stride = 72>
  // CHECK: attn_gpu.key_bounds at [%{{.+}}, %{{.+}}, %[[Q0]]] of [%{{.+}}, %{{.+}}] row %{{.+}} rows %[[ROWS]] {block_rows = 64 : i64, mask = #attn.mask<causal>, mask_mod} : <left = false, right = true>
  %b = attn_gpu.key_bounds at [%i, %i, %q0] of [%i, %i] row %i rows %rows {block_rows = 64 : i64, mask = #attn.mask<causal>, mask_mod} : !attn_gpu.key_bounds<left = false, right = true>
  %zero = arith.constant 0.0 : f32
  %s = attn_gpu.fill %zero : !attn_gpu.fragment<16x32xf32, accumulator>
  // CHECK: attn_gpu.score_mod %{{.+}} scale %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} rows %[[ROWS]] : <16x32xf32, accumulator> {
  %sm = attn_gpu.score_mod %s scale %zero at [%i, %i, %q0] of [%i, %i] row %i key %i rows %rows : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%x: f32, %bb: index, %h: index, %qi: index, %kv: index):
    attn_gpu.yield %x : f32
  }
  // CHECK: attn_gpu.mask_mod %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} rows %[[ROWS]] : <16x32xf32, accumulator> {
  // CHECK: tensor.extract
  // CHECK: attn_gpu.yield %{{.+}} : i1
  %mm = attn_gpu.mask_mod %sm at [%i, %i, %q0] of [%i, %i] row %i key %i rows %rows : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%bb: index, %h: index, %qi: index, %kv: index, %d: tensor<?x?xi32>):
    %dq = tensor.extract %d[%bb, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %d[%bb, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn_gpu.yield %same : i1
  }
  // CHECK: attn_gpu.mask_mod %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x32xf32, accumulator> {
  %mp = attn_gpu.mask_mod %mm at [%i, %i, %i] of [%i, %i] row %i key %i : !attn_gpu.fragment<16x32xf32, accumulator> {
  ^bb0(%bb: index, %h: index, %qi: index, %kv: index):
    %ok = arith.cmpi ule, %kv, %qi : index
    attn_gpu.yield %ok : i1
  }
  %acc = attn_gpu.fill %zero : !attn_gpu.fragment<16x64xf32, accumulator>
  %r = attn_gpu.fill %zero : !attn_gpu.fragment<16x1xf32, rows>
  // CHECK: attn_gpu.store_output %{{.+}} to %{{.+}}[%{{.+}}], %{{.+}}[%{{.+}}] rows %{{.+}} + %{{.+}} below %{{.+}} packed %[[ROWS]] :
  attn_gpu.store_output %acc, %r, %r to %o[%i], %lse[%i] rows %q0 + %i below %i packed %rows
      : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, memref<1024xf32>, memref<64xf32>
  return
}

// The recompute backward's ops (transposed fragments: keys as rows).
// CHECK-LABEL: func @backward
func.func @backward(%lse: memref<64xf32>, %dq: memref<1024xbf16>, %i: index, %scale: f32) {
  attn_gpu.shared_memory 61440 x bf16
  // CHECK: %[[STATS:.+]] = attn_gpu.shared_f32_view : memref<30720xf32, 3>
  %stats = attn_gpu.shared_f32_view : memref<30720xf32, 3>
  %kt = attn_gpu.shared_tile offset 0 : !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  %qt = attn_gpu.shared_tile offset 34816 : !attn_gpu.shared_tile<64x128xbf16, stride = 136>
  %dst = attn_gpu.shared_tile offset 52224 : !attn_gpu.shared_tile<128x64xbf16, stride = 72>
  // CHECK: attn_gpu.async_copy_row_stats %{{.+}}, %{{.+}}[%{{.+}}] rows %{{.+}} below %{{.+}} into %[[STATS]] beside %{{.+}} {block_rows = 64 : i64}
  attn_gpu.async_copy_row_stats %lse, %lse[%i] rows %i below %i into %stats beside %kt {block_rows = 64 : i64} : memref<64xf32>, memref<64xf32>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  %row = attn_gpu.warp_row_offset : index
  %s = attn_gpu.mma_qk %kt[%row], %qt : !attn_gpu.shared_tile<128x128xbf16, stride = 136>, !attn_gpu.shared_tile<64x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: %{{.+}}, %[[DER:.+]] = attn_gpu.transposed_score_mod %{{.+}} scale %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x64xf32, accumulator> {
  %sm, %der = attn_gpu.transposed_score_mod %s scale %scale at [%i, %i, %i] of [%i, %i] row %row key %i : !attn_gpu.fragment<16x64xf32, accumulator> {
  ^bb0(%x: f32, %bb: index, %h: index, %qi: index, %kv: index):
    attn_gpu.yield %x : f32
  }
  // CHECK: attn_gpu.transposed_mask_mod %{{.+}} at [{{.+}}] of [{{.+}}] row %{{.+}} key %{{.+}} : <16x64xf32, accumulator> {
  %mm = attn_gpu.transposed_mask_mod %sm at [%i, %i, %i] of [%i, %i] row %row key %i : !attn_gpu.fragment<16x64xf32, accumulator> {
  ^bb0(%bb: index, %h: index, %qi: index, %kv: index):
    %ok = arith.cmpi ule, %kv, %qi : index
    attn_gpu.yield %ok : i1
  }
  // CHECK: %[[Q:.+]], %{{.+}} = attn_gpu.transposed_bounds at [%{{.+}}, %{{.+}}] of [%{{.+}}, %{{.+}}] window(%{{.+}}, %{{.+}}) {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<window>}
  %mq, %inside = attn_gpu.transposed_bounds at [%i, %i] of [%i, %i] window(%i, %i) {block_keys = 128 : i64, block_queries = 64 : i64, mask = #attn.mask<window>}
  // A warpgroup's 64 keys of the key block as the whole-tile test's block.
  // CHECK: attn_gpu.transposed_bounds at [%{{.+}}, %{{.+}}] of [%{{.+}}, %{{.+}}] block_index %{{.+}} {block_keys = 64 : i64, block_queries = 64 : i64, mask = #attn.mask<causal>}
  %wq, %winside = attn_gpu.transposed_bounds at [%i, %i] of [%i, %i] block_index %i {block_keys = 64 : i64, block_queries = 64 : i64, mask = #attn.mask<causal>}
  // CHECK: attn_gpu.transposed_mask %{{.+}} at [%{{.+}}, %{{.+}}, %[[Q]], %{{.+}}] of [{{.+}}] row %{{.+}} {opaque_lengths} : <16x64xf32, accumulator>
  %m = attn_gpu.transposed_mask %mm at [%i, %i, %mq, %i] of [%i, %i] row %row {opaque_lengths} : !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: %[[P:.+]], %[[D:.+]] = attn_gpu.recompute_probs %{{.+}}, %[[STATS]] beside %{{.+}} scale %{{.+}} : <16x64xf32, accumulator>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, columns>
  %p, %d = attn_gpu.recompute_probs %m, %stats beside %kt scale %scale : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3>, !attn_gpu.shared_tile<128x128xbf16, stride = 136> -> !attn_gpu.fragment<16x64xf32, columns>
  %zero = arith.constant 0.0 : f32
  %acc = attn_gpu.fill %zero : !attn_gpu.fragment<16x64xf32, accumulator>
  // A column slice of the value tile.
  // CHECK: attn_gpu.mma_pv %[[P]], %{{.+}} columns %{{.+}}, %{{.+}} : <16x64xf32, accumulator>, <64x128xbf16, stride = 136>, <16x64xf32, accumulator>
  %dv = attn_gpu.mma_pv %p, %qt columns %i, %acc : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<64x128xbf16, stride = 136>, !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: attn_gpu.score_gradient %[[P]], %{{.+}}, %[[D]] scale %{{.+}} : <16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
  %ds = attn_gpu.score_gradient %p, %s, %d scale %scale : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>
  // CHECK: attn_gpu.score_gradient %[[P]], %{{.+}}, %[[D]] derivative %[[DER]] : <16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>, !attn_gpu.fragment<16x64xf32, accumulator>
  %ds2 = attn_gpu.score_gradient %p, %s, %d derivative %der : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, columns>, !attn_gpu.fragment<16x64xf32, accumulator>
  // The wgmma backward's statistics at a base (LSE, then Delta at + 64).
  // CHECK: %[[PB:.+]] = attn_gpu.recompute_probs %{{.+}}, %[[STATS]][%{{.+}}] scale %{{.+}} : <16x64xf32, accumulator>, memref<30720xf32, 3>{{$}}
  %pb = attn_gpu.recompute_probs %m, %stats[%i] scale %scale : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3>
  // CHECK: attn_gpu.score_gradient %[[PB]], %{{.+}} delta(%[[STATS]][%{{.+}}] : memref<30720xf32, 3>) scale %{{.+}} : <16x64xf32, accumulator>{{$}}
  %dsb = attn_gpu.score_gradient %pb, %s delta(%stats[%i] : memref<30720xf32, 3>) scale %scale : !attn_gpu.fragment<16x64xf32, accumulator>
  // The statistics warp's folded stage: exponent addends and −Delta·scale.
  // CHECK: %[[PF:.+]] = attn_gpu.recompute_probs %{{.+}}, %[[STATS]][%{{.+}}] scale %{{.+}} {folded_lse} : <16x64xf32, accumulator>, memref<30720xf32, 3>{{$}}
  %pf = attn_gpu.recompute_probs %m, %stats[%i] scale %scale {folded_lse} : !attn_gpu.fragment<16x64xf32, accumulator>, memref<30720xf32, 3>
  // CHECK: attn_gpu.score_gradient %[[PF]], %{{.+}} delta(%[[STATS]][%{{.+}}] : memref<30720xf32, 3>) scale %{{.+}} {scaled_delta} : <16x64xf32, accumulator>{{$}}
  %dsf = attn_gpu.score_gradient %pf, %s delta(%stats[%i] : memref<30720xf32, 3>) scale %scale {scaled_delta} : !attn_gpu.fragment<16x64xf32, accumulator>
  // Probabilities that carry the factor (the split roles' exchanged Pᵀ·scale).
  // CHECK: attn_gpu.score_gradient %[[PB]], %{{.+}} delta(%[[STATS]][%{{.+}}] : memref<30720xf32, 3>) {prescaled} : <16x64xf32, accumulator>{{$}}
  %dsp = attn_gpu.score_gradient %pb, %s delta(%stats[%i] : memref<30720xf32, 3>) {prescaled} : !attn_gpu.fragment<16x64xf32, accumulator>
  // CHECK: attn_gpu.store_tile %{{.+}}, %{{.+}}[%{{.+}}] : <16x64xf32, accumulator>, <128x64xbf16, stride = 72>
  attn_gpu.store_tile %ds, %dst[%row] : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.shared_tile<128x64xbf16, stride = 72>
  // CHECK: attn_gpu.reduce_dq %{{.+}}, %{{.+}} into %{{.+}}[%{{.+}}] rows %{{.+}} below %{{.+}} {columns = 128 : i64, row_elements = 128 : i64}
  attn_gpu.reduce_dq %dst, %kt into %i[%i] rows %i below %i {columns = 128 : i64, row_elements = 128 : i64} : !attn_gpu.shared_tile<128x64xbf16, stride = 72>, !attn_gpu.shared_tile<128x128xbf16, stride = 136>
  // CHECK: attn_gpu.store_accumulator %{{.+}} to %{{.+}}[%{{.+}} stride %{{.+}}] rows %{{.+}} below %{{.+}} {row_elements = 128 : i64} : <16x64xf32, accumulator>, memref<1024xbf16>
  attn_gpu.store_accumulator %dv to %dq[%i stride %i] rows %i below %i {row_elements = 128 : i64} : !attn_gpu.fragment<16x64xf32, accumulator>, memref<1024xbf16>
  return
}

// CHECK-LABEL: gpu.func @roles
// CHECK: attn_gpu.warp_specialize producer registers 24 {
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: } consumers registers 240 {
// CHECK-NEXT: ^bb0(%[[C:.+]]: index):
// CHECK-NEXT: arith.addi %[[C]], %[[C]] : index
gpu.module @roles {
  gpu.func @roles() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    attn_gpu.warp_specialize producer registers 24 {
      gpu.barrier
    } consumers registers 240 {
    ^bb0(%c: index):
      %twice = arith.addi %c, %c : index
    }
    gpu.return
  }
}

// CHECK-LABEL: gpu.func @producer
// CHECK: attn_gpu.ring_init at 256 slots 2 producers 32 consumers 64
// CHECK: attn_gpu.producer_warp after 2 warps {
// CHECK-NEXT: attn_gpu.ring_acquire %{{.+}} at 256 slots 2
// CHECK-NEXT: attn_gpu.ring_commit %{{.+}} at 256 slots 2
// CHECK-NEXT: } consumers {
// CHECK-NEXT: attn_gpu.ring_wait %{{.+}} at 256 slots 2
// CHECK-NEXT: attn_gpu.ring_release %{{.+}} at 256 slots 2
gpu.module @producer {
  gpu.func @producer(%i: index) kernel attributes {known_block_size = array<i32: 96, 1, 1>} {
    attn_gpu.ring_init at 256 slots 2 producers 32 consumers 64
    attn_gpu.producer_warp after 2 warps {
      attn_gpu.ring_acquire %i at 256 slots 2
      attn_gpu.ring_commit %i at 256 slots 2
    } consumers {
      attn_gpu.ring_wait %i at 256 slots 2
      attn_gpu.ring_release %i at 256 slots 2
    }
    gpu.return
  }
}

// The wgmma forward's GEMMs (issued only) and its ping-pong turns.
// CHECK-LABEL: func.func @wgmma
// CHECK: attn_gpu.turn_begin %[[FIRST:.+]]
// CHECK-NEXT: %[[S:.+]] = attn_gpu.wgmma_qk(%[[Q:.+]], %[[Q]]), (%[[K:.+]], %[[K]]) of bf16 : <16x64xf32, accumulator>
// CHECK-NEXT: %{{.+}} = attn_gpu.wgmma_pv(%[[P:.+]], %[[P]], %[[P]], %[[P]]), (%[[K]]), %[[S]] of f8E4M3FN : <16x64xf32, accumulator>
// CHECK-NEXT: %{{.+}} = attn_gpu.wgmma_qk(%[[Q]]), (%[[K]]) mn_major of f16 : <16x32xf32, accumulator>
// CHECK-NEXT: attn_gpu.turn_end %[[FIRST]]
func.func @wgmma(%first: i1, %q: i64, %k: i64, %p: i32) {
  attn_gpu.turn_begin %first
  %s = attn_gpu.wgmma_qk (%q, %q), (%k, %k) of bf16 : !attn_gpu.fragment<16x64xf32, accumulator>
  %o = attn_gpu.wgmma_pv (%p, %p, %p, %p), (%k), %s of f8E4M3FN : !attn_gpu.fragment<16x64xf32, accumulator>
  %dq = attn_gpu.wgmma_qk (%q), (%k) mn_major of f16 : !attn_gpu.fragment<16x32xf32, accumulator>
  attn_gpu.turn_end %first
  return
}

// fp8 block descales: a scale per 64 columns.
// CHECK-LABEL: func.func @block_scaled_softmax
// CHECK: attn_gpu.online_softmax %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} scale %{{.+}}, %{{.+}} {scale_block = 64 : i64}
func.func @block_scaled_softmax(%s: !attn_gpu.fragment<16x128xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %c0: f32, %c1: f32) {
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %c0, %c1 {scale_block = 64 : i64} : !attn_gpu.fragment<16x128xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x128xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}

// The wgmma forward's online softmax: a unit accumulator, a lazy rescale.
// CHECK-LABEL: func.func @lazy_softmax
// CHECK: attn_gpu.online_softmax {{.+}} {lazy_rescale_log2 = 8.000000e+00 : f64}
func.func @lazy_softmax(%s: !attn_gpu.fragment<16x64xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %scale: f32) {
  %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %scale {lazy_rescale_log2 = 8.0 : f64} : !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
  return
}
