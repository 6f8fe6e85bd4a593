// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-bound-max | FileCheck %s
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu -attn-gpu-bound-max | FileCheck %s --check-prefix=WGMMA
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" -canonicalize | FileCheck %s --check-prefix=LOWER

// Softcapping, 30·tanh(s/30), lies in [−30, 30]: a range of 60·log2(e) ≈ 87
// powers of 2 in base 2, which bf16's P keeps. Each online softmax (the key
// loop's, whose masked tiles join the scf.if's two branches) takes the bound.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_softcap(
// CHECK: attn_gpu.score_mod
// CHECK: attn_gpu.online_softmax {{.+}} {max_bound = 3.000000e+01 : f64}
// CHECK-NOT: attn_gpu.online_softmax
// CHECK: gpu.return
// The wgmma forward's first key tile and its steady state both:
// WGMMA-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap(
// WGMMA-COUNT-2: attn_gpu.online_softmax {{.+}} {max_bound = 3.000000e+01 : f64}
// WGMMA-NOT: attn_gpu.online_softmax
// WGMMA: gpu.return
// Lowered: no row maximum and no rescale; a P is 2^(−60·log2(e)·r) with
// r = 1/(2^(2x·log2e) + 1): the mod's 30·(1 − 2r), log2(e) and the bound 30
// fold into one multiply, inside the branch of the tiles the mask spares
// (and the select of those it does not; in wgmma kernels: the mma.sync
// decode tile spills with the branches' exponents).
// LOWER-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap(
// LOWER-DAG: %[[K:.+]] = arith.constant -8.656170e+01 : f32
// LOWER-NOT: arith.maximumf
// LOWER: %[[R:.+]] = llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"
// LOWER: %[[IN:.+]]:64 = scf.if
// LOWER-NEXT: arith.mulf %[[R]], %[[K]] : f32
// LOWER: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[IN]]#0)
// LOWER-NOT: arith.maximumf
// LOWER: gpu.return
func.func @softcap(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>, attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// f16's P would lose the range's low end (its normal numbers start at
// 2^-14): no bound.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_softcap_f16(
// CHECK-NOT: max_bound
// CHECK: gpu.return
func.func @softcap_f16(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "softcap_f16"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
}

// -----

// A clamp to [−4, 5] (minimum, maximum, a select), then negated: [−5, 4],
// bound 4.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_clamp(
// CHECK: attn_gpu.online_softmax {{.+}} {max_bound = 4.000000e+00 : f64}
func.func @clamp(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "clamp"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %lo = arith.constant -4.0 : f32
    %hi = arith.constant 5.0 : f32
    %up = arith.minimumf %s, %hi : f32
    %both = arith.maximumf %up, %lo : f32
    %over = arith.cmpf ogt, %s, %hi : f32
    %c = arith.select %over, %hi, %both : f32
    %n = arith.negf %c : f32
    attn.yield %n : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// Bounded above only (a floor, or a table's bias added): the max stays a
// running one.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_floor(
// CHECK-NOT: max_bound
// CHECK: gpu.return
func.func @floor(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.score_mod_name = "floor"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %lo = arith.constant -4.0 : f32
    %r = arith.minimumf %s, %lo : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// A bias read from a tensor is unbounded, tanh of it or not.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a_mod_bias(
// CHECK-NOT: max_bound
// CHECK: gpu.return
func.func @bias(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %bias: tensor<?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%bias : tensor<?xf32>) {attn.score_mod_name = "bias"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %t: tensor<?xf32>):
    %x = tensor.extract %t[%j] : tensor<?xf32>
    %c = math.tanh %s : f32
    %r = arith.addf %c, %x : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
