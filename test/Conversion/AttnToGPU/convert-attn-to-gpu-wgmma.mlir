// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma stages=3 block-kv=64" | FileCheck %s --check-prefix=OPT
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma target=sm_80" 2>&1 | FileCheck %s --check-prefix=SM80
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=ROLES

// The wgmma forward keeps the ABI parameters and appends the tensor-map
// pointers of Q, K and V; 384 threads; Q and a 2-stage K/V ring unpadded in
// shared memory (128 B swizzle): 128×128 + 2 × 2 × 128×128 elements.
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// CHECK-SAME: %{{.*}}: f32, %[[QMAP:[^:]+]]: !llvm.ptr, %[[KMAP:[^:]+]]: !llvm.ptr, %[[VMAP:[^:]+]]: !llvm.ptr, {{.*}}: i64) kernel
// CHECK-SAME: fa.grid_constant_params = array<i32: 11, 12, 13>
// CHECK-SAME: fa.shared_bytes = 163840
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK: builtin.unrealized_conversion_cast %[[QMAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x1x128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>
// CHECK: nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 9>
// CHECK: nvgpu.mbarrier.init
// CHECK: gpu.barrier
// Producer: fewer registers, Q once, then K and V into the ring.
// CHECK: nvvm.setmaxregister decrease 24
// CHECK: llvm.inline_asm has_side_effects "prefetch.tensormap [$0];", "l" %[[QMAP]]
// CHECK: nvgpu.mbarrier.arrive.expect_tx
// CHECK: nvgpu.tma.async.load
// CHECK: scf.for
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: nvgpu.tma.async.load
// Consumers: more registers, S on shared-memory wgmma, P·V with P in registers.
// CHECK: nvvm.setmaxregister increase 240
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 128, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: scf.for
// CHECK: nvvm.wgmma.mma_async
// CHECK: llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: nvgpu.mbarrier.arrive
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// OPT: gpu.module @fa_fwd_bf16_d128_bq128_bkv64_w12_s3_causal_wgmma_sm90a
// OPT: fa.shared_bytes = 131072
// OPT: num_barriers = 13
// SM80: expected target sm_90a for mma = wgmma, got sm_80
// Before convert-attn-gpu-to-nvvm the warpgroup roles and their register
// budgets are the tile level's attn_gpu.warp_specialize.
// ROLES: attn_gpu.warp_specialize producer registers 24 {
// ROLES: nvgpu.tma.async.load
// ROLES: } consumers registers 240 {
// ROLES-NEXT: ^bb0(%{{.+}}: index):
// The consumer's GEMMs are tile ops, issued in ping-pong turns: the first
// key tile's S, then in the key loop S(j) and P·V(j-1) in flight together
// (waits for 1, then 0 groups), then the last tile's P·V.
// ROLES: attn_gpu.turn_begin %[[FIRST:[^ ]+]]
// ROLES-NEXT: nvvm.wgmma.fence.aligned
// ROLES-NEXT: %[[S0:.+]] = attn_gpu.wgmma_qk({{.+}}), ({{.+}}) of bf16 : <16x128xf32, accumulator>
// ROLES-NEXT: nvvm.wgmma.commit.group.sync.aligned
// ROLES-NEXT: attn_gpu.turn_end %[[FIRST]]
// ROLES-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// ROLES: builtin.unrealized_conversion_cast %[[S0]] : !attn_gpu.fragment<16x128xf32, accumulator> to f32,
// ROLES: scf.for
// ROLES: attn_gpu.turn_begin %[[FIRST]]
// ROLES-NEXT: nvvm.wgmma.fence.aligned
// ROLES-NEXT: %[[S:.+]] = attn_gpu.wgmma_qk({{.+}}) of bf16 : <16x128xf32, accumulator>
// ROLES-NEXT: nvvm.wgmma.commit.group.sync.aligned
// ROLES: attn_gpu.wgmma_pv({{.+}}), ({{[^,]+}}, {{[^,]+}}, {{[^,]+}}, {{[^,]+}}, {{[^,]+}}, {{[^,]+}}, {{[^,]+}}, {{[^,]+}}), %{{.+}} of bf16 : <16x128xf32, accumulator>
// ROLES: nvvm.wgmma.commit.group.sync.aligned
// ROLES-NEXT: attn_gpu.turn_end %[[FIRST]]
// ROLES-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// ROLES: builtin.unrealized_conversion_cast %[[S]] : !attn_gpu.fragment<16x128xf32, accumulator> to f32,
// The softmax step is the mma.sync forward's online_softmax, on a unit
// accumulator whose update is each row's rescale factor for O.
// ROLES: %[[UNIT:.+]] = attn_gpu.fill %{{.+}} : <16x8xf32, accumulator>
// ROLES: attn_gpu.online_softmax %{{.+}}, %{{.+}}, %{{.+}}, %[[UNIT]] scale %{{.+}} : <16x128xf32, accumulator>, <16x1xf32, rows>, <16x1xf32, rows>, <16x8xf32, accumulator>
// ROLES: nvvm.wgmma.wait.group.sync.aligned 0
// ROLES: attn_gpu.turn_begin %[[FIRST]]
// ROLES-NEXT: nvvm.wgmma.fence.aligned
// ROLES: attn_gpu.wgmma_pv
// ROLES: attn_gpu.turn_end %[[FIRST]]
// ROLES-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// ROLES: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} : <16x1xf32, rows>, <16x1xf32, rows> -> <16x1xf32, rows>, <16x1xf32, rows>
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
