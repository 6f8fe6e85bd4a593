// REQUIRES: ptxas
// RUN: fa-opt %s -fa-lower-to-nvvm="mma=wgmma" -fa-wgmma-lazy-rescale > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_lazy1.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_lazy1.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: fa-opt %s -fa-lower-to-nvvm="mma=wgmma" > %t.default.mlir
// RUN: rm -rf %t.d && mkdir -p %t.d && %python %S/Inputs/extract-ptx.py %t.default.mlir %t.d
// RUN: FileCheck %s --check-prefix=DEFAULT < %t.d/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx

// -fa-wgmma-lazy-rescale: each row's max growth is compared with 2^8
// (0f41000000 = 8.0 in log2 units) in the prologue's and the loop's softmax
// (two rows each); in the loop a warp votes whether every α is 1 and
// branches around the rescale of O. The wgmmas stay unserialised and nothing
// spills. Without the switch there is neither the comparison nor the vote.
// CHECK-COUNT-4: setp.le.f32 {{.*}}, 0f41000000;
// CHECK: vote.sync.all.pred
// CHECK: wgmma.mma_async.sync.aligned
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// DEFAULT-NOT: 0f41000000
// DEFAULT-NOT: vote.sync.all
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
