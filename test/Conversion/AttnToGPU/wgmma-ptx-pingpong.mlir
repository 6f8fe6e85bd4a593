// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent=false -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s < %t/fa_fwd_f16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_f16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519

// The default schedule: ping-pong of the consumer warpgroups on named
// barriers 1 and 2 (immediate ids) and the shared-memory epilogue (barriers
// 3 and 4, 16-byte stores of O); the wgmmas stay unserialised and nothing
// spills.
// CHECK: .maxntid 384, 1, 1
// CHECK-DAG: bar.arrive 1, 256;
// CHECK-DAG: bar.sync 1, 256;
// CHECK-DAG: bar.sync 2, 256;
// CHECK-DAG: bar.arrive 2, 256;
// CHECK-DAG: bar.sync 3, 128;
// CHECK-DAG: bar.sync 4, 128;
// CHECK-DAG: ld.shared.v4.b32
// CHECK-DAG: st.global.v4.b32
// CHECK-DAG: wgmma.mma_async.sync.aligned
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

func.func @f16(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
}
