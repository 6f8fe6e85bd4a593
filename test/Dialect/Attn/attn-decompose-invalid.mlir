// RUN: fa-opt %s -split-input-file -attn-decompose -verify-diagnostics

// A backward tile written by hand meets the same check when decomposed.
func.func @tile_region(%q: tensor<1x1x4x8xf32>, %lse: tensor<1x1x4xf32>, %acc: tensor<1x1x4x8xf32>, %i: index)
    -> (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) {
  // expected-error @+1 {{cannot differentiate score_mod op 'scf.if' with respect to the score}}
  %a, %b, %c = attn.backward_tile %q, %q, %q, %q, %lse, %lse into %acc, %acc, %acc at [%i, %i, %i, %i] of [%i, %i] score_mod {
  ^bb0(%s: f32, %bb: index, %h: index, %qi: index, %kj: index):
    %t = arith.constant true
    // expected-note @+1 {{score-dependent region op here}}
    %r = scf.if %t -> f32 {
      scf.yield %s : f32
    } else {
      scf.yield %s : f32
    }
    attn.yield %r : f32
  } : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>,
      tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
      -> tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
  return %a, %b, %c : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
}

// -----

// Only attn-tile knows which rows of a varlen batch belong to which sequence.
func.func @varlen(%q: tensor<1x2x9x8xf32>, %k: tensor<1x1x7x8xf32>, %v: tensor<1x1x7x8xf32>, %acc: tensor<1x2x9x8xf32>, %m: tensor<1x2x9xf32>, %l: tensor<1x2x9xf32>, %cu: tensor<3xi32>)
    -> (tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>) {
  %c0 = arith.constant 0 : index
  %nq = arith.constant 9 : index
  %nk = arith.constant 7 : index
  // expected-error @+1 {{expected attn-tile to cut a varlen batch into its sequences before attn-decompose}}
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk] varlen(%cu, %cu : tensor<3xi32>, tensor<3xi32>)
      : tensor<1x2x9x8xf32>, tensor<1x1x7x8xf32>, tensor<1x1x7x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32> -> tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>
  return %a, %mm, %ll : tensor<1x2x9x8xf32>, tensor<1x2x9xf32>, tensor<1x2x9xf32>
}
