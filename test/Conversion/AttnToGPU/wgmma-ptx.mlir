// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent=false -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: FileCheck %s < %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=PTX64 < %t/fa_fwd_f16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_f16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508

// The sm_90a wgmma forward: PTX 8.3 (tensor-map fence), 384 threads (a
// producer warpgroup and two consumers), TMA bulk tensor loads completing on
// mbarriers, setmaxnreg, shared-memory wgmma for Q·Kᵀ and register-A wgmma
// with a transposed V descriptor for P·V; ptxas reports no spills and does
// not serialise the wgmmas.
// CHECK: gpu.binary @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90a", features = "+ptx83">
// PTX: .version 8.3
// PTX: .target sm_90a
// PTX: .extern .shared .align 1024 .b8 fa_smem_16bf[];
// PTX: .entry fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// The tensor maps are 128-byte __grid_constant__ parameters, used by their
// generic address (cvta.param) where a TMA load or prefetch needs them.
// PTX-COUNT-3: .param .align 64 .b8 fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_param_{{1[123]}}[128]
// PTX: .maxntid 384, 1, 1
// PTX-DAG: mbarrier.init.shared.b64
// PTX-DAG: setmaxnreg.inc.sync.aligned.u32 {{.*}}240;
// PTX-DAG: setmaxnreg.dec.sync.aligned.u32 {{.*}}24;
// PTX-NOT: fence.proxy.tensormap
// PTX-NOT: ld.param.b64 {{.*}}_param_1{{[123]}}]
// PTX-DAG: mov.b64 [[QP:%rd[0-9]+]], fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_param_11;
// PTX-DAG: cvta.param.u64 [[QP]], [[QP]];
// PTX-DAG: prefetch.tensormap [%rd{{[0-9]+}}];
// PTX-DAG: mbarrier.arrive.expect_tx.shared.b64
// PTX-DAG: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX-DAG: mbarrier.try_wait.parity.shared.b64
// PTX-DAG: wgmma.fence.sync.aligned;
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 0,  0;
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// PTX-DAG: wgmma.commit_group.sync.aligned;
// PTX-DAG: wgmma.wait_group.sync.aligned {{.*}}1;
// PTX-DAG: ex2.approx.ftz.f32
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// CHECK: gpu.binary @fa_fwd_f16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a
// PTX64: .maxntid 384, 1, 1
// PTX64-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
// PTX64-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16
// PTX64-DAG: cp.async.bulk.tensor.4d
func.func @f16(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
}
