// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s

// A score_mod whose last op is rewritten for the special-function unit (here
// math.log → lg2.approx·ln2, math.sqrt kept) hands the kernel the rewritten
// value: the kernel verifies and no math.log is left.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64
// CHECK-NOT: math.log
// CHECK: math.sqrt
// CHECK: %[[L:.+]] = llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK-NEXT: arith.mulf %[[L]], %{{.+}} : f32
// CHECK-NOT: math.log
// CHECK: gpu.return
func.func @log_last(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = math.tanh %s : f32
    %one = arith.constant 1.0 : f32
    %a = arith.addf %t, %one : f32
    %r = math.sqrt %a : f32
    %sq = arith.mulf %r, %r : f32
    %a2 = arith.addf %sq, %one : f32
    %l = math.log %a2 : f32
    attn.yield %l : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward: the derivative of the last op (1/x of the log) is tracked
// through the rewrite too.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d64
// CHECK-NOT: math.log
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK: gpu.return
func.func @log_last_bwd(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %one = arith.constant 1.0 : f32
    %sq = arith.mulf %s, %s : f32
    %a = arith.addf %sq, %one : f32
    %l = math.log %a : f32
    attn.yield %l : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}
