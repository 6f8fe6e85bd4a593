// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-warp-specialize -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM --enable-var-scope
// RUN: fa-opt %s -fa-lower-to-nvvm="split-kv=1 pack-gqa=1 block-q=32 warps=2 producer-warp=1 tma=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// REQUIRES: ptxas

// On sm_90 a split forward merges its tile's partials itself where the
// runtime launched the tile's splits as one thread block cluster: its last
// parameters are fa_merge's o, lse and o's strides, and after the partial
// rows are stored the consumers (the producer warp has its own branch and
// exits) merge the tile's rows, tile row r by the warp (r div S) mod 2 of
// split r mod S.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma(
// CHECK-SAME: %[[O:[^:]+]]: memref<1099511627776xbf16>, %[[LSE:[^:]+]]: memref<1099511627776xf32>, %[[BS:[^:]+]]: i64, %[[HS:[^:]+]]: i64, %[[RS:[^:]+]]: i64)
// CHECK: %[[Z:.+]] = gpu.block_id  z
// CHECK: %[[SPLITS:.+]] = arith.index_castui %arg11
// CHECK: %[[SPLIT:.+]] = arith.remui %[[Z]], %[[SPLITS]]
// CHECK: %[[ROWS:[^,]+]], %[[Q0:.+]] = attn_gpu.packed_rows
// CHECK: attn_gpu.producer_warp after 2 warps {
// CHECK: } consumers {
// CHECK: attn_gpu.store_output {{.+}} to %arg3[{{.+}}], %arg4[{{.+}}] {{.+}} packed %[[ROWS]] split %[[SPLIT]] of %arg5
// CHECK: attn_gpu.merge_cluster %arg3, %arg4 to %[[O]][{{.+}}], %[[LSE]] rows %[[Q0]] below %{{.+}} of [%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] split %[[SPLIT]] of %[[SPLITS]] packed %[[ROWS]] {block_rows = 32 : i64, warps = 2 : i64}
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return

// The merge runs where %cluster_nctarank is the split count, two or more
// (a lone split is left to fa_merge), after a
// cluster barrier that makes every split's stores visible (release on
// arrival, acquire on the wait; exited threads do not count), in a loop
// over the CTA's tile rows: from split + S·warp in steps of S·2.
// NVVM: %[[CTAS:.+]] = nvvm.read.ptx.sreg.cluster.nctarank : i32
// NVVM: %[[CTASI:.+]] = arith.index_castui %[[CTAS]] : i32 to index
// NVVM: %[[SPLIT:.+]] = arith.cmpi slt, %c1{{.*}}, %[[S:.+]] : index
// NVVM: %[[SAME:.+]] = arith.cmpi eq, %[[CTASI]], %[[S]] : index
// NVVM: %[[WHOLE:.+]] = arith.andi %[[SAME]], %[[SPLIT]] : i1
// NVVM: scf.if %[[WHOLE]] {
// NVVM-NEXT: llvm.inline_asm has_side_effects "barrier.cluster.arrive.release;\0A\09barrier.cluster.wait.acquire;", "~{memory}"
// NVVM: %[[STEP:.+]] = arith.muli %[[S]], %c2{{.*}} : index
// NVVM: scf.for %{{.+}} = %{{.+}} to %c32{{.*}} step %[[STEP]] {
// NVVM: scf.if
// NVVM: memref.load %arg4
// NVVM: gpu.shuffle  xor
// NVVM: vector.load %arg3

// The assembly: the partial rows' stores, then the cluster size, the barrier,
// and only then the loads of the partials; 168 registers (three CTAs an SM)
// and no spills.
// PTX: .entry fa_fwd_fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma(
// PTX: st.global.v2.b32
// PTX-NOT: ld.global
// PTX: mov.u32 {{.+}}, %cluster_nctarank;
// PTX-NOT: {{ld|st}}.global
// PTX: barrier.cluster.arrive.release;
// PTX-NEXT: barrier.cluster.wait.acquire;
// PTX: ld.global.b32
// PTX: shfl.sync.bfly.b32
// PTX: ld.global.v4.b32
// PTX: st.global.v2.b32
// PTXAS: Used 168 registers
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
func.func @decode(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}
