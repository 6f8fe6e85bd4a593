// Without a mask the wgmma forward may run the last key tile first: it is the
// only ragged one (Nk mod block-kv keys), so the prologue issues Q·Kᵀ and the
// softmax on the multiple of 64 keys that covers it, one branch per width,
// and the loop's tiles are full and need no mask. On by default, except on
// the persistent D > 64 grid, whose consumer has no register to spare.
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-kv=192" | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-kv=192" -fa-wgmma-ragged-first=false | FileCheck %s --check-prefix=OFF
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-kv=176" -fa-wgmma-persistent=true | FileCheck %s --check-prefix=PERS

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv192_w12_s2_none_wgmma_sm90a_persistent
// Producer: ring iteration i loads key tile j0 - 1 + (i == 0 ? n : i).
// CHECK: nvvm.setmaxregister  decrease 32
// CHECK: scf.for %[[I:.+]] = %{{.*}} to %[[NT:.+]] step %{{.*}} : i32 {
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[I]], %{{.*}} : i32
// CHECK: arith.select %[[FIRST]], %[[NT]], %[[I]] : i32
// Consumers: the prologue's width branches (state and packed P out of each).
// CHECK: nvvm.setmaxregister  increase 232
// CHECK: scf.if %{{.*}} -> (f32, f32, f32, f32, i32,
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 64, k = 16>, D[<f32>, <zero>]
// CHECK: scf.if %{{.*}} -> (f32, f32, f32, f32, i32,
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 128, k = 16>, D[<f32>, <zero>]
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 192, k = 16>, D[<f32>, <zero>]
// The loop: full-width S, no mask branch (an scf.if yielding the scores).
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 192, k = 16>, D[<f32>, <zero>]
// CHECK-NOT: = scf.if %{{.*}} -> (f32, f32
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: scf.yield

// OFF-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv192_w12_s2_none_wgmma_sm90a_persistent
// OFF-NOT: n = 64, k = 16
// OFF-NOT: n = 128, k = 16
// OFF: scf.for {{.*}} iter_args
// OFF: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 192, k = 16>, D[<f32>, <zero>]
// OFF: = scf.if %{{.*}} -> (f32, f32

func.func @d64(%q: tensor<1x2x300x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> (tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16> -> tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
}

// -----

// D = 128 with one CTA per query tile takes it too; the persistent D = 128
// grid keeps the natural order (full-width first S, masked loop).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a
// CHECK: scf.if %{{.*}} -> (f32, f32, f32, f32, i32,
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 64, k = 16>, D[<f32>, <zero>]
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 192, k = 16>, D[<f32>, <zero>]
// CHECK-NOT: = scf.if %{{.*}} -> (f32, f32
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: scf.yield

// PERS-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv176_w12_s2_none_wgmma_sm90a_persistent
// PERS-NOT: n = 64, k = 16
// PERS: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 176, k = 16>, D[<f32>, <zero>]
// PERS-NOT: n = 64, k = 16
// PERS: scf.for {{.*}} iter_args
// PERS: = scf.if %{{.*}} -> (f32, f32
func.func @d128(%q: tensor<1x2x300x128xbf16>, %k: tensor<1x2x300x128xbf16>, %v: tensor<1x2x300x128xbf16>) -> (tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16> -> tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
}

// -----

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv192_w12_s2_causal_wgmma_sm90a
// CHECK-NOT: n = 64, k = 16
// CHECK: scf.for {{.*}} iter_args
// CHECK: = scf.if %{{.*}} -> (f32, f32
func.func @causal(%q: tensor<1x2x300x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> (tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16> -> tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
}
