// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM --enable-var-scope

// The paged decode kernel whose producer warp loads K and V by TMA: the
// maps are the pools' (columns, page rows, heads, pages), so a K/V copy
// names its map and the head alone; the page comes through the table.
// Paged, the kernel runs two CTAs per SM with Q in registers (no
// nvvm.maxnreg: at 168 it would spill).
// TILE-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_paged_pw_tma(
// TILE-SAME: %arg12: !llvm.ptr, %arg13: !llvm.ptr, %arg14: i64
// TILE-SAME: %[[PT:arg23]]: !llvm.ptr<1>
// TILE-SAME: fa.grid_constant_params = array<i32: 12, 13>
// TILE-NOT: nvvm.maxnreg
// TILE: %[[HK:.+]] = gpu.block_id  y
// TILE: scf.for
// TILE: attn_gpu.async_copy %arg1[%{{.+}}] rows %{{.+}} below %[[KEYS:.+]] stride %{{.+}} paged(%[[PT]][%{{.+}}, %{{.+}}, %{{.+}}] : !llvm.ptr<1>) tma(%arg12[%[[HK]]] : !llvm.ptr) into %{{.+}} : {{.+}}, <64x128xbf16, stride = 64, swizzle>
// TILE: attn_gpu.async_copy %arg2[%{{.+}}] rows %{{.+}} below %[[KEYS]] stride %{{.+}} paged(%[[PT]][%{{.+}}, %{{.+}}, %{{.+}}] : !llvm.ptr<1>) tma(%arg13[%[[HK]]] : !llvm.ptr) into

// attn-gpu-warp-specialize: the producer walks each paged tile's pages
// (attn_gpu.page_walk: a page and an offset per 16-key group) before it
// waits for the tile's slot, so the table's latency overlaps the wait. A
// tile whose 64 keys lie below the sequence's count is the TMA copy at the
// walked pages; the tile that ends past it (a page's later rows are stale)
// is the producer warp's zero-filled cp.async gather, after which thread 64
// arrives: the ring counts one producer either way.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_paged_pw_tma(
// CHECK: attn_gpu.ring_init at 73728 slots 2 producers 1 consumers 64
// CHECK: attn_gpu.producer_warp after 2 warps {
// CHECK: %[[KS:.+]] = attn_gpu.shared_tile offset 4096 stage %{{.+}} of 8192 : <64x128xbf16, stride = 64, swizzle>
// CHECK-NEXT: %[[KW:.+]]:8 = attn_gpu.page_walk %arg23[%{{.+}}, %{{.+}}, %{{.+}}] rows %{{.+}} below %[[KEYS:.+]] groups 4 : !llvm.ptr<1> -> i32, i32, i32, i32, i32, i32, i32, i32
// CHECK: attn_gpu.page_walk
// CHECK-NEXT: attn_gpu.ring_acquire %[[IT:.+]] at 73728 slots 2
// CHECK-NEXT: %[[C64:.+]] = arith.constant 64 : index
// CHECK-NEXT: %[[END:.+]] = arith.addi %[[ROW:.+]], %[[C64]] : index
// CHECK-NEXT: %[[WHOLE:.+]] = arith.cmpi ule, %[[END]], %[[KEYS]] : index
// CHECK-NEXT: scf.if %[[WHOLE]] {
// CHECK-NEXT: attn_gpu.tma_copy %arg12[%[[ROW]], %{{.+}}] pages(%[[KW]]#0, %[[KW]]#1, %[[KW]]#2, %[[KW]]#3, %[[KW]]#4, %[[KW]]#5, %[[KW]]#6, %[[KW]]#7) into %[[KS]] ring %[[IT]] at 73728 slots 2 thread 64
// CHECK-NEXT: } else {
// CHECK-NEXT: attn_gpu.async_copy %arg1[%{{.+}}] rows %[[ROW]] below %[[KEYS]] stride %{{.+}} paged(%arg23[{{.+}}] : !llvm.ptr<1>) into %[[KS]] threads 64 to 96 :
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: attn_gpu.ring_arrive %[[IT]] at 73728 slots 2 thread 64
// CHECK-NEXT: }
// CHECK: attn_gpu.ring_acquire %[[IT]] at 73760 slots 2
// CHECK: attn_gpu.tma_copy %arg13[{{.+}}] pages(
// CHECK: attn_gpu.ring_arrive %[[IT]] at 73760 slots 2 thread 64
// CHECK: } consumers {

// The lowering: the walk finds the first 16-key group's table slot and
// offset by one i32 division, steps to the next groups (wrapping into the
// next slot at the page's end) and loads the four pages, clamped into [0,
// num_pages); then the slot's wait, and thread 64 arms the slot with the
// tile's 16384 bytes and issues one box per group and slab: (64 * slab,
// offset, head, page).
// NVVM-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_paged_pw_tma(
// NVVM: %[[SLOT:.+]] = arith.divui %[[KEY:.+]], %[[SIZE:.+]] : i32
// NVVM-NEXT: %[[OFF:.+]] = arith.remui %[[KEY]], %[[SIZE]] : i32
// NVVM: llvm.load %{{.+}} invariant {{.*}}: !llvm.ptr<1> -> i32
// NVVM: arith.maxsi
// NVVM: %[[PAGE0:.+]] = arith.minsi
// NVVM: %[[OFF1:.+]] = arith.addi %[[OFF]], %c16_i32
// NVVM-NEXT: %[[WRAP:.+]] = arith.cmpi uge, %[[OFF1]], %[[SIZE]] : i32
// NVVM-NEXT: %[[BACK:.+]] = arith.subi %[[OFF1]], %[[SIZE]] : i32
// NVVM-NEXT: arith.select %[[WRAP]], %[[BACK]], %[[OFF1]] : i32
// NVVM-NEXT: arith.extui %[[WRAP]] : i1 to i32
// NVVM-COUNT-3: llvm.load %{{.+}} invariant {{.*}}: !llvm.ptr<1> -> i32
// NVVM: mbarrier.try_wait.parity
// NVVM: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// NVVM: "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];", "r,l,r,r,r,r,r,~{memory}" %{{.+}}, %{{.+}}, %c0_i32{{.*}}, %[[OFF]], %{{.+}}, %[[PAGE0]], %{{.+}}
// NVVM-COUNT-7: cp.async.bulk.tensor.4d
// The tail: the warp's copies waited for, its barrier, then one arrival.
// NVVM: "bar.warp.sync -1;"
// NVVM: arith.cmpi eq, %{{.+}}, %c64
// NVVM: "mbarrier.arrive.shared::cta.b64 _, [$0];"

func.func @paged(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x?x8x128xbf16>, %v: tensor<?x?x8x128xbf16>, %pt: tensor<?x?xi32>, %n: tensor<?xi32>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v paged(%pt, %n : tensor<?x?xi32>, tensor<?xi32>) : tensor<?x32x?x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}
