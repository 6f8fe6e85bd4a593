// In the wgmma forward's key loop O takes the previous tile's factors inside
// the ping-pong turn: S(j) is issued (attn_gpu.wgmma_qk: its lane values
// read off the struct at the issue), then the 64 multiplies of O, a second
// wgmma.fence, and P·V(j-1) (FA3's order), so they are off the path from a
// tile's softmax to its next issue. By default for D > 64, except on a
// persistent grid with block_kv > 128, whose consumer would spill;
// otherwise O is rescaled at the end of the trip, before the next turn.
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" -fa-wgmma-rescale-in-turn=false | FileCheck %s --check-prefix=OFF
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" -fa-wgmma-persistent=true | FileCheck %s --check-prefix=PERS
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-kv=176" -fa-wgmma-persistent=true | FileCheck %s --check-prefix=WIDE

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// CHECK: scf.for {{.*}} iter_args
// CHECK: bar.sync 1, 256
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-8: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 128, k = 16>
// CHECK-COUNT-64: llvm.extractvalue
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-COUNT-64: arith.mulf
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: bar.arrive 2, 256
// The last P·V takes the last factors before its turn.
// CHECK: scf.yield
// CHECK-COUNT-64: arith.mulf
// CHECK: bar.sync 1, 256
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

// PERS-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_persistent
// PERS: scf.for {{.*}} iter_args
// PERS: bar.sync 1, 256
// PERS: nvvm.wgmma.fence.aligned
// PERS-COUNT-8: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 128, k = 16>
// PERS-COUNT-64: llvm.extractvalue
// PERS-NEXT: nvvm.wgmma.commit.group.sync.aligned
// PERS-COUNT-64: arith.mulf
// PERS-NEXT: nvvm.wgmma.fence.aligned

// WIDE-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv176_w12_s2_causal_wgmma_sm90a_persistent
// WIDE: scf.for {{.*}} iter_args
// WIDE: nvvm.wgmma.commit.group.sync.aligned
// WIDE-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

// OFF-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// OFF: scf.for {{.*}} iter_args
// OFF: nvvm.wgmma.commit.group.sync.aligned
// OFF-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// OFF: nvvm.wgmma.wait.group.sync.aligned 0
// OFF-COUNT-64: arith.mulf
// OFF: scf.yield

func.func @d128(%q: tensor<1x2x300x128xbf16>, %k: tensor<1x2x300x128xbf16>, %v: tensor<1x2x300x128xbf16>) -> (tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16> -> tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
}

// -----

// D = 64 keeps the multiplies at the end of the trip.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-COUNT-32: arith.mulf
// CHECK: scf.yield
func.func @d64(%q: tensor<1x2x300x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> (tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16> -> tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
}
