// RUN: fa-opt %s -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm | FileCheck %s --enable-var-scope

// convert-attn-gpu-to-nvvm lowers the tile level in place: the lane ids at
// the kernel's entry, the shared buffer where attn_gpu.shared_memory stood,
// fragments as the f32 / packed values one lane holds (1:N, through the key
// loop's scf.for), the MMAs as ldmatrix + mma.sync m16n8k16, tile copies as
// cp.async groups. D = 64, 64 × 64 tiles: S and acc are 8 n8 tiles × 4 values
// per lane, max and sum 2 (rows g, g + 8).

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a
// CHECK-NOT: attn_gpu.
// CHECK: memref.global "public" @fa_smem_16bf : memref<0xbf16, 3>
// The plan was read back; it does not reach the NVVM kernel.
// CHECK: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a({{.+}}) kernel attributes {fa.shared_bytes = {{.+}}, known_block_size = array<i32: 128, 1, 1>} {
// CHECK-NEXT: %[[TID:.+]] = gpu.thread_id  x
// CHECK: %[[WARP:.+]] = arith.divui %[[TID]], %{{.+}} : index
// CHECK: gpu.block_id  x
// CHECK: memref.get_global @fa_smem_16bf
// The Q tile's copy: 16-byte cp.async chunks, one commit per tile.
// CHECK: nvgpu.device_async_copy
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 2
// CHECK-NEXT: gpu.barrier
// The warp's rows, then its Q fragments (64 / 16 k steps of ldmatrix.x4).
// CHECK: %{{.+}} = arith.muli %[[WARP]], %{{.+}} : index
// CHECK-COUNT-4: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = false}
// (max, sum, acc): 2 + 2 + 32 f32 values.
// CHECK: %{{.+}}:36 = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args({{.+}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// S = Q·Kᵀ: 4 k steps × 4 n16 pairs of K rows, two n8 MMAs each.
// CHECK: nvvm.cp.async.wait.group 1
// CHECK-COUNT-32: nvvm.mma.sync A[{{.+}}] B[{{.+}}] C[{{.+}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, {{.+}}shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// The next K tile streams in, then the boundary-tile mask dispatch.
// CHECK: nvgpu.device_async_copy
// CHECK: llvm.inline_asm has_side_effects "mov.u32 $0, $1;"
// CHECK: scf.if
// Row max over the quad, exp2 on the SFU.
// CHECK: gpu.shuffle  xor
// CHECK: llvm.nvvm.ex2.approx.ftz.f
// O += P·V: P packed in registers, V through ldmatrix.trans.
// CHECK: nvvm.cp.async.wait.group 1
// CHECK: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = true}
// CHECK: nvvm.mma.sync
// CHECK: scf.yield {{.+}} : f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
// CHECK: nvvm.cp.async.wait.group 0
// Epilogue: 1/l and LSE, then the valid rows' O pairs and LSE.
// CHECK: scf.if
// CHECK: vector.store
// CHECK: memref.store
// CHECK: gpu.return
func.func @causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
