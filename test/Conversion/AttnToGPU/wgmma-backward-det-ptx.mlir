// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma deterministic=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det.ptx
// RUN: FileCheck %s --check-prefix=D64 < %t/fa_bwd_f16_d64_bq64_bkv128_w12_s2_window_l256_r0_wgmma_sm90a_det.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a_det.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d128_bq64_bkv128_w12_s2_causal_bottom_right_wgmma_sm90a_det.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d64_bq64_bkv128_w12_s2_window_l256_r0_wgmma_sm90a_det.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519

// The deterministic warp-specialised wgmma backward (deterministic=1) in
// PTX: fa_bwd takes a 20th parameter (the dQ semaphores, after the four
// tensor maps); the dQ writer spins on the tile's semaphore with
// ld.acquire.gpu and a nanosleep backoff, orders the bulk reduce-add after
// it with a proxy fence, waits for the reduction to complete (wait_group 0,
// not only .read), fences the async proxy's global writes and then adds one
// to the semaphore with release semantics. The tag ends in _det; ptxas: no
// spills, setmaxnreg honoured, no wgmma serialisation.
// CHECK: .version 8.3
// CHECK: .target sm_90a
// CHECK-LABEL: .entry fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det(
// CHECK: .param .align 64 .b8 fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det_param_18[128],
// CHECK-NEXT: .param .u64 .ptr .align 1 fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det_param_19,
// CHECK-NEXT: .param .u64 fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det_param_20,
// CHECK: .param .u64 fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det_param_37
// CHECK-NEXT: )
// CHECK: .maxntid 384, 1, 1
// CHECK-NOT: red.global.add.f32
// CHECK: ld.param.b64 [[SEMS:%rd[0-9]+]], [fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det_param_19];
// CHECK: spin:
// CHECK-NEXT: ld.acquire.gpu.global.b32 seen, [[[SEM:%rd[0-9]+]]];
// CHECK-NEXT: setp.eq.b32 ready, seen, %r{{[0-9]+}};
// CHECK-NEXT: @ready bra.uni done;
// CHECK-NEXT: nanosleep.u32 ns;
// CHECK: bra.uni spin;
// CHECK: fence.proxy.async.global;
// CHECK: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// CHECK: cp.async.bulk.commit_group;
// CHECK: cp.async.bulk.wait_group.read 0;
// CHECK: mbarrier.arrive
// CHECK: cp.async.bulk.wait_group 0;
// CHECK-NEXT: // end inline asm
// CHECK-NEXT: // begin inline asm
// CHECK-NEXT: fence.proxy.async.global;
// CHECK-NEXT: // end inline asm
// CHECK-NEXT: // begin inline asm
// CHECK-NEXT: red.release.gpu.global.add.u32 [[[SEM]]], 1;
// CHECK-NOT: red.global.add.f32
// CHECK-LABEL: .entry fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a_det(
// D64: .entry fa_bwd_bwd_f16_d64_bq64_bkv128_w12_s2_window_l256_r0_wgmma_sm90a_det(
// D64-DAG: ld.acquire.gpu.global.b32
// D64-DAG: cp.async.bulk.wait_group 0;
// D64-DAG: fence.proxy.async.global;
// D64-DAG: red.release.gpu.global.add.u32
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
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 256 : i64, window_right = 0 : i64} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
