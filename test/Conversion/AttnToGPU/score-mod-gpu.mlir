// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu -canonicalize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm > %t.sync.mlir
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.wgmma.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.sync.mlir %t && %python %S/Inputs/extract-ptx.py %t.wgmma.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_mod_softcap.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq32_bkv64_w4_s1_causal_sm90a_mod_softcap.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_mod_softcap.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS-WS

// score_mod reaches the kernels through the same builder as the CPU
// decomposition (attn::buildScore): each S element is scaled by the kernel's
// run-time scale (%arg10 forward, %arg14 backward), then modified, its
// transcendentals on the special-function unit: tanh(x) = 1 − 2/(2^(2x·log2e)
// + 1), x/30 as x·(1/30). The softmax then folds log2(e) alone into its FMA.
// The backward multiplies dS by the mod's derivative times the scale.

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_mod_softcap(
// CHECK-SAME: %[[SCALE:arg10]]: f32
// CHECK-DAG: %[[LOG2E:.+]] = arith.constant 1.44269502 : f32
// CHECK-DAG: %[[CAP:.+]] = arith.constant 3.000000e+01 : f32
// CHECK-DAG: %[[INVCAP:.+]] = arith.constant 0.0333333351 : f32
// CHECK-DAG: %[[TWOLOG2E:.+]] = arith.constant 2.885390e+00 : f32
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[MTWO:.+]] = arith.constant -2.000000e+00 : f32
// The chain scale·(1/30)·2log2e is one loop-invariant factor, one multiply
// per score:
// CHECK: %[[K1:.+]] = arith.mulf %[[SCALE]], %[[INVCAP]] : f32
// CHECK-NEXT: %[[K:.+]] = arith.mulf %[[K1]], %[[TWOLOG2E]] : f32
// CHECK-NEXT: %[[X2:.+]] = arith.mulf %{{.+}}, %[[K]] : f32
// CHECK-NEXT: %[[E:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[X2]])
// CHECK-NEXT: %[[E1:.+]] = arith.addf %[[E]], %[[ONE]] : f32
// CHECK-NEXT: %[[R:.+]] = llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"(%[[E1]])
// CHECK-NEXT: %[[T:.+]] = llvm.intr.fma(%[[R]], %[[MTWO]], %[[ONE]])
// CHECK-NEXT: arith.mulf %[[T]], %[[CAP]] : f32
// CHECK: llvm.intr.fma(%{{.+}}, %[[LOG2E]], %{{.+}})
// CHECK-NOT: arith.mulf %[[SCALE]], %[[LOG2E]]
// CHECK-NOT: math.tanh
// CHECK: gpu.return

// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq32_bkv64_w4_s1_causal_sm90a_mod_softcap(
// CHECK-SAME: %[[BSCALE:arg14]]: f32
// CHECK-DAG: %[[BONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[BT:.+]] = llvm.intr.fma(%{{.+}}, %{{.+}}, %[[BONE]])
// CHECK-NEXT: %[[SQ:.+]] = arith.mulf %[[BT]], %[[BT]] : f32
// CHECK-NEXT: %[[DT:.+]] = arith.subf %[[BONE]], %[[SQ]] : f32
// d(score)/d(S) = (1 − t²)·(1/30)·30·scale, no terms for the constants and
// the constant factors folded (1/30·30 rounds to 1 in f32):
// CHECK-NEXT: %[[Y:.+]] = arith.mulf %[[BT]], %{{.+}} : f32
// CHECK-NEXT: %[[CHAIN:.+]] = arith.mulf %[[DT]], %[[BSCALE]] : f32
// dSᵀ = Pᵀ∘(dPᵀ − Delta) times the chain, not the scale:
// CHECK: vector.load
// CHECK: %[[DIFF:.+]] = arith.subf %{{.+}}, %{{.+}} : f32
// CHECK-NEXT: %[[PD:.+]] = arith.mulf %{{.+}}, %[[DIFF]] : f32
// CHECK-NEXT: arith.mulf %[[PD]], %[[CHAIN]] : f32

// PTXAS-NOT: bytes spill stores
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill stores

// The warp-specialised wgmma backward keeps softcap's d(score)/d(S) at a cost
// of at most 12 bytes of spills in its consumer (it still runs 1.25-1.3x the
// 8-warp kernel, which does not spill):
// PTXAS-WS-NOT: {{([2-9][0-9]|1[3-9]|[0-9]{3,})}} bytes spill stores
// PTXAS-WS: Used {{[0-9]+}} registers

func.func @softcap(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>, attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
func.func @softcap_bwd(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse {mask = #attn.mask<causal>, attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// A tanh that allows approximate functions (fastmath<afn>) is one
// tanh.approx.f32 (llvm.intr.tanh with afn), no ex2/rcp pair.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_mod_softcap_fast(
// CHECK: llvm.intr.tanh(%{{.+}}) {fastmathFlags = #llvm.fastmath<afn>} : (f32) -> f32
// CHECK-NOT: llvm.nvvm.rcp.approx
// CHECK: gpu.return
func.func @softcap_fast(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>, attn.score_mod_name = "softcap_fast"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x fastmath<afn> : f32
    %r = arith.mulf %t, %cap : f32
    attn.yield %r : f32
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
