// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu -canonicalize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm > %t.sync.mlir
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.wgmma.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.sync.mlir %t && %python %S/Inputs/extract-ptx.py %t.wgmma.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi_slopes.ptx
// RUN: FileCheck %s --check-prefix=PTX-CVT < %t/fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi_slopes.ptx
// RUN: FileCheck %s --check-prefix=PTX-BWD < %t/fa_bwd_bf16_d64_bq64_bkv64_w4_s1_none_sm90a_mod_rel_bias.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi_slopes.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv64_w4_s1_none_sm90a_mod_rel_bias.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_mod_alibi_slopes.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a_mod_rel_bias.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// REQUIRES: ptxas

// mod_args reach the kernels that evaluate scores as parameters after every
// other one: per mod_arg a global pointer (!llvm.ptr<1>) and its extents as
// i32. Each read clamps its indices into those extents (the CPU rule) and
// loads through the read-only path: an invariant load from the global
// space, ld.global.nc in PTX.

// The forward's mod_args follow its 12 stride parameters (11-22).
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_mod_alibi_slopes(
// CHECK-SAME: %arg22: i64, %[[SLOPES:arg23]]: !llvm.ptr<1>, %[[H:arg24]]: i32)
// CHECK: %[[N:.+]] = arith.index_cast %[[H]] : i32 to index
// CHECK: %[[LAST:.+]] = arith.subi %[[N]], %c1 : index
// CHECK: %[[LOW:.+]] = arith.minsi %{{.+}}, %[[LAST]] : index
// CHECK: %[[IDX:.+]] = arith.maxsi %[[LOW]], %c0 : index
// CHECK: %[[OFF:.+]] = arith.index_cast %[[IDX]] : index to i64
// CHECK: %[[PTR:.+]] = llvm.getelementptr %[[SLOPES]][%[[OFF]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK: llvm.load %[[PTR]] invariant : !llvm.ptr<1> -> f32
// CHECK: gpu.return
// PTX: .param .u64 {{.+}}_param_23,
// PTX-NEXT: .param .u32 {{.+}}_param_24
// PTX: ld.global.nc.b32
// ALiBi is query-additive, so attn-gpu-anchor-score-mod evaluates both rows
// of a lane at its first row's query, and f32(kv − q0) is converted once
// per key tile (the key's column offsets as f32 adds), not once per score
// element (32 per tile) nor per row; the finalisation's row shift,
// slope·f32(q0 − q_r), folds to a constant difference of rows:
// PTX-CVT-COUNT-1: cvt.rn.f32.s32
// PTX-CVT-NOT: cvt.rn.f32.s32
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
func.func @alibi_slopes(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %slopes: tensor<?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%slopes : tensor<?xf32>) {mask = #attn.mask<causal>, attn.score_mod_name = "alibi_slopes"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<?xf32>):
    %slope = tensor.extract %t[%h] : tensor<?xf32>
    %d = arith.subi %kv, %qi : index
    %di = arith.index_cast %d : index to i32
    %df = arith.sitofp %di : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward (its mod_args after the 18 strides, 15-32): a bf16 table
// [H, 8191] of relative positions read at
// (h, kv - q + 4095), a row-major offset from its two extents; the
// derivative treats it as a constant.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d64_bq64_bkv64_w4_s1_none_sm90a_mod_rel_bias(
// CHECK-SAME: %arg32: i64, %[[TAB:arg33]]: !llvm.ptr<1>, %[[ROWS:arg34]]: i32, %[[COLS:arg35]]: i32)
// CHECK: %[[ROWN:.+]] = arith.index_cast %[[ROWS]] : i32 to index
// CHECK: arith.minsi %{{.+}}, %{{.+}} : index
// CHECK: %[[COLN:.+]] = arith.index_cast %[[COLS]] : i32 to index
// CHECK: %[[COLLAST:.+]] = arith.subi %[[COLN]], %c1 : index
// CHECK: %[[COLLOW:.+]] = arith.minsi %{{.+}}, %[[COLLAST]] : index
// CHECK: %[[COL:.+]] = arith.maxsi %[[COLLOW]], %c0 : index
// CHECK: %[[ROW:.+]] = arith.muli %{{.+}}, %{{.+}} : index
// CHECK-NEXT: %[[LIN:.+]] = arith.addi %[[ROW]], %[[COL]] : index
// CHECK: %[[OFF:.+]] = arith.index_cast %[[LIN]] : index to i64
// CHECK: %[[PTR:.+]] = llvm.getelementptr %[[TAB]][%[[OFF]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK: llvm.load %[[PTR]] invariant : !llvm.ptr<1> -> bf16
// CHECK: gpu.return
// PTX-BWD: ld.global.nc.b16
func.func @rel_bias_bwd(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>, %table: tensor<?x?xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse mod_args(%table : tensor<?x?xbf16>) {attn.score_mod_name = "rel_bias"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xbf16>):
    %center = arith.constant 4095 : index
    %d = arith.subi %kv, %qi : index
    %rel = arith.addi %d, %center : index
    %x = tensor.extract %t[%h, %rel] : tensor<?x?xbf16>
    %xf = arith.extf %x : bf16 to f32
    %r = arith.addf %s, %xf : f32
    attn.yield %r : f32
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}
