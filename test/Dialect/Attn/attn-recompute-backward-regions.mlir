// RUN: fa-opt %s -split-input-file -attn-recompute-backward -verify-diagnostics | FileCheck %s

// The backward differentiates the top-level ops of score_mod. A score that
// reaches the yield through a region op would get no derivative, so such an
// op is rejected by name; region ops that only see the indices stay constant
// with respect to the score and are accepted.

func.func @score_through_if(%q: tensor<1x1x8x16xf32>, %lse: tensor<1x1x8xf32>)
    -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) {
  // expected-error @+1 {{cannot differentiate score_mod op 'scf.if' with respect to the score: the score flows through its region}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %causal = arith.cmpi ule, %j, %i : index
    // expected-note @+1 {{score-dependent region op here}}
    %r = scf.if %causal -> (f32) {
      %twice = arith.addf %s, %s : f32
      scf.yield %twice : f32
    } else {
      scf.yield %s : f32
    }
    attn.yield %r : f32
  } : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8xf32>
      -> tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
  return %dq, %dk, %dv : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
}

// -----

func.func @score_through_for(%q: tensor<1x1x8x16xf32>, %lse: tensor<1x1x8xf32>)
    -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) {
  // expected-error @+1 {{cannot differentiate score_mod op 'scf.for' with respect to the score: the score flows through its region}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    // The score enters as the loop's initial value: s·s·s·s.
    // expected-note @+1 {{score-dependent region op here}}
    %r = scf.for %n = %c0 to %c3 step %c1 iter_args(%acc = %s) -> (f32) {
      %next = arith.mulf %acc, %s : f32
      scf.yield %next : f32
    }
    attn.yield %r : f32
  } : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8xf32>
      -> tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
  return %dq, %dk, %dv : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
}

// -----

// The region reads the score without taking it as an operand.
func.func @score_through_execute_region(%q: tensor<1x1x8x16xf32>, %lse: tensor<1x1x8xf32>)
    -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) {
  // expected-error @+1 {{cannot differentiate score_mod op 'scf.execute_region' with respect to the score: the score flows through its region}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    // expected-note @+1 {{score-dependent region op here}}
    %r = scf.execute_region -> f32 {
      %t = math.tanh %s : f32
      scf.yield %t : f32
    }
    attn.yield %r : f32
  } : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8xf32>
      -> tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
  return %dq, %dk, %dv : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
}

// -----

// A bias chosen by scf.if from the indices alone has no derivative to lose:
// the backward is built and keeps the region in its tiles.
// CHECK-LABEL: func @index_bias_through_if
// CHECK: attn.backward_tile
// CHECK: score_mod
// CHECK: scf.if
// CHECK: attn.yield
func.func @index_bias_through_if(%q: tensor<1x1x8x16xf32>, %lse: tensor<1x1x8xf32>)
    -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) {
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %causal = arith.cmpi ule, %j, %i : index
    %bias = scf.if %causal -> (f32) {
      %zero = arith.constant 0.0 : f32
      scf.yield %zero : f32
    } else {
      %penalty = arith.constant -4.0 : f32
      scf.yield %penalty : f32
    }
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8xf32>
      -> tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
  return %dq, %dk, %dv : tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>
}

