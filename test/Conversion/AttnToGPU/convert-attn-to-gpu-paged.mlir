// RUN: fa-opt %s -attn-gpu-plan="split-kv=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: not fa-opt %s -attn-gpu-plan -attn-online-softmax -attn-tile -convert-attn-to-gpu 2>&1 | FileCheck %s --check-prefix=NOSPLIT
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM --enable-var-scope
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 block-q=32 warps=2 block-kv=128" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu -attn-gpu-pipeline -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=GROUPS --enable-var-scope

// A paged cache lowers to the split-KV kernel whose K and V tiles are
// gathered through the page table: after the strides come the page table
// and seqused_k (global pointers) and max_pages, page_size, num_pages. The
// CTA's key count is its sequence's seqused_k clamped to the capacity (the
// kernel's nk); K and V have no batch term in their base (the pools are
// [pages, page_size, Hkv, D]), and their copies read rows through the
// table row of the CTA's batch.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv_paged(
// CHECK-SAME: %{{[^:]+}}: f32, %{{[^:]+}}: i32, %{{[^:]+}}: i64,
// CHECK-SAME: %{{[^:]+}}: i64, %[[PT:[^:]+]]: !llvm.ptr<1>, %[[USED:[^:]+]]: !llvm.ptr<1>, %[[MAXP:[^:]+]]: i32, %[[PS:[^:]+]]: i32, %[[NP:[^:]+]]: i32)
// CHECK: %[[Z:.+]] = gpu.block_id z
// CHECK: %[[B:.+]] = arith.divui %[[Z]], %{{.+}} : index
// CHECK: %[[MAXPI:.+]] = arith.index_castui %[[MAXP]]
// CHECK: %[[PSI:.+]] = arith.index_castui %[[PS]]
// CHECK: %[[NPI:.+]] = arith.index_castui %[[NP]]
// CHECK: %[[ROW:.+]] = arith.muli %[[B]], %[[MAXPI]]
// CHECK: %[[AT:.+]] = llvm.getelementptr %[[USED]]
// CHECK: llvm.load %[[AT]] invariant
// CHECK: %[[LO:.+]] = arith.maxsi
// CHECK: %[[KEYS:.+]] = arith.minsi %[[LO]],
// CHECK: attn_gpu.async_copy %arg0[{{.+}}] rows {{.+}} below {{.+}} stride {{.+}} into
// CHECK: scf.for
// CHECK: attn_gpu.async_copy %arg1[{{.+}}] rows {{.+}} below %[[KEYS]] stride {{.+}} paged(%[[PT]][%[[ROW]], %[[PSI]], %[[NPI]]] : !llvm.ptr<1>) into
// CHECK: attn_gpu.async_copy %arg2[{{.+}}] rows {{.+}} below %[[KEYS]] stride {{.+}} paged(%[[PT]][%[[ROW]], %[[PSI]], %[[NPI]]] : !llvm.ptr<1>) into
// CHECK: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv_paged(

// A paged tile copy tests, once per tile, whether its 64 keys lie in one page
// (the first key's offset in its page + 64 <= page_size): then one table read
// and the contiguous copy from that page's rows. Else, a tile from a multiple
// of 16 keys (every split-KV tile) is gathered in 16-key groups, which never
// straddle a page: each thread copies a run of 8 consecutive rows (tid / 16
// · 8, the same column of each), reads the page of its run's first key once,
// and steps one row stride per row. Other tiles gather row by row, one table
// read per row a thread copies (8 here).
// NVVM: scf.for
// NVVM: %[[OFF:.+]] = arith.subi %{{.+}}, %{{.+}} : i32
// NVVM: %[[END:.+]] = arith.addi %[[OFF]], %c64_i32{{.*}} : i32
// NVVM: %[[ONE:.+]] = arith.cmpi ule, %[[END]], %{{.+}} : i32
// NVVM: scf.if %[[ONE]] {
// NVVM: llvm.load {{.+}} invariant
// NVVM-NOT: llvm.load
// NVVM: nvgpu.device_async_copy
// NVVM: nvvm.cp.async.commit.group
// NVVM-NEXT: } else {
// NVVM: %[[G:.+]] = arith.remui %[[BEGIN:.+]], %c16{{.*}} : index
// NVVM: %[[AL:.+]] = arith.cmpi eq, %[[G]], %c0{{.*}} : index
// NVVM: scf.if %[[AL]] {
// NVVM: %[[TROW:.+]] = arith.divui %thread_id_x, %c16{{.*}} : index
// NVVM: %[[FIRSTROW:.+]] = arith.muli %[[TROW]], %c8{{.*}} : index
// NVVM: %[[R0:.+]] = arith.addi %[[FIRSTROW]], %c0{{.*}} : index
// NVVM: arith.addi %[[BEGIN]], %[[R0]] : index
// NVVM: llvm.load {{.+}} invariant
// NVVM-NOT: llvm.load
// NVVM: %[[POOL:.+]] = arith.addi %{{.+}}, %{{.+}} : index
// NVVM-NEXT: %[[P:.+]] = arith.muli %[[POOL]], %[[STRIDE:.+]] : index
// NVVM-NEXT: %[[A0:.+]] = arith.addi %{{.+}}, %[[P]] : index
// NVVM: %[[A1:.+]] = arith.addi %[[A0]], %[[STRIDE]] : index
// NVVM: arith.addi %[[A1]], %[[STRIDE]] : index
// NVVM-NOT: llvm.load
// NVVM: nvgpu.device_async_copy
// NVVM: nvvm.cp.async.commit.group
// NVVM-NEXT: } else {
// NVVM-COUNT-8: llvm.load {{.+}} invariant
// NVVM: nvgpu.device_async_copy
// NVVM: nvvm.cp.async.commit.group
// NVVM-NEXT: }
// NVVM-NEXT: }

// With 128-key tiles and 64 threads a thread's run is 32 rows, two 16-key
// groups: the page is read at its first and 17th row.
// GROUPS: scf.for
// GROUPS: } else {
// GROUPS: %[[G:.+]] = arith.remui %{{.+}}, %c16{{.*}} : index
// GROUPS: %[[AL:.+]] = arith.cmpi eq, %[[G]], %c0{{.*}} : index
// GROUPS: scf.if %[[AL]] {
// GROUPS: %[[TROW:.+]] = arith.divui %thread_id_x, %c16{{.*}} : index
// GROUPS: %[[FIRST:.+]] = arith.muli %[[TROW]], %c32{{.*}} : index
// GROUPS: llvm.load {{.+}} invariant
// GROUPS-NOT: llvm.load
// GROUPS: arith.addi %[[FIRST]], %c16{{.*}} : index
// GROUPS: llvm.load {{.+}} invariant
// GROUPS-NOT: llvm.load
// GROUPS: nvvm.cp.async.commit.group
// GROUPS-NEXT: } else {

// NOSPLIT: error: 'attn.attention' op a paged KV cache has a GPU kernel for the split-KV forward only (split-kv=1, any split count at launch), got no split-kv
func.func @paged(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x?x8x128xbf16>, %v: tensor<?x?x8x128xbf16>, %pt: tensor<?x?xi32>, %n: tensor<?xi32>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v paged(%pt, %n : tensor<?x?xi32>, tensor<?xi32>) {mask = #attn.mask<causal_bottom_right>} : tensor<?x32x?x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}
