// mask_mod: a region (b, h, q_idx, kv_idx, mod_args...) -> i1 that masks
// elements out. It round-trips (also next to a score_mod, sharing the
// mod_args), every pass carries it to the ops it builds, attn-tile and
// attn-recompute-backward mask every tile under it (no block is known to lie
// inside a mask_mod) while the enum mask still bounds the key loop, and
// attn-decompose inlines it into the mask select.
// RUN: fa-opt %s -split-input-file | fa-opt | FileCheck %s --check-prefix=ROUND
// RUN: fa-opt %s -split-input-file -mlir-print-op-generic | fa-opt | FileCheck %s --check-prefix=ROUND
// RUN: fa-opt %s -split-input-file -attn-online-softmax | FileCheck %s --check-prefix=ONLINE
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-tile="block-q=16 block-kv=16" | FileCheck %s --check-prefix=TILE
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-split-kv="splits=2 block-kv=16" | FileCheck %s --check-prefix=SPLIT
// RUN: fa-opt %s -split-input-file -attn-recompute-backward="block-q=16 block-kv=16" | FileCheck %s --check-prefix=BWD
// RUN: fa-opt %s -split-input-file -attn-online-softmax -attn-tile="block-q=16 block-kv=16" -attn-decompose -canonicalize | FileCheck %s --check-prefix=DECOMP

// ROUND-LABEL: func.func @document
// ROUND: attn.attention %{{.*}}, %{{.*}}, %{{.*}} mod_args(%{{.*}} : tensor<2x40xi32>) {mask = #attn.mask<causal>} mask_mod {
// ROUND: ^bb0(%{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %[[T:.+]]: tensor<2x40xi32>):
// ROUND: tensor.extract %[[T]]
// ROUND: attn.yield %{{.*}} : i1
// ONLINE-LABEL: func.func @document(
// ONLINE-SAME: %[[D:[a-z0-9]+]]: tensor<2x40xi32>
// ONLINE: attn.online_attention {{.*}} mod_args(%[[D]] : tensor<2x40xi32>) {apply_mask, mask = #attn.mask<causal>} mask_mod {
// ONLINE: arith.cmpi eq
// ONLINE: attn.yield %{{.*}} : i1
// The causal band still bounds the key loop; every tile is masked (no
// scf.if choosing an unmasked tile).
// TILE-LABEL: func.func @document(
// TILE-SAME: %[[D:[a-z0-9]+]]: tensor<2x40xi32>
// TILE: scf.forall
// TILE: scf.for
// TILE-NOT: scf.if
// TILE: attn.online_attention {{.*}} mod_args(%[[D]] : tensor<2x40xi32>) {apply_mask, mask = #attn.mask<causal>} mask_mod {
// TILE: ^bb0({{.*}}, %[[T:.+]]: tensor<2x40xi32>):
// TILE: tensor.extract %[[T]][%
// TILE-NOT: scf.if
// TILE: scf.forall.in_parallel
// SPLIT-LABEL: func.func @document(
// SPLIT-SAME: %[[D:[a-z0-9]+]]: tensor<2x40xi32>
// SPLIT: scf.forall
// SPLIT: attn.online_attention {{.*}} mod_args(%[[D]] : tensor<2x40xi32>) {apply_mask, mask = #attn.mask<causal>} mask_mod {
// SPLIT: attn.yield %{{.*}} : i1
// SPLIT: attn.merge
// DECOMP-LABEL: func.func @document(
// DECOMP-SAME: %[[D:[a-z0-9]+]]: tensor<2x40xi32>
// DECOMP: linalg.generic
// DECOMP: tensor.extract %[[D]][%{{.*}}, %{{.*}}] : tensor<2x40xi32>
// DECOMP: tensor.extract %[[D]][%{{.*}}, %{{.*}}] : tensor<2x40xi32>
// DECOMP: %[[SAME:.+]] = arith.cmpi eq
// DECOMP: %[[BOTH:.+]] = arith.andi %{{.*}}, %[[SAME]] : i1
// DECOMP: arith.select %[[BOTH]]
// DECOMP-NOT: attn.
// DECOMP: return
func.func @document(%q: tensor<2x4x40x16xf32>, %k: tensor<2x2x40x16xf32>, %v: tensor<2x2x40x16xf32>, %doc: tensor<2x40xi32>)
    -> (tensor<2x4x40x16xf32>, tensor<2x4x40xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<2x40xi32>) {mask = #attn.mask<causal>} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<2x40xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<2x40xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<2x40xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<2x4x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32> -> tensor<2x4x40x16xf32>, tensor<2x4x40xf32>
  return %o, %lse : tensor<2x4x40x16xf32>, tensor<2x4x40xf32>
}

// -----

// A mask_mod without an enum mask sets apply_mask; the score_mod and the
// mask_mod both take both mod_args. The backward's tiles carry both regions.
// ROUND-LABEL: func.func @prefix_lm_with_bias
// ROUND: mod_args(%{{.*}}, %{{.*}} : tensor<2x40xf32>, tensor<2xi64>) score_mod {
// ROUND: } mask_mod {
// BWD-LABEL: func.func @prefix_lm_with_bias(
// BWD-SAME: %[[B:[a-z0-9]+]]: tensor<2x40xf32>, %[[P:[a-z0-9]+]]: tensor<2xi64>
// BWD: scf.for
// BWD-NOT: scf.if
// BWD: attn.backward_tile {{.*}} mod_args(%[[B]], %[[P]] : tensor<2x40xf32>, tensor<2xi64>) {apply_mask} score_mod {
// BWD: } mask_mod {
// BWD: arith.ori
// BWD: attn.yield %{{.*}} : i1
func.func @prefix_lm_with_bias(%q: tensor<2x2x40x16xf32>, %k: tensor<2x2x40x16xf32>, %v: tensor<2x2x40x16xf32>,
    %o: tensor<2x2x40x16xf32>, %do: tensor<2x2x40x16xf32>, %lse: tensor<2x2x40xf32>,
    %bias: tensor<2x40xf32>, %prefix: tensor<2xi64>)
    -> (tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse mod_args(%bias, %prefix : tensor<2x40xf32>, tensor<2xi64>) score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<2x40xf32>, %p: tensor<2xi64>):
    %x = tensor.extract %t[%b, %kv] : tensor<2x40xf32>
    %r = arith.addf %s, %x : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<2x40xf32>, %p: tensor<2xi64>):
    %n = tensor.extract %p[%b] : tensor<2xi64>
    %ni = arith.index_cast %n : i64 to index
    %in = arith.cmpi slt, %kv, %ni : index
    %causal = arith.cmpi sle, %kv, %qi : index
    %r = arith.ori %in, %causal : i1
    attn.yield %r : i1
  } : tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40xf32>
    -> tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>
  return %dq, %dk, %dv : tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32>
}
