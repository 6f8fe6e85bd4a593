// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM

// The mma.sync forward's K/V ring with plan.stages = 3: the prologue loads
// K and V of the first two key blocks (wait until only those four groups are
// in flight: Q has landed); iteration j waits for K(j), then V(j), with three
// groups left in flight, and streams block j + 2 into the slot block j − 1
// used.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s3_none_sm90a
// Q | K stages 0, 1, 2 | V stages 0, 1, 2, rows padded to 136 elements.
// CHECK: attn_gpu.shared_memory 60928 x bf16
// CHECK: attn_gpu.shared_tile offset 0 : <64x128xbf16, stride = 136>
// CHECK: %[[K0:.+]] = attn_gpu.shared_tile offset 8704 stage %{{.+}} of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[K0]]
// CHECK: %[[V0:.+]] = attn_gpu.shared_tile offset 34816 stage %{{.+}} of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[V0]]
// CHECK: %[[K1:.+]] = attn_gpu.shared_tile offset 8704 stage %{{.+}} of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[K1]]
// CHECK: %[[V1:.+]] = attn_gpu.shared_tile offset 34816 stage %{{.+}} of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[V1]]
// CHECK-NEXT: attn_gpu.async_wait 4
// CHECK: scf.for
// CHECK: %[[STAGE:.+]] = arith.remui %{{.+}}, %c3{{.*}} : index
// CHECK: %[[AHEAD:.+]] = arith.addi %[[STAGE]], %{{.+}} : index
// CHECK: %[[NEXT:.+]] = arith.remui %[[AHEAD]], %c3{{.*}} : index
// CHECK: attn_gpu.async_wait 3
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[KT:.+]] = attn_gpu.shared_tile offset 8704 stage %[[STAGE]] of 8704
// CHECK-NEXT: attn_gpu.mma_qk %{{.+}}, %[[KT]]
// CHECK-NEXT: %[[KN:.+]] = attn_gpu.shared_tile offset 8704 stage %[[NEXT]] of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[KN]]
// CHECK: attn_gpu.async_wait 3
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[VT:.+]] = attn_gpu.shared_tile offset 34816 stage %[[STAGE]] of 8704
// CHECK-NEXT: attn_gpu.mma_pv %{{.+}}, %[[VT]]
// CHECK-NEXT: %[[VN:.+]] = attn_gpu.shared_tile offset 34816 stage %[[NEXT]] of 8704
// CHECK: attn_gpu.async_copy %{{.+}} into %[[VN]]
// CHECK-NEXT: scf.yield

// The lowering waits with the same counts (cp.async.wait_group).
// NVVM: nvvm.cp.async.wait.group 4
// NVVM: nvvm.cp.async.wait.group 3
// NVVM: nvvm.cp.async.wait.group 3
// NVVM: nvvm.cp.async.wait.group 0
func.func @ring(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
