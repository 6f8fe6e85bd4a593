// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" -fa-wgmma-bwd-ws=false | FileCheck %s --enable-var-scope
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-q=32" 2>&1 | FileCheck %s --check-prefix=BQ
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=WS
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-q=128" 2>/dev/null | FileCheck %s --check-prefix=BQ128
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-q=128" 2>&1 >/dev/null | FileCheck %s --check-prefix=BQ128-ERR
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE

// At the tile level the warp-specialised backward's GEMMs are the forward's
// ops: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (K-major wgmma_qk), dV += Pᵀ·dO and
// dK += dSᵀ·Q (register-A wgmma_pv), dQ = dS·K (wgmma_qk mn_major, a
// warpgroup's 64 of D = 128 columns).
// TILE-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a
// TILE: attn_gpu.warp_specialize producer registers 24 {
// TILE: } consumers registers
// TILE-DAG: attn_gpu.wgmma_qk({{[^()]+}}), ({{[^()]+}}) of bf16 : <16x64xf32, accumulator>
// TILE-DAG: attn_gpu.wgmma_pv({{[^()]+}}), ({{[^()]+}}), %{{[^ ]+}} of bf16 : <16x128xf32, accumulator>
// TILE-DAG: attn_gpu.wgmma_qk({{[^()]+}}), ({{[^()]+}}) mn_major of bf16 : <16x64xf32, accumulator>

// The default wgmma backward is warp-specialised (-fa-wgmma-bwd-ws): 384
// threads, the q, k, v, dO tensor maps after fa_bwd's 15 parameters, one CTA
// per SM. Shared memory: K, V, 2 stages of Q and dO, 2 dSᵀ buffers, 2 stages
// of LSE and Delta, 2 f32 dQ tiles: 2·(2·128·128 + 4·64·128 + 2·128·64) +
// 1024 + 2·64·128·4 bytes.
// WS-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a
// WS: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a(
// WS-SAME: %{{[^:]+}}: f32, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %arg19: i64{{.*}}, %arg36: i64) kernel
// WS-SAME: fa.shared_bytes = 230400
// WS-SAME: known_block_size = array<i32: 384, 1, 1>
// WS-SAME: nvvm.minctasm = 1
// mbarriers: K/V full (2 arrivals), full[2] (Q, dO and the 32 lanes of the
// statistics warp), empty[2] and dqFull[2] (256 consumer threads),
// dqEmpty[2] (the dQ writer).
// WS: nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 9>
// WS-COUNT-9: nvgpu.mbarrier.init
// WS: gpu.barrier
// The producer warpgroup: TMA of K and V (two 64-column boxes each), then
// of Q and dO per tile on 32-bit tile counters; LSE and Delta; the writer.
// WS: nvvm.setmaxregister  decrease 24
// WS-COUNT-4: nvgpu.tma.async.load {{.*}} -> memref<1x1x128x64xbf16
// WS: scf.for {{.*}} -> (i32, i32)  : i32
// WS-COUNT-4: nvgpu.tma.async.load {{.*}} -> memref<1x1x64x64xbf16
// WS: scf.for {{.*}} -> (i32, i32)  : i32
// WS: memref.load
// WS: nvgpu.mbarrier.arrive
// WS: scf.for {{.*}} -> (i32, i32)  : i32
// WS: "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], $2;"
// WS-NEXT: "cp.async.bulk.commit_group;"
// WS-NEXT: "cp.async.bulk.wait_group.read 0;"
// WS: nvgpu.mbarrier.arrive
// WS: "cp.async.bulk.wait_group 0;"
// The consumers: the schedule of the 256-thread kernel with one named
// barrier per tile; dQ into the shared tile, fenced, then dqFull.
// WS: nvvm.setmaxregister  increase 240
// WS: %{{.*}}:128 = scf.for
// WS: nvgpu.mbarrier.try_wait.parity
// WS: nvvm.wgmma.fence.aligned
// WS: "bar.sync 1, 256;"
// WS: A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// WS: nvvm.wgmma.wait.group.sync.aligned 0
// WS: nvgpu.mbarrier.arrive
// WS: nvgpu.mbarrier.try_wait.parity
// WS-COUNT-16: vector.store {{.*}} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// WS-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// WS: nvgpu.mbarrier.arrive
// WS-NOT: red.global.add
// WS: gpu.func @fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a(
// fa_bwd_post reads chunk c of row r from chunk c ^ (r mod 8).
// WS: arith.xori
// WS: gpu.return

// With -fa-wgmma-bwd-ws=false: the three kernels and the parameters of the
// mma.sync backward (no tensor maps); 256 threads, two warpgroups of 64 keys.
// Shared memory: K, V, 2 stages of Q and dO, dSᵀ (bf16) and 2 stages of LSE
// and Delta (f32): 2·(2·128·128 + 4·64·128 + 128·64) + 1024 bytes.
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a
// CHECK: gpu.func @fa_bwd_pre_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a(
// CHECK: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a(
// CHECK-SAME: %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{[^:]+}}: f32, %arg15: i64{{.*}}, %arg32: i64) kernel
// CHECK-SAME: fa.shared_bytes = 148480
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// K and V resident, then a loop over query heads × query tiles with dK and
// dV (64 + 64 values per lane) carried in registers.
// CHECK: nvgpu.device_async_copy
// CHECK: %{{.*}}:128 = scf.for
// cp.async data is fenced for the async proxy before the tile barrier.
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: K-major shared-memory wgmma, two groups.
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// Boundary tiles only are masked; P from LSE with exp2.
// CHECK: scf.if
// CHECK: } else {
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// dV += Pᵀ·dO and dK += dSᵀ·Q with A in registers (4 k16 steps each).
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-8: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// dQ = dS·K: dSᵀ through shared memory, both operands MN-major, D/2 columns
// per warpgroup, reduced into dq_accum.
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: red.global.add.v2.f32
// CHECK: gpu.func @fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a(
// BQ: expected block-q = 64, block-kv = 128 and 12 warps for the mma = wgmma backward
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

// D = 64: m64n32 for each warpgroup's half of dQ.
// CHECK-LABEL: gpu.module @fa_bwd_f16_d64_bq64_bkv128_w8_s2_window_l32_r0_wgmma_sm90a
// CHECK: fa.shared_bytes = 82944
// CHECK: %{{.*}}:64 = scf.for
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16
// CHECK: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 32, k = 16>, D[<f32>, <zero>], A[<f16>, <one>, <col>], B[<f16>, <one>, <row>]
func.func @window(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %do: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 0 : i64} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}

// -----

// block-q = 128 at D = 64 (FA3's tile there; --defaults' d64 backward,
// 1.06-1.16x the 64-row kernel on an H100, PERF.md): each tile takes its
// query-tile range again from a fresh %ctaid.x (carried across the loop it
// spilled at the consumers' 240 registers); Sᵀ and dPᵀ are m64n128; queries
// 64-127 of dSᵀ are a second slab of 128 keys (+16384 B); warpgroup w's dQ is the tile's rows 64w..64w+63 with all
// 64 columns: A its slab of dSᵀ, m64n64. Shared memory: K, V 16 KB each, two
// 16 KB stages each of Q and dO, two 32 KB dSᵀ buffers, 2 KB of row
// statistics, two 32 KB dQ tiles.
// BQ128-LABEL: gpu.module @fa_bwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// BQ128: gpu.func @fa_bwd_bwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// BQ128-SAME: fa.shared_bytes = 231424
// BQ128: nvvm.setmaxregister  increase 240
// BQ128: %{{.*}}:64 = scf.for {{.*}} : i32 {
// BQ128: llvm.inline_asm has_side_effects "mov.u32 $0, %ctaid.x;"
// BQ128-COUNT-4: <m = 64, n = 128, k = 16>, D[<f32>, {{<zero>|<one>}}], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// BQ128: nvvm.wgmma.wait.group.sync.aligned 1
// BQ128: nvvm.wgmma.wait.group.sync.aligned 0
// BQ128: %[[SLAB2:.*]] = arith.addi %{{.*}}, %c16384{{.*}} : index
// BQ128: "bar.sync 1, 256;"
// BQ128: %[[DS:.*]] = arith.muli %{{.*}}, %c16384{{.*}} : index
// BQ128: <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// BQ128: nvvm.wgmma.wait.group.sync.aligned 0
// BQ128: arith.muli %{{.*}}, %c64{{.*}} : index
// BQ128-COUNT-16: vector.store {{.*}} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// (The plan refuses 128 rows where the kernel keeps 64: a window.)
// BQ128-ERR: expected block-q = 64, block-kv = 128 and 12 warps for the mma = wgmma backward at D 64, Dv 64
func.func @wide_rows(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %do: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}
