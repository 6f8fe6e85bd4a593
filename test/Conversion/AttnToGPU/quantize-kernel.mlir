// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma quantize=bf16" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma quantize=f32" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=F32

// attn.quantize (attn.hadamard before it optional) beside an fp8 forward: the
// plan's `quantize` names the inputs' type and the tag; convert-attn-to-gpu
// emits two entries over (ceil(N/64), H, B) CTAs of 256 threads.

// CHECK: gpu.func @fa_fwd_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a_quantbf16(
// CHECK-SAME: quantize = "bf16"

// fa_quantize_amax (per-group descales): a warp's 8 rows one per loop trip,
// 4 columns per lane (128 contiguous columns per warp access), zeros past
// N...
// CHECK-LABEL: gpu.func @fa_quantize_amax_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a_quantbf16(
// CHECK-SAME: %[[X:[a-z0-9]+]]: memref<{{[0-9]+}}xbf16>, %[[X8:[a-z0-9]+]]: memref<{{[0-9]+}}xi8>, %[[AMAX:[a-z0-9]+]]: memref<{{[0-9]+}}xf32>, %[[DESCALE:[a-z0-9]+]]: memref<{{[0-9]+}}xf32>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %[[ROTATE:[a-z0-9]+]]: i32)
// CHECK-SAME: fa.shared_bytes = 64 : i64, known_block_size = array<i32: 256, 1, 1>
// CHECK: gpu.block_id x
// CHECK: gpu.block_id y
// CHECK: gpu.block_id z
// CHECK: scf.for %{{.+}} = %c0 to %c8 step %c1 iter_args(%{{.+}} = %cst{{.*}}) -> (f32)
// CHECK: scf.if
// CHECK: vector.load %[[X]][{{.+}}] {alignment = 8 : i64} : memref<{{[0-9]+}}xbf16>, vector<4xbf16>
// CHECK-COUNT-4: arith.extf
// ... then rotated when the call asks: the butterflies of the
// lane's own columns (bits 0 and 1 of the column), then over the lanes by
// xor shuffles (bits 2-6), then 1/sqrt(128):
// CHECK: arith.cmpi ne, %[[ROTATE]]
// CHECK: scf.if
// CHECK-COUNT-4: arith.addf
// CHECK: gpu.shuffle xor %{{.+}}, %c1_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c16_i32
// CHECK: arith.constant 0.0883883461 : f32
// CHECK-COUNT-4: arith.mulf
// ... the rows' max |x|, over the CTA (shuffles, then the warps through
// shared memory), stored by thread 0 at [b, h, block]:
// CHECK-COUNT-4: math.absf
// CHECK: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[AMAX]][%{{.+}}] : memref<{{[0-9]+}}xf32>
// CHECK: gpu.return

// fa_quantize: the block form's max over the CTA's own rows, or the group's
// maxima (heads_per_factor × blocks of them, 256 at a time); factor = amax /
// 448 (1 for 0) written to the descale by one CTA; then the rows again, x /
// factor to e4m3 four at a time (cvt.rn.satfinite), 4 bytes a lane.
// CHECK-LABEL: gpu.func @fa_quantize_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a_quantbf16(
// CHECK: scf.if %{{.+}} -> (f32) {
// CHECK: scf.for
// CHECK: vector.load
// CHECK: math.absf
// CHECK: gpu.barrier
// CHECK: } else {
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c256
// CHECK: memref.load %{{.+}}[%{{.+}}] : memref<{{[0-9]+}}xf32>
// CHECK: arith.maxnumf
// CHECK: gpu.barrier
// CHECK: arith.cmpf ogt
// CHECK: arith.divf %{{.+}}, %cst{{.*}} : f32
// CHECK: memref.store
// CHECK: scf.for
// CHECK: vector.load
// CHECK-COUNT-4: arith.divf
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: vector.bitcast %{{.+}} : vector<1xi32> to vector<4xi8>
// CHECK: vector.store %{{.+}}, %[[X8Q:[a-z0-9]+]][%{{.+}}] {alignment = 4 : i64} : memref<{{[0-9]+}}xi8>, vector<4xi8>
// CHECK: gpu.return

// f32 inputs: 16-byte loads of 4 floats, no extension.
// F32-LABEL: gpu.func @fa_quantize_amax_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a_quantf32(
// F32: vector.load %{{.+}} {alignment = 16 : i64} : memref<{{[0-9]+}}xf32>, vector<4xf32>
// F32-NOT: arith.extf
// F32: gpu.return
func.func @fp8(%q: tensor<?x?x?x128xf8E4M3FN>, %k: tensor<?x?x?x128xf8E4M3FN>, %v: tensor<?x?x?x128xf8E4M3FN>, %dq: tensor<?x?xf32>, %dk: tensor<?x?xf32>, %dv: tensor<?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) : tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
