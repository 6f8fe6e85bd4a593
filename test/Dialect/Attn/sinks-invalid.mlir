// RUN: fa-opt %s -split-input-file -verify-diagnostics

// Sinks are one f32 logit per query head.

func.func @sinks_heads(%q: tensor<1x4x8x16xf16>, %k: tensor<1x2x8x16xf16>, %v: tensor<1x2x8x16xf16>, %s: tensor<2xf32>) {
  // expected-error @+1 {{expected sinks of one per query head, got 2 sinks and 4 heads}}
  %o, %l = attn.attention %q, %k, %v sinks(%s : tensor<2xf32>) : tensor<1x4x8x16xf16>, tensor<1x2x8x16xf16>, tensor<1x2x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @sinks_dtype(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %s: tensor<4xf16>) {
  // expected-error @+1 {{expected sinks to be a rank-1 tensor of f32 [heads], got 'tensor<4xf16>'}}
  %o, %l = attn.attention %q, %k, %v sinks(%s : tensor<4xf16>) : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

func.func @sinks_rank(%q: tensor<1x4x8x16xf16>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf16>, %s: tensor<1x4xf32>) {
  // expected-error @+1 {{expected sinks to be a rank-1 tensor of f32 [heads], got 'tensor<1x4xf32>'}}
  %o, %l = attn.attention %q, %k, %v sinks(%s : tensor<1x4xf32>) : tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16> -> tensor<1x4x8x16xf16>, tensor<1x4x8xf32>
  return
}

// -----

// Varlen: the head count is dimension 1 of the packed query.
func.func @sinks_varlen(%q: tensor<10x4x16xf16>, %k: tensor<12x4x16xf16>, %v: tensor<12x4x16xf16>, %cq: tensor<3xi32>, %ck: tensor<3xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{expected sinks of one per query head, got 8 sinks and 4 heads}}
  %o, %l = attn.attention %q, %k, %v varlen(%cq, %ck : tensor<3xi32>, tensor<3xi32>) sinks(%s : tensor<8xf32>) : tensor<10x4x16xf16>, tensor<12x4x16xf16>, tensor<12x4x16xf16> -> tensor<10x4x16xf16>, tensor<4x10xf32>
  return
}

// -----

func.func @grad_sinks_missing(%q: tensor<1x4x8x16xf32>, %s: tensor<4xf32>, %lse: tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected a grad_sinks result of type 'tensor<4xf32>' with sinks}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %q, %q, %lse sinks(%s : tensor<4xf32>)
      : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
  return
}

// -----

func.func @grad_sinks_without_sinks(%q: tensor<1x4x8x16xf32>, %lse: tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected no grad_sinks result without sinks}}
  %dq, %dk, %dv, %ds = attn.attention_backward %q, %q, %q, %q, %q, %lse
      : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<4xf32>
  return
}

// -----

func.func @grad_sinks_type(%q: tensor<1x4x8x16xf32>, %s: tensor<4xf32>, %lse: tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected grad_sinks of the sinks' type 'tensor<4xf32>', got 'tensor<?xf32>'}}
  %dq, %dk, %dv, %ds = attn.attention_backward %q, %q, %q, %q, %q, %lse sinks(%s : tensor<4xf32>)
      : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<?xf32>
  return
}

// -----

func.func @bwd_sinks_heads(%q: tensor<1x4x8x16xf32>, %s: tensor<3xf32>, %lse: tensor<1x4x8xf32>) {
  // expected-error @+1 {{expected sinks of one per query head, got 3 sinks and 4 heads}}
  %dq, %dk, %dv, %ds = attn.attention_backward %q, %q, %q, %q, %q, %lse sinks(%s : tensor<3xf32>)
      : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<3xf32>
  return
}
