// RUN: fa-opt %s -split-input-file | fa-opt | FileCheck %s
// RUN: fa-opt %s -split-input-file -mlir-print-op-generic | fa-opt | FileCheck %s

// CHECK-LABEL: func @attention_gqa_causal
// CHECK: attn.attention %{{.*}}, %{{.*}}, %{{.*}} {mask = #attn.mask<causal>, scale = 1.250000e-01 : f32}
// CHECK-SAME: tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16> -> tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>
func.func @attention_gqa_causal(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x2x128x64xbf16>, %v: tensor<2x2x128x64xbf16>) -> (tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>, scale = 0.125 : f32}
      : tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16> -> tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>
  return %o, %lse : tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>
}

// -----

// CHECK-LABEL: func @attention_window_softcap
// CHECK: attn.attention {{.*}} {mask = #attn.mask<window>, window_left = 16 : i64, window_right = 0 : i64} score_mod {
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
// CHECK:   math.tanh
// CHECK:   attn.yield %{{.*}} : f32
// CHECK: } : tensor<1x4x?x32xf16>
func.func @attention_window_softcap(%q: tensor<1x4x?x32xf16>, %k: tensor<1x4x?x32xf16>, %v: tensor<1x4x?x16xf16>) -> (tensor<1x4x?x16xf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = 16, window_right = 0} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<1x4x?x32xf16>, tensor<1x4x?x32xf16>, tensor<1x4x?x16xf16> -> tensor<1x4x?x16xf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x16xf16>, tensor<1x4x?xf32>
}

// -----

// A run-time window (one kernel for every size) and a one-sided one (-1).
// CHECK-LABEL: func @attention_window_runtime
// CHECK: attn.attention %{{.*}}, %{{.*}}, %{{.*}} window(%[[L:.*]], %[[R:.*]]) {mask = #attn.mask<window>}
// CHECK: attn.attention_backward {{.*}} window(%[[L]], %[[R]]) {mask = #attn.mask<window>}
// CHECK: attn.attention {{.*}} {mask = #attn.mask<window>, window_left = -1 : i64, window_right = 0 : i64}
func.func @attention_window_runtime(%q: tensor<1x4x64x32xf32>, %k: tensor<1x4x64x32xf32>, %v: tensor<1x4x64x32xf32>,
                                    %do: tensor<1x4x64x32xf32>, %wl: i64, %wr: i64) {
  %o, %lse = attn.attention %q, %k, %v window(%wl, %wr) {mask = #attn.mask<window>}
      : tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32> -> tensor<1x4x64x32xf32>, tensor<1x4x64xf32>
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse window(%wl, %wr) {mask = #attn.mask<window>}
      : tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64xf32>
      -> tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>
  %o2, %lse2 = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = -1, window_right = 0}
      : tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32> -> tensor<1x4x64x32xf32>, tensor<1x4x64xf32>
  return
}

// -----

// CHECK-LABEL: func @attention_backward
// CHECK: attn.attention_backward {{.*}} {mask = #attn.mask<causal_bottom_right>}
// CHECK-SAME: -> tensor<1x4x64x32xf32>, tensor<1x1x80x32xf32>, tensor<1x1x80x16xf32>
func.func @attention_backward(%q: tensor<1x4x64x32xf32>, %k: tensor<1x1x80x32xf32>, %v: tensor<1x1x80x16xf32>,
                              %o: tensor<1x4x64x16xf32>, %do: tensor<1x4x64x16xf32>, %lse: tensor<1x4x64xf32>)
    -> (tensor<1x4x64x32xf32>, tensor<1x1x80x32xf32>, tensor<1x1x80x16xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal_bottom_right>}
      : tensor<1x4x64x32xf32>, tensor<1x1x80x32xf32>, tensor<1x1x80x16xf32>, tensor<1x4x64x16xf32>, tensor<1x4x64x16xf32>, tensor<1x4x64xf32>
      -> tensor<1x4x64x32xf32>, tensor<1x1x80x32xf32>, tensor<1x1x80x16xf32>
  return %dq, %dk, %dv : tensor<1x4x64x32xf32>, tensor<1x1x80x32xf32>, tensor<1x1x80x16xf32>
}

// -----

// CHECK-LABEL: func @tile_ops
// CHECK: attn.online_attention {{.*}} at [{{.*}}] of [{{.*}}] {apply_mask, mask = #attn.mask<causal>}
// CHECK: attn.backward_tile {{.*}} into {{.*}} at [{{.*}}] of [{{.*}}]
func.func @tile_ops(%q: tensor<1x1x16x32xbf16>, %k: tensor<1x1x16x32xbf16>, %v: tensor<1x1x16x32xbf16>,
                    %acc: tensor<1x1x16x32xf32>, %m: tensor<1x1x16xf32>, %l: tensor<1x1x16xf32>, %i: index, %n: index) -> tensor<1x1x16x32xf32> {
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%i, %i, %i, %i] of [%n, %n] {apply_mask, mask = #attn.mask<causal>}
      : tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
      -> tensor<1x1x16x32xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
  %dq, %dk, %dv = attn.backward_tile %q, %k, %v, %q, %m, %l into %acc, %acc, %acc at [%i, %i, %i, %i] of [%n, %n]
      : tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16xf32>, tensor<1x1x16xf32>,
        tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>
      -> tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>, tensor<1x1x16x32xf32>
  return %a : tensor<1x1x16x32xf32>
}

// -----

// Partial results of four key splits joined by their LSE; dynamic extents
// round-trip.
// CHECK-LABEL: func @merge
// CHECK: %{{.+}}, %{{.+}} = attn.merge %{{.+}}, %{{.+}} : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
// CHECK: attn.merge %{{.+}}, %{{.+}} : tensor<?x2x8x?x64xf32>, tensor<?x2x8x?xf32> -> tensor<2x8x?x64xf32>, tensor<2x8x?xf32>
func.func @merge(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>,
                 %od: tensor<?x2x8x?x64xf32>, %ld: tensor<?x2x8x?xf32>)
    -> (tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>, tensor<2x8x?x64xf32>, tensor<2x8x?xf32>) {
  %out, %lse = attn.merge %o, %l : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  %out2, %lse2 = attn.merge %od, %ld : tensor<?x2x8x?x64xf32>, tensor<?x2x8x?xf32> -> tensor<2x8x?x64xf32>, tensor<2x8x?xf32>
  return %out, %lse, %out2, %lse2 : tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>, tensor<2x8x?x64xf32>, tensor<2x8x?xf32>
}

// -----

// A merge with attention sinks (one more partial per row: LSE = sink, O = 0).
// CHECK-LABEL: func @merge_sinks
// CHECK: attn.merge %{{.+}}, %{{.+}} sinks(%{{.+}} : tensor<32xf32>) : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
func.func @merge_sinks(%o: tensor<4x1x32x1x128xf32>, %l: tensor<4x1x32x1xf32>, %s: tensor<32xf32>)
    -> (tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>) {
  %out, %lse = attn.merge %o, %l sinks(%s : tensor<32xf32>) : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32> -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
  return %out, %lse : tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
}

// -----

// Varlen: packed Q [Tq,H,D], K/V [Tk,Hkv,D], O [Tq,H,Dv], LSE [H,Tq] with
// cu_seqlens offsets i32 [B+1].
// CHECK-LABEL: func @attention_varlen
// CHECK: attn.attention %{{.*}}, %{{.*}}, %{{.*}} varlen(%{{.*}}, %{{.*}} : tensor<4xi32>, tensor<4xi32>) {mask = #attn.mask<causal_bottom_right>}
// CHECK-SAME: tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>, tensor<8x?xf32>
// CHECK: attn.attention_backward {{.*}} varlen(%{{.*}}, %{{.*}} : tensor<4xi32>, tensor<4xi32>)
func.func @attention_varlen(%q: tensor<?x8x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>,
                            %cuq: tensor<4xi32>, %cuk: tensor<4xi32>, %do: tensor<?x8x64xbf16>)
    -> (tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>) {
  %o, %lse = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<4xi32>, tensor<4xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>, tensor<8x?xf32>
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse varlen(%cuq, %cuk : tensor<4xi32>, tensor<4xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?x8x64xbf16>, tensor<?x8x64xbf16>, tensor<8x?xf32>
      -> tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>
  return %dq, %dk, %dv : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>
}

// -----

// A paged KV cache: K, V pools of pages, a page table and the key counts;
// the dense view the passes slice.
// CHECK-LABEL: func @attention_paged
// CHECK: attn.attention %{{.*}}, %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<2x6xi32>, tensor<2xi32>) {mask = #attn.mask<causal_bottom_right>}
// CHECK-SAME: tensor<2x8x4x64xbf16>, tensor<16x32x2x64xbf16>, tensor<16x32x2x64xbf16> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
// CHECK: attn.paged_view %{{.*}}, %{{.*}} : tensor<16x32x2x64xbf16>, tensor<2x6xi32> -> tensor<2x2x192x64xbf16>
func.func @attention_paged(%q: tensor<2x8x4x64xbf16>, %k: tensor<16x32x2x64xbf16>, %v: tensor<16x32x2x64xbf16>, %pt: tensor<2x6xi32>, %n: tensor<2xi32>) -> (tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>, tensor<2x2x192x64xbf16>) {
  %o, %lse = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x6xi32>, tensor<2xi32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<2x8x4x64xbf16>, tensor<16x32x2x64xbf16>, tensor<16x32x2x64xbf16> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  %view = attn.paged_view %k, %pt : tensor<16x32x2x64xbf16>, tensor<2x6xi32> -> tensor<2x2x192x64xbf16>
  return %o, %lse, %view : tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>, tensor<2x2x192x64xbf16>
}
