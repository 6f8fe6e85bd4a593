// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=GPU --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx
// RUN: grep -c cp.async.bulk.tensor.4d %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=TMA
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 .*, p, 1,  1, 0,  0;" %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT12
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 .*, p, 1, 1, 1;" %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT8
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 .*, p, 1,  1, 1,  1;" %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT8
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 .*, p, 1,  1, 1,  1;" %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT8
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d96_bq64_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_f16_d96_bq64_bkv128_w12_s2_window_l64_r16_wgmma_sm90a.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// The 256-thread cp.async variant (-fa-wgmma-bwd-ws=false) at d96 too.
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" -fa-wgmma-bwd-ws=false > %t.cp.mlir
// RUN: rm -rf %t.cp && mkdir -p %t.cp && %python %S/Inputs/extract-ptx.py %t.cp.mlir %t.cp
// RUN: FileCheck %s --check-prefix=CPASYNC < %t.cp/fa_bwd_bf16_d96_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t.cp/fa_bwd_bf16_d96_bq64_bkv128_w8_s2_causal_wgmma_sm90a.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519

// The wgmma backward beyond d64/d128 (issue 19): D = Dv = 96. Every kernel
// (pre, main, post) assembles for sm_90a without spills and without
// serialised wgmmas.
// PTXAS-COUNT-3: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

// Tiles in 64-column slabs as in the d96 forward (K, V 128 x 128, Q, dO
// 64 x 128 per stage; the second TMA box of a row half past D, zero-filled
// and counted in the transaction bytes); dQ tiles of 64 x 96 f32:
// 2·128·128·2 + 2·(2·64·128·2) + 2·128·64·2 + 1024 + 2·64·96·4 bytes.
// PLAN: attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, {{.*}}mma = "wgmma", {{.*}}tag = "bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a"
// GPU-LABEL: gpu.module @fa_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a
// GPU: gpu.func @fa_bwd_bwd_bf16_d96_bq64_bkv128_w12_s2_none_wgmma_sm90a(
// The four maps, then the 18 strides of q, k, v, do, dk, dv.
// GPU-SAME: %{{[^:]+}}: f32, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %{{[^:]+}}: !llvm.ptr, %arg19: i64{{.*}}, %arg36: i64) kernel
// GPU-SAME: fa.shared_bytes = 214016
// GPU-SAME: known_block_size = array<i32: 384, 1, 1>
// GPU-COUNT-4: nvgpu.tma.async.load {{.*}} -> memref<1x1x128x64xbf16
// PTX: .maxntid 384, 1, 1
// PTX-DAG: setmaxnreg.inc.sync.aligned.u32 240;
// K and V: 128 rows of two whole boxes; Q and dO: 64 rows.
// PTX-DAG: mov.b32 {{%r[0-9]+}}, 32768;
// PTX-DAG: mov.b32 {{%r[0-9]+}}, 16384;
// Sᵀ and dPᵀ as m64n64 over 6 k16 steps each (COUNT12), dV and dK as
// m64n96 with register A over 4 k16 steps each (COUNT8).
// dQ = dS·K: a warpgroup's 48 columns in two pieces, each inside one slab
// of K (32 at column 0 / 64, 16 at 32 / 48), both operands MN-major, 8 k16
// steps each (COUNT8).
// COUNT12: {{^}}12{{$}}
// COUNT8: {{^}}8{{$}}
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// PTX-DAG: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// PTX-NOT: red.global.add
// PTX-LABEL: .entry fa_bwd_post_
// PTX: xor.b{{16|32|64}}
// TMA: {{^}}8{{$}}
// The cp.async kernel adds its pieces with red.global.
// CPASYNC: .maxntid 256, 1, 1
// CPASYNC-DAG: wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// CPASYNC-DAG: red.global.add
func.func @none_bf16_d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>, %o: tensor<?x?x?x96xbf16>, %do: tensor<?x?x?x96xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<none>} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>
}

// -----

// PLAN: tag = "bwd_bf16_d96_bq64_bkv128_w12_s2_causal_wgmma_sm90a"
func.func @causal_bf16_d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>, %o: tensor<?x?x?x96xbf16>, %do: tensor<?x?x?x96xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>
}

// -----

// PLAN: tag = "bwd_f16_d96_bq64_bkv128_w12_s2_window_l64_r16_wgmma_sm90a"
func.func @window_f16_d96(%q: tensor<?x?x?x96xf16>, %k: tensor<?x?x?x96xf16>, %v: tensor<?x?x?x96xf16>, %o: tensor<?x?x?x96xf16>, %do: tensor<?x?x?x96xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<window>, window_left = 64 : i64, window_right = 16 : i64} : tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>
  return %dq, %dk, %dv : tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>, tensor<?x?x?x96xf16>
}
