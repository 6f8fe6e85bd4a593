// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM

// The fp8 forward's V transpose is a tile op of the producer warpgroup: in
// each ring iteration warps 1-3 wait for V(i) (full barrier stages + slot),
// transpose the slot's V (byte 65536 + 24576·slot: 192 keys of 128 e4m3
// columns) into its Vᵀ slot (byte 114688 + 32768·slot), fence the async
// proxy for wgmma and arrive on Vᵀ's full barrier (2·stages + 5 + slot).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a(
// CHECK: attn_gpu.warp_specialize
// CHECK: scf.for %[[IT:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// CHECK: %[[SLOT:.+]] = arith.remui %[[IT]], %c2{{.*}} : index
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: %[[VT0:.+]] = arith.muli %[[SLOT]], %c32768{{.*}} : index
// CHECK: %[[VT:.+]] = arith.addi %[[VT0]], %c114688{{.*}} : index
// CHECK: %[[V0:.+]] = arith.muli %[[SLOT]], %c24576{{.*}} : index
// CHECK: %[[V:.+]] = arith.addi %[[V0]], %c65536{{.*}} : index
// CHECK: attn_gpu.transpose_fp8_tile %{{.+}}[%[[V]]] to [%[[VT]]] {cols = 128 : i64, rows = 192 : i64} : memref<{{[0-9]+}}xbf16, 3>
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NEXT: arith.constant 9
// CHECK: nvgpu.mbarrier.arrive
// CHECK: } consumers registers 232 {
// CHECK-NOT: attn_gpu.transpose_fp8_tile
// CHECK: gpu.return

// Lowered: per trip 4 units of ldmatrix.trans x4, then their byte permutes
// and stmatrix (HopperFp8.h), one asm statement; no tile op left.
// NVVM-LABEL: gpu.func @fa_fwd_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a(
// NVVM-NOT: attn_gpu.
// NVVM: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// NVVM-SAME: stmatrix.sync.aligned.m8n8.x4.shared.b16
// NVVM-NOT: attn_gpu.
// NVVM: gpu.return
func.func @fp8(%q: tensor<?x?x?x128xf8E4M3FN>, %k: tensor<?x?x?x128xf8E4M3FN>, %v: tensor<?x?x?x128xf8E4M3FN>, %dq: tensor<?x?xf32>, %dk: tensor<?x?xf32>, %dv: tensor<?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {mask = #attn.mask<causal>} : tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
