// RUN: fa-opt %s -split-input-file -attn-gpu-plan="split-kv=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="split-kv=1 pack-gqa=1" | FileCheck %s --enable-var-scope --check-prefix=PACKED
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="split-kv=1" > %t.split.mlir
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="split-kv=1 pack-gqa=1" > %t.packed.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.split.mlir %t && %python %S/Inputs/extract-ptx.py %t.packed.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_sink.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_packgqa_splitkv_sink.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// REQUIRES: ptxas

// Split-KV with sinks: the split forward is the plain split kernel (no
// sinks parameter, no sink at its finalisation: its partials are computed
// without them); the merge takes the sinks (f32 [H]) last, after o's
// strides, and joins the row's query-head sink as one more partial: the
// running max starts at the sink and the weight sum at its weight.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_sink(
// CHECK-SAME: %{{.+}}: i64)
// CHECK-NOT: sink %
// CHECK: attn_gpu.finalize_softmax %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-LABEL: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_sink(
// CHECK-SAME: %arg10: i64, %[[SINKS:arg11]]: memref<1099511627776xf32>)
// The row's query head (row / Nq mod H), packed or not.
// CHECK: %[[NQ:.+]] = arith.index_castui %arg7
// CHECK: %[[HEADROW:.+]] = arith.divui %{{.+}}, %[[NQ]] : index
// CHECK: %[[HEAD:.+]] = arith.remui %[[HEADROW]], %{{.+}} : index
// CHECK: %[[SINK:.+]] = memref.load %[[SINKS]][%[[HEAD]]] : memref<1099511627776xf32>
// CHECK: %[[MAX:.+]] = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%{{.+}} = %[[SINK]]) -> (f32)
// CHECK: %[[M:.+]] = arith.maxnumf %{{.+}}, %{{.+}} : f32
// CHECK: arith.subf %[[SINK]], %{{.+}} : f32
// CHECK: %[[W:.+]] = {{.*}}{{math.exp2|ex2}}
// CHECK: scf.for {{.*}} iter_args({{.*}}%{{.+}} = %[[W]]) -> (vector<4xf32>, f32)
// PACKED-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_packgqa_splitkv_sink(
// PACKED-SAME: %{{.+}}: i64)
// PACKED-LABEL: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_packgqa_splitkv_sink(
// PACKED-SAME: %arg10: i64, %{{.+}}: memref<1099511627776xf32>)
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
func.func @decode(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %sinks: tensor<?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v sinks(%sinks : tensor<?xf32>) {mask = #attn.mask<none>}
      : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
