// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope

// Which scores the mma.sync kernels mask (-inf) on boundary tiles: the bounds
// are computed per lane from its rows and its first key or query column, so
// an error there changes the numbers without changing the ops.

// Forward, causal: lane (g = lane / 4, t = lane mod 4) of warp w holds rows
// qBegin + 16w + g (+8) and key columns 2t, 2t + 1 of each n8 tile. Row q
// sees keys < min(q + 1, Nk); the bound is kept relative to the lane's first
// key, 2t, and a column c of n-tile 0 survives where c < bound − k0.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a(
// CHECK-SAME: %{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[NKARG:[^:]+]]: i32, %{{[^:]+}}: f32, {{.*}}) kernel
// CHECK: %[[TID:.+]] = gpu.thread_id  x
// CHECK: %[[WARP:.+]] = arith.divui %[[TID]], %c32{{(_[0-9]+)?}} : index
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c32{{(_[0-9]+)?}} : index
// CHECK: %[[GID:.+]] = arith.divui %[[LANE]], %c4{{(_[0-9]+)?}} : index
// CHECK: %[[TIG:.+]] = arith.remui %[[LANE]], %c4{{(_[0-9]+)?}} : index
// CHECK: %[[NK:.+]] = arith.index_castui %[[NKARG]] : i32 to index
// CHECK: %[[QBLOCK:.+]] = gpu.block_id  x
// CHECK: %[[QBEGIN:.+]] = arith.muli %[[QBLOCK]], %c64{{(_[0-9]+)?}} : index
// CHECK: %[[ROWBASE:.+]] = arith.muli %[[WARP]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[LANEKEY:.+]] = arith.muli %[[TIG]], %c2{{(_[0-9]+)?}} : index
// CHECK: %[[G0:.+]] = arith.addi %[[GID]], %c0{{(_[0-9]+)?}} : index
// CHECK-NEXT: %[[W0:.+]] = arith.addi %[[ROWBASE]], %[[G0]] : index
// CHECK-NEXT: %[[Q0:.+]] = arith.addi %[[QBEGIN]], %[[W0]] : index
// CHECK: %{{.+}} = arith.addi %[[Q0]], %c1{{(_[0-9]+)?}} : index
// CHECK: %[[HI0:.+]] = arith.minsi %{{[^,]+}}, %[[NK]] : index
// CHECK-NEXT: %[[REL0:.+]] = arith.subi %[[HI0]], %[[LANEKEY]] : index
// CHECK-NEXT: %[[BOUND0:.+]] = arith.index_castui %[[REL0]] : index to i32
// CHECK: %[[G8:.+]] = arith.addi %[[GID]], %c8{{(_[0-9]+)?}} : index
// CHECK-NEXT: %[[W8:.+]] = arith.addi %[[ROWBASE]], %[[G8]] : index
// CHECK-NEXT: %[[Q8:.+]] = arith.addi %[[QBEGIN]], %[[W8]] : index
// CHECK: %{{.+}} = arith.addi %[[Q8]], %c1{{(_[0-9]+)?}} : index
// CHECK: %[[HI8:.+]] = arith.minsi %{{[^,]+}}, %[[NK]] : index
// CHECK-NEXT: %[[REL8:.+]] = arith.subi %[[HI8]], %[[LANEKEY]] : index
// CHECK-NEXT: %[[BOUND8:.+]] = arith.index_castui %[[REL8]] : index to i32
// CHECK: %[[S:[^:]+]]:32 = scf.if
// CHECK: } else {
// CHECK-NEXT: %[[K0:.+]] = arith.index_castui %{{[^ ]+}} : index to i32
// CHECK-NEXT: %[[LIM0:.+]] = arith.subi %[[BOUND0]], %[[K0]] : i32
// CHECK-NEXT: %[[LIM8:.+]] = arith.subi %[[BOUND8]], %[[K0]] : i32
// CHECK: %[[OK00:.+]] = arith.cmpi slt, %c0_i32{{(_[0-9]+)?}}, %[[LIM0]] : i32
// CHECK: arith.select %[[OK00]], %{{[^,]+}}, %{{[^ ]+}} : f32
// CHECK: %[[OK01:.+]] = arith.cmpi slt, %c1_i32{{(_[0-9]+)?}}, %[[LIM0]] : i32
// CHECK: arith.select %[[OK01]], %{{[^,]+}}, %{{[^ ]+}} : f32
// CHECK: %[[OK80:.+]] = arith.cmpi slt, %c0_i32{{(_[0-9]+)?}}, %[[LIM8]] : i32
// CHECK: arith.select %[[OK80]], %{{[^,]+}}, %{{[^ ]+}} : f32
func.func @causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// Backward, causal: Sᵀ holds keys in rows (warp w: keys kBegin + 16w + g,
// +8) and queries in columns (2t, 2t + 1 of each n8 tile). On a boundary
// tile an element survives where its key < Nk, its query < Nq (column c <
// Nq − (qBegin + 2t)) and the mask keeps (key − (qBegin + 2t), c).
// CHECK-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// CHECK-SAME: %{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[NQARG:[^:]+]]: i32, %[[NKARG:[^:]+]]: i32, %{{[^:]+}}: f32, %{{.*}}: i64) kernel
// CHECK: %[[TID:.+]] = gpu.thread_id  x
// CHECK: %[[WARP:.+]] = arith.divui %[[TID]], %c32{{(_[0-9]+)?}} : index
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c32{{(_[0-9]+)?}} : index
// CHECK: %[[GID:.+]] = arith.divui %[[LANE]], %c4{{(_[0-9]+)?}} : index
// CHECK: %[[TIG:.+]] = arith.remui %[[LANE]], %c4{{(_[0-9]+)?}} : index
// CHECK: %[[NQ:.+]] = arith.index_castui %[[NQARG]] : i32 to index
// CHECK-NEXT: %[[NK:.+]] = arith.index_castui %[[NKARG]] : i32 to index
// CHECK: %[[KBLOCK:.+]] = gpu.block_id  x
// CHECK: %[[KBEGIN:.+]] = arith.muli %[[KBLOCK]], %c128{{(_[0-9]+)?}} : index
// CHECK: %[[KEYROW0:.+]] = arith.muli %[[WARP]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[S:[^:]+]]:32 = scf.if
// CHECK: } else {
// CHECK: %[[C2:.+]] = arith.muli %[[TIG]], %c2{{(_[0-9]+)?}} : index
// CHECK-NEXT: %[[LANEQ:.+]] = arith.addi %{{[^,]+}}, %[[C2]] : index
// CHECK-NEXT: %[[QLEFT:.+]] = arith.subi %[[NQ]], %[[LANEQ]] : index
// CHECK: %[[G0:.+]] = arith.addi %[[GID]], %c0{{(_[0-9]+)?}} : index
// CHECK-NEXT: %[[KR0:.+]] = arith.addi %[[KEYROW0]], %[[G0]] : index
// CHECK-NEXT: %[[KEY0:.+]] = arith.addi %[[KBEGIN]], %[[KR0]] : index
// CHECK-NEXT: %[[KOK0:.+]] = arith.cmpi slt, %[[KEY0]], %[[NK]] : index
// CHECK-NEXT: %[[REL0:.+]] = arith.subi %[[KEY0]], %[[LANEQ]] : index
// CHECK: %[[G8:.+]] = arith.addi %[[GID]], %c8{{(_[0-9]+)?}} : index
// CHECK-NEXT: %[[KR8:.+]] = arith.addi %[[KEYROW0]], %[[G8]] : index
// CHECK-NEXT: %[[KEY8:.+]] = arith.addi %[[KBEGIN]], %[[KR8]] : index
// CHECK-NEXT: %[[KOK8:.+]] = arith.cmpi slt, %[[KEY8]], %[[NK]] : index
// CHECK-NEXT: %{{.+}} = arith.subi %[[KEY8]], %[[LANEQ]] : index
// Element (key row g, query column 0).
// CHECK: %[[QOK:.+]] = arith.cmpi slt, %c0{{(_[0-9]+)?}}, %[[QLEFT]] : index
// CHECK-NEXT: %[[INB:.+]] = arith.andi %[[KOK0]], %[[QOK]] : i1
// CHECK: %[[DIAG:.+]] = arith.cmpi sle, %[[REL0]], %{{[^ ]+}} : index
// CHECK-NEXT: %[[KEEP:.+]] = arith.andi %{{[^,]+}}, %[[DIAG]] : i1
// CHECK-NEXT: %[[OK:.+]] = arith.andi %[[INB]], %[[KEEP]] : i1
// CHECK-NEXT: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: arith.select %[[OK]], %{{[^,]+}}, %[[NINF]] : f32
func.func @backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
