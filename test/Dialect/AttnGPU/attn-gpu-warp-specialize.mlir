// RUN: fa-opt %s -attn-gpu-plan="stages=3 producer-warp=1" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="stages=3 producer-warp=1" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize -attn-gpu-pipeline | FileCheck %s --check-prefix=PIPELINE
// RUN: fa-opt %s -attn-gpu-plan="stages=3 producer-warp=1" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize | FileCheck %s --check-prefix=PLAIN
// RUN: not fa-opt %s -attn-gpu-plan="stages=3 producer-warp=1" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm 2>&1 | FileCheck %s --check-prefix=NORINGS

// attn-gpu-warp-specialize on the mma.sync forward's key loop for a plan
// with producer_warp and three stages: K and V become rings of three slots
// (Q | K×3 | V×3, 60928 elements), their mbarriers follow at byte 121856
// (a full and an empty one per slot: 48 bytes a ring), initialised and
// published by a barrier where the roles part: at Q's copy, so the
// producer's first copies overlap it. The kernel gets a fifth warp (160
// threads). The producer runs the key loop copying only, with its lanes;
// the four consumers copy Q and run the loop without copies or CTA
// barriers, each reader waiting for its slot and releasing it right after;
// the epilogue is theirs.

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s3_none_sm90a_pw
// CHECK-SAME: known_block_size = array<i32: 160, 1, 1>
// CHECK: attn_gpu.shared_memory 60976 x bf16
// CHECK: attn_gpu.ring_init at 121856 slots 3 producers 32 consumers 128
// CHECK-NEXT: attn_gpu.ring_init at 121904 slots 3 producers 32 consumers 128
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: attn_gpu.producer_warp after 4 warps {
// CHECK-NEXT: %[[STEP:.+]] = arith.constant 1 : index
// CHECK-NEXT: scf.for %[[J:.+]] = %[[B:.+]] to %{{.+}} step %[[STEP]]
// CHECK-NEXT: %[[IT:.+]] = arith.subi %[[J]], %[[B]] : index
// CHECK: %[[SLOT:.+]] = arith.remui %[[IT]], %c3{{.*}} : index
// CHECK: %[[K:.+]] = attn_gpu.shared_tile offset 8704 stage %[[SLOT]] of 8704
// CHECK-NEXT: attn_gpu.ring_acquire %[[IT]] at 121856 slots 3
// CHECK-NEXT: attn_gpu.async_copy %arg1{{.+}} into %[[K]] threads 128 to 160
// CHECK-NEXT: attn_gpu.ring_commit %[[IT]] at 121856 slots 3
// CHECK: %[[V:.+]] = attn_gpu.shared_tile offset 34816 stage %[[SLOT]] of 8704
// CHECK-NEXT: attn_gpu.ring_acquire %[[IT]] at 121904 slots 3
// CHECK-NEXT: attn_gpu.async_copy %arg2{{.+}} into %[[V]] threads 128 to 160
// CHECK-NEXT: attn_gpu.ring_commit %[[IT]] at 121904 slots 3
// CHECK-NEXT: }
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: } consumers {
// CHECK-NEXT: attn_gpu.async_copy %arg0{{.+}} threads 0 to 128
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: gpu.barrier
// CHECK: scf.for %[[CJ:.+]] = %[[B]] to
// CHECK-NOT: gpu.barrier
// CHECK-NOT: attn_gpu.async_copy
// CHECK: %[[CIT:.+]] = arith.subi %[[CJ]], %[[B]] : index
// CHECK: %[[CSLOT:.+]] = arith.remui %[[CIT]], %c3{{.*}} : index
// CHECK: %[[CK:.+]] = attn_gpu.shared_tile offset 8704 stage %[[CSLOT]] of 8704
// CHECK-NEXT: attn_gpu.ring_wait %[[CIT]] at 121856 slots 3
// CHECK-NEXT: attn_gpu.mma_qk %{{.+}}, %[[CK]]
// CHECK-NEXT: attn_gpu.ring_release %[[CIT]] at 121856 slots 3
// CHECK: attn_gpu.online_softmax
// CHECK-NEXT: %[[CV:.+]] = attn_gpu.shared_tile offset 34816 stage %[[CSLOT]] of 8704
// CHECK-NEXT: attn_gpu.ring_wait %[[CIT]] at 121904 slots 3
// CHECK-NEXT: attn_gpu.mma_pv %{{.+}}, %[[CV]]
// CHECK-NEXT: attn_gpu.ring_release %[[CIT]] at 121904 slots 3
// CHECK-NEXT: scf.yield
// CHECK: attn_gpu.store_output
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return

// attn-gpu-pipeline after it finds no unpipelined loop: nothing changes.
// PIPELINE: attn_gpu.shared_memory 60976 x bf16
// PIPELINE: attn_gpu.producer_warp
// PIPELINE: } consumers {
// PIPELINE: gpu.barrier
// PIPELINE: scf.for
// PIPELINE-NOT: gpu.barrier
// PIPELINE: gpu.return

// The lowering: the last warp (tid / 32 = 4) produces; the barriers are
// initialised by thread 0, filled by the copies' arrivals and waited on by
// phase parity; the consumers' barrier after Q is theirs alone (bar.sync 1).
// NVVM: mbarrier.init.shared::cta.b64 [$0], 32;
// NVVM: mbarrier.init.shared::cta.b64 [$0], 128;
// NVVM: %[[WARP:.+]] = arith.divui %{{.+}}, %c32{{.*}} : index
// NVVM: %[[PRODUCER:.+]] = arith.cmpi eq, %[[WARP]], %c4{{.*}} : index
// NVVM: scf.if %[[PRODUCER]] {
// NVVM: mbarrier.try_wait.parity.shared::cta.b64
// NVVM: cp.async.mbarrier.arrive.noinc.shared::cta.b64
// NVVM: } else {
// NVVM: "bar.sync 1, 128;"
// NVVM: mbarrier.try_wait.parity.shared::cta.b64
// NVVM: mbarrier.arrive.shared::cta.b64 _, [$0];

// A plan without producer_warp is left alone.
// PLAIN-NOT: attn_gpu.producer_warp
// PLAIN: gpu.barrier
// PLAIN: scf.for
// PLAIN: attn_gpu.async_copy

// The lowering refuses a producer-warp plan whose rings were not built.
// NORINGS: error: 'gpu.func' op expected attn_gpu.ring_init for a plan with producer_warp (run attn-gpu-warp-specialize)
func.func @ring(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
