// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" -fa-wgmma-bwd-ws=false > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=D64 < %t/fa_bwd_f16_d64_bq64_bkv128_w8_s2_window_l32_r0_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d64_bq64_bkv128_w8_s2_window_l32_r0_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519

// The 256-thread wgmma backward (-fa-wgmma-bwd-ws=false) in PTX: sm_90a,
// shared-memory wgmma for Sᵀ, dPᵀ and dQ (dQ with both operands transposed: imm-trans-a = 1,
// imm-trans-b = 1), register-A wgmma for dV and dK, a proxy fence before
// the barriers that publish cp.async data and dSᵀ to wgmma, and vector
// reductions into dq_accum. ptxas: no spills, the wgmmas unserialised.
// CHECK: .version 8.3
// CHECK: .target sm_90a
// CHECK: .entry fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a(
// CHECK: .maxntid 256, 1, 1
// CHECK-DAG: cp.async.cg.shared.global
// CHECK-DAG: fence.proxy.async.shared::cta;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 0,  0;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// CHECK-DAG: wgmma.wait_group.sync.aligned {{.*}}1;
// CHECK-DAG: red.global.add.v2.f32
// CHECK-DAG: ex2.approx.ftz.f32
// D64: .maxntid 256, 1, 1
// D64-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 1;
// D64-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {{.*}}, p, 1,  1, 1,  1;
// PTXAS: Compiling entry function 'fa_bwd_bwd_
// PTXAS-NEXT: Function properties
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

func.func @window(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %do: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 0 : i64} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
