// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --enable-var-scope --check-prefix=WGMMA
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefix=MODARGS

// Run-time window sizes on the GPU: one kernel for every window. The sizes
// are the kernel's last two parameters (i32 left, right); at the entry each
// is clamped to max(Nq, Nk), which makes a negative size (unbounded) and any
// larger one the same full side, then bound as an index: the tiled loop's
// bounds (attn-tile's IR, cloned into the kernel) and the key bounds of the
// tile level read them, and the tag says `_window_rt`, not the sizes.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_window_rt_sm90a
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_window_rt_sm90a({{.+}}, %[[NQ:[^:]+]]: i32, %[[NK:[^:]+]]: i32, %{{[^:]+}}: f32, {{.+}}, %[[WL:[^:]+]]: i32, %[[WR:[^:]+]]: i32) kernel
// CHECK-NEXT: %[[MOST:.+]] = arith.maxui %[[NQ]], %[[NK]] : i32
// CHECK-NEXT: %[[L32:.+]] = arith.minui %[[WL]], %[[MOST]] : i32
// CHECK-NEXT: %[[L:.+]] = arith.index_castui %[[L32]] : i32 to index
// CHECK-NEXT: %[[R32:.+]] = arith.minui %[[WR]], %[[MOST]] : i32
// CHECK-NEXT: %[[R:.+]] = arith.index_castui %[[R32]] : i32 to index
// The key-block loop's bounds: attn-tile's band, read from the bound sizes.
// CHECK: arith.index_cast %[[L]] : index to i64
// CHECK: arith.index_cast %[[R]] : index to i64
// CHECK: attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %{{.+}} window(%[[L]], %[[R]]) {block_rows = 64 : i64, mask = #attn.mask<window>} : <left = true, right = true>
func.func @forward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %wl: i64, %wr: i64) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v window(%wl, %wr) {mask = #attn.mask<window>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// The wgmma backward: fa_bwd's last two parameters, clamped by its Nq and
// Nk (parameters 12 and 13) at the entry; bwd_pre and bwd_post take none.
// WGMMA-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w12_s2_window_rt_wgmma_sm90a
// WGMMA: gpu.func @fa_bwd_pre_bwd_bf16_d128_bq64_bkv128_w12_s2_window_rt_wgmma_sm90a(
// WGMMA-NOT: arith.minui
// WGMMA: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_window_rt_wgmma_sm90a({{.+}}, %[[NQ:[^:]+]]: i32, %[[NK:[^:]+]]: i32, %{{[^:]+}}: f32, {{.+}}, %[[WL:[^:]+]]: i32, %[[WR:[^:]+]]: i32) kernel
// WGMMA-NEXT: %[[MOST:.+]] = arith.maxui %[[NQ]], %[[NK]] : i32
// WGMMA-NEXT: arith.minui %[[WL]], %[[MOST]] : i32
// WGMMA: arith.minui %[[WR]], %[[MOST]] : i32
// WGMMA: gpu.func @fa_bwd_post_
func.func @backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>, %wl: i64, %wr: i64) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse window(%wl, %wr) {mask = #attn.mask<window>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

// With a score_mod reading tensors, the mod_args precede the window sizes:
// the slopes are read through their own pointer (parameter 23, its extent
// 24), not through the sizes that follow (25, 26).
// MODARGS-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_window_rt_sm90a_mod_alibi_slopes(
// MODARGS-SAME: %[[SLOPES:arg23]]: !llvm.ptr<1>, %arg24: i32, %arg25: i32, %arg26: i32)
// MODARGS: llvm.getelementptr %[[SLOPES]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
func.func @alibi_window(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %slopes: tensor<?xf32>, %wl: i64, %wr: i64) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%slopes : tensor<?xf32>) window(%wl, %wr) {mask = #attn.mask<window>, attn.score_mod_name = "alibi_slopes"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<?xf32>):
    %slope = tensor.extract %t[%h] : tensor<?xf32>
    %d = arith.subi %kv, %qi : index
    %di = arith.index_cast %d : index to i32
    %df = arith.sitofp %di : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
