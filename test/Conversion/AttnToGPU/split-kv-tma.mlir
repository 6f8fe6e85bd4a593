// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: not fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 tma=1" 2>&1 | FileCheck %s --check-prefix=NOPW
// RUN: not fa-opt %s -attn-gpu-plan="producer-warp=1 tma=1" 2>&1 | FileCheck %s --check-prefix=NOSPLIT

// The decode kernel whose producer warp loads K and V by TMA (plan tma):
// the split forward takes k_map and v_map (parameters 12 and 13, by value),
// its K and V tiles are 64-column slabs with the 128-byte swizzle (a TMA
// box's layout), and each K/V copy also names its map and the box's head
// and batch coordinates. attn-gpu-warp-specialize turns those copies into
// attn_gpu.tma_copy: thread 64 (the producer warp's first) arms the slot's
// full barrier, which therefore counts one producer, and loads the tile.
// Q's fragments are read from its tile at each key block: the 32 registers
// let three CTAs of three warps share an SM (KernelPlan::capsTmaRegisters).

// TILE-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma(
// TILE-SAME: %arg12: !llvm.ptr, %arg13: !llvm.ptr, %arg14: i64
// TILE-SAME: fa.grid_constant_params = array<i32: 12, 13>
// TILE: %[[HK:.+]] = gpu.block_id  y
// TILE: attn_gpu.shared_tile offset 0 : <32x128xbf16, stride = 128, swizzle>
// TILE: scf.for
// TILE: %[[KT:.+]] = attn_gpu.shared_tile offset 4096 : <64x128xbf16, stride = 64, swizzle>
// TILE-NEXT: attn_gpu.async_copy %arg1[%{{.+}}] rows %[[ROW:.+]] below %{{.+}} stride %{{.+}} tma(%arg12[%[[HK]], %[[B:[0-9]+]]] : !llvm.ptr) into %[[KT]]
// TILE: %[[VT:.+]] = attn_gpu.shared_tile offset 12288 : <64x128xbf16, stride = 64, swizzle>
// TILE-NEXT: attn_gpu.async_copy %arg2[%{{.+}}] rows %{{.+}} below %{{.+}} stride %{{.+}} tma(%arg13[%[[HK]], %[[B]]] : !llvm.ptr) into %[[VT]]

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma(
// CHECK: attn_gpu.ring_init at 73728 slots 2 producers 1 consumers 64
// CHECK-NEXT: attn_gpu.ring_init at 73760 slots 2 producers 1 consumers 64
// CHECK: attn_gpu.producer_warp after 2 warps {
// CHECK: %[[IT:.+]] = arith.subi
// CHECK: %[[SLOT:.+]] = arith.remui %[[IT]]
// CHECK: %[[ROW:.+]] = arith.addi
// CHECK: %[[KS:.+]] = attn_gpu.shared_tile offset 4096 stage %[[SLOT]] of 8192 : <64x128xbf16, stride = 64, swizzle>
// CHECK-NEXT: attn_gpu.ring_acquire %[[IT]] at 73728 slots 2
// CHECK-NEXT: attn_gpu.tma_copy %arg12[%[[ROW]], %{{.+}}, %{{.+}}] into %[[KS]] ring %[[IT]] at 73728 slots 2 thread 64 : !llvm.ptr, <64x128xbf16, stride = 64, swizzle>
// CHECK-NOT: ring_commit
// CHECK: attn_gpu.tma_copy %arg13[{{.+}}] into %{{.+}} ring %[[IT]] at 73760 slots 2 thread 64
// CHECK-NOT: attn_gpu.async_copy
// CHECK: } consumers {
// CHECK: attn_gpu.async_gather
// CHECK: attn_gpu.ring_wait
// CHECK-NEXT: attn_gpu.mma_qk %{{.+}}[%{{.+}}], %{{.+}} : !attn_gpu.shared_tile<32x128xbf16, stride = 128, swizzle>, <64x128xbf16, stride = 64, swizzle>

// The lowering: thread 64 arms the slot with the tile's 16384 bytes and
// issues one box per 64-column slab (columns 0 and 64, 8192 bytes apart).
// NVVM: llvm.inline_asm has_side_effects {{.*}}"mbarrier.init.shared::cta.b64 [$0], 1;"
// NVVM: arith.cmpi eq, %{{.+}}, %c64
// NVVM: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// NVVM: "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];", "r,l,r,r,r,r,r,~{memory}"
// NVVM: "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];", "r,l,r,r,r,r,r,~{memory}"
// NVVM-NOT: cp.async.mbarrier.arrive.noinc
// The consumers' ldmatrix of K reads slab col / 64 at 64 x 64 elements
// apart, rows 64 elements apart inside it.
// NVVM: %[[SLAB:.+]] = arith.divui %{{.+}}, %c64{{.*}} : index
// NVVM: %[[ROW:.+]] = arith.muli %{{.+}}, %c64{{.*}} : index
// NVVM: %[[C4096:.+]] = arith.constant 4096 : index
// NVVM-NEXT: arith.muli %[[SLAB]], %[[C4096]] : index
// NVVM: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = false}

// NOPW: tma needs the split-KV forward with a producer warp on sm_90a, with swizzled tiles (head dims multiples of 64, 2 or 4 stages), got no producer-warp, target sm_90a, D 128, Dv 128, stages 2
// NOSPLIT: tma needs the split-KV forward with a producer warp on sm_90a, with swizzled tiles (head dims multiples of 64, 2 or 4 stages), got no split-kv, target sm_90a

func.func @decode(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}
