// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent -convert-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=IR
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s < %t/fa_fwd_f16_d128_bq128_bkv128_w12_s2_causal_bottom_right_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_f16_d128_bq128_bkv128_w12_s2_causal_bottom_right_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519

// A persistent grid: every role walks tiles blockIdx.x, + gridDim.x, ...
// (the kernel is marked for the runtime's launch); the producer keeps 32
// registers, waits for the Q buffer's "empty" barrier before reloading it,
// and the consumers release it after a proxy fence. Nothing spills.
// IR: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// IR-SAME: fa.persistent
// IR: gpu.grid_dim x
// IR: scf.for {{.*}} : i32
// CHECK: .maxntid 384, 1, 1
// CHECK-DAG: %nctaid.x
// CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 32;
// CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 240;
// CHECK-DAG: fence.proxy.async.shared::cta;
// CHECK-DAG: mbarrier.init.shared.b64 [__mbarrier+72]
// CHECK-DAG: wgmma.mma_async.sync.aligned
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

func.func @bottom_right(%q: tensor<?x?x?x128xf16>, %k: tensor<?x?x?x128xf16>, %v: tensor<?x?x?x128xf16>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16> -> tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
}
