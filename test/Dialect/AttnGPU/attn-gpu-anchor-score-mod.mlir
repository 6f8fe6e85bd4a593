// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod -attn-gpu-anchor-score-mod | FileCheck %s --enable-var-scope --check-prefix=TWICE
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="split-kv=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-anchor-score-mod | FileCheck %s --enable-var-scope --check-prefix=SPLIT
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefix=LOWER

// ALiBi with slopes from a tensor: q_idx enters as −slope·f32(q), an added
// term. The key loop's score_mod is evaluated at each lane's first row, and
// the finalisation adds the rows' shift (the same region, its own rows) to
// the LSE and takes it from the sink.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi(
// CHECK: scf.for
// CHECK: attn_gpu.score_mod %{{.+}} scale %[[SCALE:[^ ]+]] at [%[[B:[^,]+]], %[[H:[^,]+]], %[[Q0:[a-z0-9_]+]]] of [%[[NQ:[^,]+]], %[[NK:[a-z0-9_]+]]] row %[[ROW:[^ ]+]] key %{{.+}} {query_anchored} : <16x64xf32, accumulator> {
// CHECK: arith.subi
// CHECK: attn_gpu.yield
// CHECK: %[[SHIFT:.+]] = attn_gpu.score_mod_shift scale %[[SCALE]] at [%[[B]], %[[H]], %[[Q0]]] of [%[[NQ]], %[[NK]]] row %[[ROW]] : <16x1xf32, rows> {
// CHECK-NEXT: ^bb0(%{{.+}}: f32, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: tensor<?xf32>):
// CHECK: tensor.extract
// CHECK: attn_gpu.yield
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} shift %[[SHIFT]] : {{.*}}<16x1xf32, rows> : <16x1xf32, rows>
// Lowered: each row's LSE, ln2·(m + log2 l) (−inf for an empty row), takes
// its shift back before it is stored.
// LOWER-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi(
// LOWER: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// LOWER: %[[LSE:.+]] = arith.select %{{.+}}, %{{.+}}, %{{.+}} : f32
// LOWER-NEXT: %[[OUT:.+]] = arith.addf %[[LSE]], %{{.+}} : f32
// LOWER: memref.store %[[OUT]], %arg4
// Idempotent: an anchored kernel is left as it is.
// TWICE-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi(
// TWICE-COUNT-1: attn_gpu.score_mod_shift
// TWICE-NOT: attn_gpu.score_mod_shift
// TWICE-LABEL: gpu.func
// A split-KV partial's LSE is the mod's own too, so the merge weighs it right.
// SPLIT-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_splitkv_mod_alibi(
// SPLIT: attn_gpu.score_mod {{.+}} {query_anchored}
// SPLIT: %[[SHIFT:.+]] = attn_gpu.score_mod_shift
// SPLIT: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} shift %[[SHIFT]]
func.func @alibi(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %slopes: tensor<?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%slopes : tensor<?xf32>) {mask = #attn.mask<causal>, attn.score_mod_name = "alibi"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %t: tensor<?xf32>):
    %slope = tensor.extract %t[%h] : tensor<?xf32>
    %d = arith.subi %j, %i : index
    %di = arith.index_cast %d : index to i32
    %df = arith.sitofp %di : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// A row term alone, through negation, a product with a constant and a
// difference: 0.5·(s − f32(q)) · 2 is query-additive.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_row_term(
// CHECK: attn_gpu.score_mod {{.+}} {query_anchored}
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} shift
func.func @row_term(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "row_term"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %half = arith.constant 0.5 : f32
    %two = arith.constant 2.0 : f32
    %ii = arith.index_cast %i : index to i32
    %qf = arith.sitofp %ii : i32 to f32
    %nq = arith.negf %qf : f32
    %x = arith.addf %s, %nq : f32
    %y = arith.mulf %half, %x : f32
    %r = arith.mulf %y, %two : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// Left alone: q_idx inside |q − kv| (symmetric ALiBi), ...
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_abs_alibi(
// CHECK-NOT: query_anchored
// CHECK-NOT: attn_gpu.score_mod_shift
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} :
func.func @abs_alibi(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "abs_alibi"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %slope = arith.constant 0.25 : f32
    %ii = arith.index_cast %i : index to i32
    %ji = arith.index_cast %j : index to i32
    %qf = arith.sitofp %ii : i32 to f32
    %kf = arith.sitofp %ji : i32 to f32
    %d = arith.subf %qf, %kf : f32
    %a = math.absf %d : f32
    %bias = arith.mulf %slope, %a : f32
    %r = arith.subf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// ... a per-row bias read from a table (an entry may be −inf, which no
// shift can carry), ...
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_row_bias(
// CHECK-NOT: query_anchored
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} :
func.func @row_bias(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %bias: tensor<?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%bias : tensor<?xf32>) {attn.score_mod_name = "row_bias"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %t: tensor<?xf32>):
    %x = tensor.extract %t[%i] : tensor<?xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// ... a product of the score and a row term, and a mod that does not read
// q_idx at all (softcap).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_scaled_by_row(
// CHECK-NOT: query_anchored
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_softcap(
// CHECK-NOT: query_anchored
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} :
func.func @scaled_by_row(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "scaled_by_row"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %ii = arith.index_cast %i : index to i32
    %qf = arith.sitofp %ii : i32 to f32
    %r = arith.mulf %s, %qf : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
func.func @softcap(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
