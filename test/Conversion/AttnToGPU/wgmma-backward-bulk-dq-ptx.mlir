// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-wgmma-bwd-bulk-dq -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=D64 < %t/fa_bwd_f16_d64_bq64_bkv128_w8_s2_window_l32_r0_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d64_bq64_bkv128_w8_s2_window_l32_r0_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519

// The pipelined schedule with the switch: D = 64 fits (134656 B), D = 128
// (232960 B) is rejected.
// RUN: rm -rf %t.pipe && fa-aot -fa-wgmma-bwd-bulk-dq -fa-wgmma-bwd-pipeline --config bwd:bf16:d64:none:wgmma -o %t.pipe | FileCheck %s --check-prefix=PIPE
// RUN: FileCheck %s --check-prefix=D64 < %t.pipe/bwd_bf16_d64_bq64_bkv128_w8_s2_none_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t.pipe/bwd_bf16_d64_bq64_bkv128_w8_s2_none_wgmma_sm90a.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: not fa-opt %s -split-input-file -fa-wgmma-bwd-bulk-dq -fa-wgmma-bwd-pipeline -convert-attn-to-gpu="mma=wgmma" 2>&1 | FileCheck %s --check-prefix=TOOBIG
// RUN: fa-opt %s -split-input-file -fa-wgmma-bwd-bulk-dq -convert-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=SMEM

// -fa-wgmma-bwd-bulk-dq: each warpgroup stores its dQ (64 rows × D/2 f32)
// with 8-byte st.shared into its padded staging buffer after waiting for the
// last tile's bulk reads and meeting on its named barrier (1 or 2), fences
// the stores for the async proxy, meets again, and threads 0-63 add one row
// each with cp.reduce.async.bulk (D/2·4 bytes) in a bulk group; the CTA
// waits for its bulk groups before it exits. No red.global.add is left;
// ptxas: no spills, the wgmmas unserialised.
// CHECK: .version 8.3
// CHECK: .target sm_90a
// CHECK: .entry fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s2_causal_wgmma_sm90a(
// CHECK-NOT: red.global.add
// CHECK: cp.async.bulk.wait_group.read 0;
// CHECK-DAG: bar.sync 1, 128;
// CHECK-DAG: bar.sync 2, 128;
// CHECK-COUNT-16: st.shared.v2.b32
// CHECK-NEXT: fence.proxy.async.shared::cta;
// CHECK-DAG: bar.sync 1, 128;
// CHECK-DAG: bar.sync 2, 128;
// CHECK: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd{{[0-9]+}}], [%r{{[0-9]+}}], 256;
// CHECK: cp.async.bulk.commit_group;
// CHECK: cp.async.bulk.wait_group 0;
// CHECK-NOT: red.global.add
// CHECK: .entry fa_bwd_post_
// D64: .entry fa_bwd_bwd_
// D64-NOT: red.global.add
// D64: cp.async.bulk.wait_group.read 0;
// D64-COUNT-8: st.shared.v2.b32
// D64-NEXT: fence.proxy.async.shared::cta;
// D64: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd{{[0-9]+}}], [%r{{[0-9]+}}], 128;
// D64: cp.async.bulk.commit_group;
// D64: cp.async.bulk.wait_group 0;
// D64-NOT: red.global.add
// D64: .entry fa_bwd_post_
// PTXAS: Compiling entry function 'fa_bwd_bwd_
// PTXAS-NEXT: Function properties
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PIPE: bwd_bf16_d64_bq64_bkv128_w8_s2_none_wgmma_sm90a: registers {{[0-9]+}}, spill bytes 0, shared bytes 134656, mlir
// TOOBIG: the mma = wgmma backward needs 232960 bytes of shared memory with switches pipe1.bulkdq1, more than 232448 (-fa-wgmma-bwd-bulk-dq with -fa-wgmma-bwd-pipeline fits D = 64 only)
// Staging: 2 warpgroups × 64 rows × (D/2·4 + 16) bytes after the default
// layout (148480 B at D = 128, 82944 B at D = 64).
// SMEM: fa.shared_bytes = 183296
// SMEM: fa.shared_bytes = 101376
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

func.func @window(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %do: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 0 : i64} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
