// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=IR
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent=false -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=OFF
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=ON
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: fa-opt %s -split-input-file -fa-wgmma-persistent -fa-lower-to-nvvm="mma=wgmma" > %t.on.mlir
// RUN: rm -rf %t.on && mkdir -p %t.on && %python %S/Inputs/extract-ptx.py %t.on.mlir %t.on
// RUN: %ptxas -arch=sm_90a -v %t.on/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_persistent.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519

// By default the maskless D = 64 forward runs on a persistent grid (the
// measured rule of -fa-wgmma-persistent); D = 128 and masked ones keep one
// CTA per query tile unless the switch forces it. A persistent kernel takes
// the tile counter after its three tensor maps (then the strides); its producer fetches tiles
// with an atomic add past the first (blockIdx.x), the last fetch of a
// launch puts the counter back to 0, and both roles walk tiles in scf.while
// loops that end on the tile published behind Q.
// IR-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent
// IR-SAME: %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %[[CTR:[^:]+]]: !llvm.ptr, %{{.*}}: i64)
// IR: gpu.block_id x
// IR: scf.while
// IR: llvm.atomicrmw add %[[CTR]]
// IR: llvm.store {{.*}}, %[[CTR]]
// IR: gpu.grid_dim x
// IR: scf.while
// IR-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// IR-NOT: scf.while
// IR: gpu.return
// OFF-NOT: _persistent
// ON: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent
// ON: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_persistent

// PTX: the producer walks tiles in 32 registers (its key loop in i32; it
// issues 4-D TMA loads with head and batch coordinates) and the consumers
// keep 232, Q has a full and an empty mbarrier (11 barriers
// with 2 stages), and the current tile sits after the tiles in shared memory.
// CHECK: .maxntid 384, 1, 1
// CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 32;
// CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 232;
// CHECK-DAG: mbarrier.init.shared.b64 [__mbarrier+72]
// CHECK-DAG: atom.global.add.u32
// CHECK-DAG: st.shared.b32 [fa_smem_32f+81920]
// CHECK-DAG: ld.shared.b32 {{.*}}, [fa_smem_32f+81920]
// CHECK-DAG: wgmma.mma_async.sync.aligned
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
func.func @none_d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// The grid option of the pass (the config fields `persistent` / `blocks` of
// fa-aot) overrides the default per kernel; it is checked like the others.
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma grid=blocks" | FileCheck %s --check-prefix=BLOCKS
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma grid=rows" 2>&1 | FileCheck %s --check-prefix=BADGRID
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="grid=persistent" 2>&1 | FileCheck %s --check-prefix=SYNCGRID
// RUN: rm -rf %t.aot && fa-aot --config fwd:bf16:d128:none:wgmma:persistent --config fwd:bf16:d64:none:wgmma:blocks -o %t.aot | FileCheck %s --check-prefix=AOT
// BLOCKS-NOT: _persistent
// BADGRID: error: 'attn.attention' op expected grid = persistent or blocks, got rows
// SYNCGRID: error: 'attn.attention' op grid = persistent applies to the mma = wgmma forward only, got mma = mma_sync
// AOT-DAG: fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_persistent: registers {{[0-9]+}}, spill bytes 0
// AOT-DAG: fwd_bf16_d64_bq128_bkv128_w12_s2_none_wgmma_sm90a: registers {{[0-9]+}}, spill bytes 0
func.func @grid_d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
