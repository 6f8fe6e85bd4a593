// mod_args: tensors a score_mod reads, operands of the op and block arguments
// of its region after kv_idx. They round-trip, and every pass carries them to
// the ops it builds unchanged (whole tensors: the region indexes them with
// absolute positions), down to attn-decompose's clamped tensor.extract.
// RUN: fa-opt %s -split-input-file | fa-opt | FileCheck %s --check-prefix=ROUND
// RUN: fa-opt %s -split-input-file -mlir-print-op-generic | fa-opt | FileCheck %s --check-prefix=ROUND
// RUN: fa-opt %s -split-input-file -attn-online-softmax | FileCheck %s --check-prefix=ONLINE
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-tile="block-q=16 block-kv=16" | FileCheck %s --check-prefix=TILE
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-split-kv="splits=2 block-kv=16" | FileCheck %s --check-prefix=SPLIT
// RUN: fa-opt %s -split-input-file -attn-recompute-backward="block-q=16 block-kv=16" | FileCheck %s --check-prefix=BWD
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-tile="block-q=16 block-kv=16" -attn-decompose -canonicalize | FileCheck %s --check-prefix=DECOMP

// ROUND-LABEL: func.func @alibi_slopes
// ROUND: attn.attention %{{.*}}, %{{.*}}, %{{.*}} mod_args(%{{.*}} : tensor<4xf32>)
// ROUND: ^bb0(%{{.*}}: f32, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %[[T:.+]]: tensor<4xf32>):
// ROUND: tensor.extract %[[T]]
// ONLINE-LABEL: func.func @alibi_slopes(
// ONLINE-SAME: %[[S:[a-z0-9]+]]: tensor<4xf32>
// ONLINE: attn.online_attention {{.*}} of [%{{.*}}, %{{.*}}] mod_args(%[[S]] : tensor<4xf32>)
// TILE-LABEL: func.func @alibi_slopes(
// TILE-SAME: %[[S:[a-z0-9]+]]: tensor<4xf32>
// TILE: attn.online_attention {{.*}} mod_args(%[[S]] : tensor<4xf32>)
// TILE: ^bb0({{.*}}, %[[T:.+]]: tensor<4xf32>):
// TILE: tensor.extract %[[T]][%
// SPLIT-LABEL: func.func @alibi_slopes(
// SPLIT-SAME: %[[S:[a-z0-9]+]]: tensor<4xf32>
// SPLIT: scf.forall
// SPLIT: attn.online_attention {{.*}} mod_args(%[[S]] : tensor<4xf32>)
// SPLIT: attn.merge
// DECOMP-LABEL: func.func @alibi_slopes(
// DECOMP-SAME: %[[S:[a-z0-9]+]]: tensor<4xf32>
// DECOMP: %[[LOW:.+]] = arith.minsi %{{.+}}, %c3 : index
// DECOMP: %[[IDX:.+]] = arith.maxsi %[[LOW]], %c0 : index
// DECOMP: tensor.extract %[[S]][%[[IDX]]] : tensor<4xf32>
// DECOMP-NOT: attn.
// DECOMP: return
func.func @alibi_slopes(%q: tensor<1x4x40x16xf32>, %k: tensor<1x2x40x16xf32>, %v: tensor<1x2x40x16xf32>, %slopes: tensor<4xf32>)
    -> (tensor<1x4x40x16xf32>, tensor<1x4x40xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%slopes : tensor<4xf32>) {mask = #attn.mask<causal>} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<4xf32>):
    %slope = tensor.extract %t[%h] : tensor<4xf32>
    %d = arith.subi %kv, %qi : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<1x4x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<1x4x40x16xf32>, tensor<1x4x40xf32>
  return %o, %lse : tensor<1x4x40x16xf32>, tensor<1x4x40xf32>
}

// -----

// Two mod_args of other element types: a bf16 bias table [H, Nq+Nk-1] and an
// i32 key bias [B, Nk]; the backward's tiles carry both.
// ROUND-LABEL: func.func @backward_two
// ROUND: attn.attention_backward {{.*}} mod_args(%{{.*}}, %{{.*}} : tensor<2x79xbf16>, tensor<1x40xi32>)
// BWD-LABEL: func.func @backward_two(
// BWD-SAME: %[[TAB:[a-z0-9]+]]: tensor<2x79xbf16>, %[[KB:[a-z0-9]+]]: tensor<1x40xi32>
// BWD: attn.backward_tile {{.*}} mod_args(%[[TAB]], %[[KB]] : tensor<2x79xbf16>, tensor<1x40xi32>)
// BWD: ^bb0({{.*}}, %{{.*}}: tensor<2x79xbf16>, %{{.*}}: tensor<1x40xi32>):
func.func @backward_two(%q: tensor<1x2x40x16xf32>, %k: tensor<1x2x40x16xf32>, %v: tensor<1x2x40x16xf32>,
                        %o: tensor<1x2x40x16xf32>, %do: tensor<1x2x40x16xf32>, %lse: tensor<1x2x40xf32>,
                        %table: tensor<2x79xbf16>, %keys: tensor<1x40xi32>)
    -> (tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse mod_args(%table, %keys : tensor<2x79xbf16>, tensor<1x40xi32>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %tab: tensor<2x79xbf16>, %kb: tensor<1x40xi32>):
    %c39 = arith.constant 39 : index
    %rel = arith.subi %kv, %qi : index
    %col = arith.addi %rel, %c39 : index
    %x = tensor.extract %tab[%h, %col] : tensor<2x79xbf16>
    %xf = arith.extf %x : bf16 to f32
    %y = tensor.extract %kb[%b, %kv] : tensor<1x40xi32>
    %yf = arith.sitofp %y : i32 to f32
    %a = arith.addf %s, %xf : f32
    %r = arith.addf %a, %yf : f32
    attn.yield %r : f32
  } : tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40xf32>
    -> tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>
  return %dq, %dk, %dv : tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>
}
