// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu -canonicalize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm > %t.sync.mlir
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.wgmma.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.sync.mlir %t && %python %S/Inputs/extract-ptx.py %t.wgmma.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d64_bq64_bkv32_w4_s2_causal_sm90a_maskmod_document.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d64_bq64_bkv32_w4_s2_causal_sm90a_maskmod_document.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_maskmod_prefix_lm.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a_maskmod_document.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a_maskmod_prefix_lm.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: ls %t | FileCheck %s --check-prefix=FILES
// REQUIRES: ptxas

// A mask_mod reaches every kernel that evaluates scores: its tensors are
// mod_args (a global pointer and the extents, after every other parameter),
// and each score of every tile is selected against -inf by the inlined
// predicate, after the enum mask's band test and any score_mod. With the
// tag's _maskmod_<name>, the kernels never share a tag with plain ones.

// The forward: doc ids [B, N] read at (b, q) and (b, kv), clamped, and
// compared; a false compare selects -inf.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv32_w4_s2_causal_sm90a_maskmod_document(
// CHECK-SAME: %arg22: i64, %[[DOC:arg23]]: !llvm.ptr<1>, %[[ROWS:arg24]]: i32, %[[COLS:arg25]]: i32)
// CHECK: scf.for
// CHECK: %[[PQ:.+]] = llvm.getelementptr %[[DOC]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: %[[DQ:.+]] = llvm.load %[[PQ]] invariant : !llvm.ptr<1> -> i32
// CHECK: %[[PK:.+]] = llvm.getelementptr %[[DOC]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: %[[DK:.+]] = llvm.load %[[PK]] invariant : !llvm.ptr<1> -> i32
// CHECK: %[[SAME:.+]] = arith.cmpi eq, %[[DQ]], %[[DK]] : i32
// CHECK: arith.select %[[SAME]], %{{.+}}, %cst{{.*}} : f32
// CHECK: gpu.return
// PTX: .param .u64 {{.+}}_param_23,
// PTX-NEXT: .param .u32 {{.+}}_param_24,
// PTX-NEXT: .param .u32 {{.+}}_param_25
// PTX: ld.global.nc.b32
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// The wgmma forward is built too.
// FILES-DAG: fa_fwd_bf16_d64_bq128_bkv128_w12_s2_causal_wgmma_sm90a{{.*}}_maskmod_document.ptx
func.func @document(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %doc: tensor<?x?xi32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {mask = #attn.mask<causal>, attn.mask_mod_name = "document"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward: prefix lengths [B] after the 18 stride parameters; the
// mask_mod is applied to Sᵀ at the absolute (q, kv) of each element, so P
// (and dS) is 0 where it masks.
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_maskmod_prefix_lm(
// CHECK-SAME: %[[PRE:arg33]]: !llvm.ptr<1>, %[[N:arg34]]: i32)
// CHECK: %[[PP:.+]] = llvm.getelementptr %[[PRE]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: llvm.load %[[PP]] invariant : !llvm.ptr<1> -> i32
// CHECK: arith.ori
// CHECK: gpu.return
// FILES-DAG: fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a_maskmod_prefix_lm.ptx
func.func @prefix_lm_bwd(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>, %prefix: tensor<?xi32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse mod_args(%prefix : tensor<?xi32>) {attn.mask_mod_name = "prefix_lm"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?xi32>):
    %p = tensor.extract %t[%b] : tensor<?xi32>
    %pi = arith.index_cast %p : i32 to index
    %in = arith.cmpi slt, %kv, %pi : index
    %causal = arith.cmpi sle, %kv, %qi : index
    %r = arith.ori %in, %causal : i1
    attn.yield %r : i1
  } : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}
