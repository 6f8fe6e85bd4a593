// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=D64 < %t/fa_bwd_f16_d64_bq64_bkv128_w12_s2_window_l32_r0_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d128_bq64_bkv128_w12_s2_causal_bottom_right_wgmma_sm90a.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d64_bq64_bkv128_w12_s2_window_l32_r0_wgmma_sm90a.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519

// The warp-specialised wgmma backward (the default, -fa-wgmma-bwd-ws) in
// PTX: 384 threads, one CTA per SM, setmaxnreg 24 / 240; 4-D TMA loads (over
// the caller's strides) of K, V, Q and dO (cp.async.bulk.tensor on
// mbarriers); dQ leaves the main kernel
// by one bulk reduce-add per tile, with no red.global.add and no cp.async.
// fa_bwd_post reads the row-swizzled dq_accum. ptxas: no spills in any of
// the kernels, setmaxnreg honoured (no C7508), no wgmma serialisation.
// CHECK: .version 8.3
// CHECK: .target sm_90a
// CHECK-LABEL: .entry fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a(
// CHECK: .maxntid 384, 1, 1
// CHECK-NEXT: .minnctapersm 1
// CHECK-NOT: red.global.add
// CHECK-NOT: cp.async.cg
// CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 24;
// CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 240;
// CHECK-DAG: cvta.param.u64
// CHECK-DAG: prefetch.tensormap
// CHECK-DAG: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-DAG: mbarrier.arrive.expect_tx
// CHECK-DAG: mbarrier.try_wait.parity
// CHECK-DAG: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// CHECK-DAG: cp.async.bulk.wait_group.read 0;
// CHECK-DAG: bar.sync 1, 256;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// CHECK-NOT: red.global.add
// CHECK-NOT: cp.async.cg
// CHECK-NOT: ld.acquire
// CHECK-NOT: red.release
// CHECK-NOT: fence.proxy.async.global
// CHECK-LABEL: .entry fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a(
// CHECK: xor.b{{32|64}}
// D64: .entry fa_bwd_bwd_f16_d64_bq64_bkv128_w12_s2_window_l32_r0_wgmma_sm90a(
// D64-NOT: red.global.add
// D64-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {{.*}}, p, 1,  1, 1,  1;
// D64-DAG: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// D64-NOT: red.global.add
// D64: .entry fa_bwd_post_
// PTXAS-COUNT-3: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

func.func @causal_bf16_d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

func.func @none_bf16_d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %do: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<none>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>
}

// -----

func.func @bottom_right_f16_d128(%q: tensor<?x?x?x128xf16>, %k: tensor<?x?x?x128xf16>, %v: tensor<?x?x?x128xf16>, %o: tensor<?x?x?x128xf16>, %do: tensor<?x?x?x128xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>
}

// -----

func.func @window_f16_d64(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %do: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 0 : i64} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
