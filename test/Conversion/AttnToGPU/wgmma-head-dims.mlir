// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=GPU --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX96 < %t/fa_fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=PTX256 < %t/fa_fwd_f16_d256_bq128_bkv64_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=PTX192 < %t/fa_fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx
// RUN: grep -c cp.async.bulk.tensor.4d %t/fa_fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a.ptx | FileCheck %s --check-prefix=TMA96
// RUN: grep -c cp.async.bulk.tensor.4d %t/fa_fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx | FileCheck %s --check-prefix=TMA192
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_f16_d256_bq128_bkv64_w12_s2_causal_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7513 --implicit-check-not=C7508 --implicit-check-not=C7514 --implicit-check-not=C7519

// The wgmma forward beyond d64/d128 (issue 19). Every kernel assembles for
// sm_90a without spills and without serialised wgmmas.
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

// D = Dv = 96: 64-column slabs as at d128 (the second TMA box of a row is
// half past D, zero-filled, and counted in the transaction bytes: 96 x 128
// x 2 a K or V tile, 192 x 128 x 2 the Q tile). Without a mask the plain
// forward takes 192 query rows (three consumer warpgroups of 160 registers)
// and 96-key tiles, the widest that fit them (1.05-1.11x the 128 x 128
// tile, PERF.md); Q·Kᵀ in 6 k16 steps (4 in slab 0, 2 in slab 1) as m64n96,
// P·V as m64n96.
// PLAN: attn.kernel_plan = {block_kv = 96 : i64, block_q = 192 : i64, grid = "blocks", mma = "wgmma", {{.*}} tag = "fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a"
// GPU-LABEL: gpu.module @fa_fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a
// GPU: gpu.func @fa_fwd_fwd_bf16_d96_bq192_bkv96_w16_s2_none_wgmma_sm90a(
// GPU-SAME: %{{.*}}: f32, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, {{.*}}: i64) kernel
// GPU-SAME: fa.shared_bytes = 147456
// GPU-SAME: known_block_size = array<i32: 512, 1, 1>
// PTX96: .maxntid 512, 1, 1
// PTX96-DAG: mov.b32 {{%r[0-9]+}}, 24576;
// PTX96-DAG: mov.b32 {{%r[0-9]+}}, 49152;
// PTX96-DAG: wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// PTX96-DAG: setmaxnreg.inc.sync.aligned.u32 {{.*}}160;
// Q, K and V are two boxes each (Q once, K and V in the loop and, ragged
// first, ahead of it: 2 + 2 x 2 x 2).
// TMA96: {{^}}10{{$}}
func.func @d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> (tensor<?x?x?x96xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x96xbf16>, tensor<?x?x?xf32>
}

// -----

// D = Dv = 256: 64-key tiles (O is 128 f32 per consumer thread), Q 64 KB and
// two 64-key K/V stages of 32 KB each: 196608 bytes; S as m64n64 over 16
// k16 steps, P·V as m64n256 over 4.
// PLAN: attn.kernel_plan = {block_kv = 64 : i64, block_q = 128 : i64, grid = "blocks", mma = "wgmma", {{.*}} tag = "fwd_f16_d256_bq128_bkv64_w12_s2_causal_wgmma_sm90a"
// GPU-LABEL: gpu.module @fa_fwd_f16_d256_bq128_bkv64_w12_s2_causal_wgmma_sm90a
// GPU: gpu.func @fa_fwd_fwd_f16_d256_bq128_bkv64_w12_s2_causal_wgmma_sm90a(
// GPU-SAME: fa.shared_bytes = 196608
// PTX256-DAG: mov.b32 {{%r[0-9]+}}, 65536;
// PTX256-DAG: mov.b32 {{%r[0-9]+}}, 32768;
// PTX256-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16
// PTX256-DAG: wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16
func.func @d256(%q: tensor<?x?x?x256xf16>, %k: tensor<?x?x?x256xf16>, %v: tensor<?x?x?x256xf16>) -> (tensor<?x?x?x256xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16> -> tensor<?x?x?x256xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x256xf16>, tensor<?x?x?xf32>
}

// -----

// D = 192, Dv = 128 (DeepSeek): Q·Kᵀ over 12 k16 steps in three slabs, P·V
// as m64n128; Q and K tiles of 48 KB, V 32 KB: 49152 + 2 x 81920 bytes.
// PLAN: attn.kernel_plan = {block_kv = 128 : i64, block_q = 128 : i64, grid = "blocks", mma = "wgmma", {{.*}} tag = "fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a"
// GPU-LABEL: gpu.module @fa_fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a
// GPU: gpu.func @fa_fwd_fwd_bf16_d192v128_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// GPU-SAME: fa.shared_bytes = 212992
// PTX192-DAG: mov.b32 {{%r[0-9]+}}, 49152;
// PTX192-DAG: mov.b32 {{%r[0-9]+}}, 32768;
// PTX192-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 0,  0;
// PTX192-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// Q, K: 3 boxes, V: 2 (Q once, K and V in the loop).
// TMA192: {{^}}8{{$}}
func.func @d192v128(%q: tensor<?x?x?x192xbf16>, %k: tensor<?x?x?x192xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
