// RUN: fa-opt %s -fa-lower-to-linalg="block-q=64 block-kv=64" | FileCheck %s --check-prefix=LINALG
// RUN: fa-opt %s -fa-lower-to-llvm | FileCheck %s --check-prefix=LLVM
// RUN: fa-opt %s -fa-lower-to-linalg --mlir-print-ir-after-all -o /dev/null 2>&1 | FileCheck %s --check-prefix=DUMP

// After the seed passes no 1024×1024 score matrix exists: scores live in
// 64×64 tiles inside the Q-block / KV-block loops.
// LINALG-LABEL: func @causal
// LINALG-NOT: 1024x1024
// LINALG: scf.forall
// LINALG: scf.for
// LINALG: tensor<1x1x64x64xf32>
// LINALG-NOT: 1024x1024
// LINALG-NOT: attn.

// Down to the LLVM dialect for the host.
// LLVM: llvm.func @causal
// LLVM-NOT: attn.
// LLVM-NOT: linalg.
// LLVM-NOT: scf.
// LLVM-NOT: tensor<
// LLVM: llvm.intr.exp2

// DUMP: IR Dump After AttnRecomputeBackwardPass (attn-recompute-backward)
// DUMP: IR Dump After AttnOnlineSoftmaxPass (attn-online-softmax)
// DUMP: attn.online_attention
// DUMP: IR Dump After AttnTilePass (attn-tile)
// DUMP: scf.forall
// DUMP: IR Dump After AttnDecomposePass (attn-decompose)
func.func @causal(%q: tensor<1x2x1024x64xbf16>, %k: tensor<1x2x1024x64xbf16>, %v: tensor<1x2x1024x64xbf16>)
    -> (tensor<1x2x1024x64xbf16>, tensor<1x2x1024xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<1x2x1024x64xbf16>, tensor<1x2x1024x64xbf16>, tensor<1x2x1024x64xbf16> -> tensor<1x2x1024x64xbf16>, tensor<1x2x1024xf32>
  return %o, %lse : tensor<1x2x1024x64xbf16>, tensor<1x2x1024xf32>
}
