// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: fa-opt %s -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline | FileCheck %s --check-prefix=TWO --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -attn-gpu-pipeline | FileCheck %s --check-prefix=TWICE
// RUN: not fa-opt %s -attn-gpu-plan="stages=3" -attn-online-softmax -attn-tile -convert-attn-to-gpu -convert-attn-gpu-to-nvvm 2>&1 | FileCheck %s --check-prefix=UNPIPELINED

// attn-gpu-pipeline on the mma.sync forward's key loop (convert-attn-to-gpu
// writes it unpipelined: K(j) and V(j) copied into one buffer each) with
// plan.stages = 3: K and V become rings of three slots (the shared buffer
// grows from Q | K | V to Q | K×3 | V×3, V's offset moves behind K's ring),
// the prologue loads K and V of the first two key blocks before the wait
// for Q (which now lets those four groups stay in flight); iteration j
// waits for K(j), then V(j), with three groups left in flight, and streams
// block j + 2 into the slot block j − 1 used. The loop's opening barrier is
// gone.

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
// CHECK-NOT: gpu.barrier
// CHECK: %[[STAGE:.+]] = arith.remui %{{.+}}, %c3{{.*}} : index
// CHECK: %[[AHEAD:.+]] = arith.addi %[[STAGE]], %{{.+}} : index
// CHECK: %[[NEXT:.+]] = arith.remui %[[AHEAD]], %c3{{.*}} : index
// The copies' key row is linear in j: two blocks ahead is 128 keys on.
// CHECK: %[[KEY:.+]] = arith.muli %{{.+}}, %c64{{.*}} : index
// CHECK-NOT: gpu.barrier
// CHECK: attn_gpu.async_wait 3
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[KT:.+]] = attn_gpu.shared_tile offset 8704 stage %[[STAGE]] of 8704
// CHECK-NEXT: attn_gpu.mma_qk %{{.+}}, %[[KT]]
// CHECK-NEXT: %[[KN:.+]] = attn_gpu.shared_tile offset 8704 stage %[[NEXT]] of 8704
// CHECK-NEXT: %[[C128:.+]] = arith.constant 128 : index
// CHECK-NEXT: %[[AKEY:.+]] = arith.addi %[[KEY]], %[[C128]] : index
// CHECK-NEXT: attn_gpu.async_copy %{{.+}} rows %[[AKEY]] below {{.+}} into %[[KN]]
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

// The default two stages: the next slot is 1 − stage.
// TWO: attn_gpu.shared_memory 43520 x bf16
// TWO: attn_gpu.async_wait 2
// TWO: scf.for
// TWO: %[[STAGE:.+]] = arith.remui %{{.+}}, %c2{{.*}} : index
// TWO: %[[NEXT:.+]] = arith.subi %c1{{.*}}, %[[STAGE]] : index
// TWO: attn_gpu.async_wait 1
// TWO: attn_gpu.shared_tile offset 8704 stage %[[STAGE]] of 8704
// TWO: attn_gpu.shared_tile offset 8704 stage %[[NEXT]] of 8704

// A pipelined loop has no single-buffer copy left: a second run changes
// nothing.
// TWICE: attn_gpu.shared_memory 60928 x bf16
// TWICE: attn_gpu.async_wait 4
// TWICE-NOT: attn_gpu.async_wait 4

// The lowering refuses a plan of three stages whose loop was not pipelined.
// UNPIPELINED: error: 'attn_gpu.async_copy' op expected the key loop's copies pipelined over the plan's 3 stages (run attn-gpu-pipeline first)
func.func @ring(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
