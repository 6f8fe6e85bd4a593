// fa-opt behaves like mlir-opt: --help lists fa's passes and pipelines, and
// textual pass pipelines with options work.
// RUN: fa-opt --help | FileCheck %s --check-prefix=HELP
// HELP-DAG: --attn-decompose
// HELP-DAG: --attn-online-softmax
// HELP-DAG: --attn-recompute-backward
// HELP-DAG: --attn-tile
// HELP-DAG: --fa-lower-to-linalg
// HELP-DAG: --fa-lower-to-llvm
// HELP-DAG: --one-shot-bufferize
// HELP-DAG: --canonicalize

// RUN: fa-opt %s --pass-pipeline="builtin.module(func.func(attn-online-softmax,attn-tile{block-q=32 block-kv=16},canonicalize))" | FileCheck %s
// CHECK: scf.forall (%{{.+}}) in (2)
// CHECK: scf.for %{{.+}} = %c0 to %c4
// CHECK: attn.online_attention {{.+}} : tensor<1x1x32x8xf32>, tensor<1x1x16x8xf32>
func.func @f(%q: tensor<1x1x64x8xf32>, %k: tensor<1x1x64x8xf32>, %v: tensor<1x1x64x8xf32>) -> (tensor<1x1x64x8xf32>, tensor<1x1x64xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x1x64x8xf32>, tensor<1x1x64x8xf32>, tensor<1x1x64x8xf32> -> tensor<1x1x64x8xf32>, tensor<1x1x64xf32>
  return %o, %lse : tensor<1x1x64x8xf32>, tensor<1x1x64xf32>
}
