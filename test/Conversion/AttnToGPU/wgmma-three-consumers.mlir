// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma block-q=192" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-q=192" | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=TWO
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma block-q=192" -fa-wgmma-ping-pong 2>&1 | FileCheck %s --check-prefix=TURNS
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma block-q=192 grid=persistent" 2>&1 | FileCheck %s --check-prefix=PERSISTENT
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma block-q=256" 2>&1 | FileCheck %s --check-prefix=BQ
// RUN: not fa-aot -o %t.bad --config fwd:bf16:d192:v128:causal:wgmma:bq192 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: not fa-aot -o %t.bad --config fwd:bf16:d64:none:wgmma:maskmod=document:blocksparse:bq192 --score-mods %S/../../gpu/block_masks.mlir 2>&1 | FileCheck %s --check-prefix=SPARSE

// block_q 192: a third consumer warpgroup (FA3's 192-row tile for small head
// dims). 16 warps; no ping-pong turns (they alternate two warpgroups), which
// is the measured default there, so the tag names no schedule switch; the
// persistent grid stays with 128 rows, so d64 without a mask runs a grid of
// tiles.
// PLAN-LABEL: func @d64
// PLAN: block_q = 192 : i64, grid = "blocks"
// PLAN-SAME: schedule = {lazy_rescale = false, ping_pong = false,
// PLAN-SAME: tag = "fwd_bf16_d64_bq192_bkv128_w16_s2_none_wgmma_sm90a", target = "sm_90a", warps = 16 : i64}

// Q's box is 192 rows; the consumers take 160 registers each beside the
// producer's 24 (the CTA holds 4 x 128 a thread at entry); each consumer
// stages its O behind a named barrier of its own (3, 4, 5).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq192_bkv128_w16_s2_none_wgmma_sm90a(
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK: !nvgpu.tensormap.descriptor<tensor = memref<1x1x192x64xbf16, 3>
// CHECK: nvgpu.mbarrier.init {{.*}}, %{{.*}} : <memorySpace = #gpu.address_space<workgroup>, num_barriers = 9>
// CHECK: nvvm.setmaxregister decrease 24
// CHECK: nvvm.setmaxregister increase 160
// CHECK-NOT: bar.arrive 1,
// CHECK: "bar.sync 3, 128;"
// CHECK: "bar.sync 4, 128;"
// CHECK: "bar.sync 5, 128;"
// TWO-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent(
// TWO-SAME: known_block_size = array<i32: 384, 1, 1>
// TWO: nvvm.setmaxregister decrease 32
// TWO: nvvm.setmaxregister increase 232
// TURNS: expected no ping-pong turns with block-q = 192 (the turns alternate two consumer warpgroups)
// PERSISTENT: expected block-q = 128 for the persistent wgmma grid, got 192
// SPARSE: expected block-q = 128 for a block-sparse wgmma forward, got 192
// BQ: expected block-q = 128 with 12 warps or 192 with 16 for mma = wgmma, got block-q = 256
func.func @d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// D above 128 (the DeepSeek 192/128 shape) keeps 128 rows: a third consumer
// spills beside its S.
// WIDE: expected block-q = 128 for D 192 (a third consumer warpgroup's 160 registers spill with its S), got 192
