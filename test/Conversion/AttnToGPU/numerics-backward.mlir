// RUN: fa-opt %s -fa-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefixes=PRE,BWD
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --enable-var-scope --check-prefix=WS

// What decides the numbers the backward kernels compute, as data flow:
// Delta = rowsum(dO∘O) in fa_bwd_pre and the row it is stored to; in fa_bwd
// the GQA head map (key head g serves query heads g·(H/Hkv) + i), the rows
// of LSE and Delta staged in shared memory and the columns read back (LSE c
// and Delta c of the query tile, Delta after the tile's block_q LSE values),
// LSE in base 2 with -inf → +inf (P = 0 for an empty row),
// P = 2^(S·scale·log2e − LSE·log2e) and dS = P∘(dP − Delta)·scale.

// fa_bwd_pre: thread t's chunk of O and of dO at the same row and column
// (each through its own strides: offsets row·sN + column from the block's
// first row), their f32 product summed, lanes outside the block adding 0.
// PRE-LABEL: gpu.func @fa_bwd_pre_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// PRE-SAME: %[[O:[^:]+]]: memref<1099511627776xbf16>, %[[DO:[^:]+]]: memref<1099511627776xbf16>, %[[DELTA:[^:]+]]: memref<1099511627776xf32>
// PRE: %[[COL:.+]] = arith.muli %{{[^,]+}}, %c8 : index
// PRE-NEXT: %[[OR:.+]] = arith.muli %[[ROW:[^,]+]], %[[OSN:[^ ]+]] : index
// PRE-NEXT: %[[OROW:.+]] = arith.addi %[[OFIRST:[^,]+]], %[[OR]] : index
// PRE-NEXT: %[[OAT0:.+]] = arith.addi %[[OROW]], %[[COL]] : index
// PRE-NEXT: %[[DOR:.+]] = arith.muli %[[ROW]], %[[DOSN:[^ ]+]] : index
// PRE-NEXT: %[[DOROW:.+]] = arith.addi %[[DOFIRST:[^,]+]], %[[DOR]] : index
// PRE-NEXT: %[[DOAT0:.+]] = arith.addi %[[DOROW]], %[[COL]] : index
// PRE: %[[OAT:.+]] = arith.select %[[OK:[^,]+]], %[[OAT0]], %[[OFIRST]] : index
// PRE-NEXT: %[[OCH:.+]] = vector.load %[[O]][%[[OAT]]] {alignment = 16 : i64} : memref<1099511627776xbf16>, vector<8xbf16>
// PRE-NEXT: %[[DOAT:.+]] = arith.select %[[OK]], %[[DOAT0]], %[[DOFIRST]] : index
// PRE-NEXT: %[[DOCH:.+]] = vector.load %[[DO]][%[[DOAT]]] {alignment = 16 : i64} : memref<1099511627776xbf16>, vector<8xbf16>
// PRE-DAG: %[[OF:.+]] = arith.extf %[[OCH]] : vector<8xbf16> to vector<8xf32>
// PRE-DAG: %[[DOF:.+]] = arith.extf %[[DOCH]] : vector<8xbf16> to vector<8xf32>
// PRE: %[[PROD:.+]] = arith.mulf %[[OF]], %[[DOF]] : vector<8xf32>
// PRE-NEXT: %[[PART:.+]] = vector.reduction <add>, %[[PROD]], %[[Z:[^ ]+]] : vector<8xf32> into f32
// PRE-NEXT: %[[MINE:.+]] = arith.select %[[OK]], %[[PART]], %[[Z]] : f32
// The row's lanes add their partial sums (xor 8, 4, 2, 1); lane 0 stores.
// PRE: gpu.shuffle  xor %[[MINE]], %c8_i32
// PRE: %[[LAST:[^ ,]+]], %{{[^ ]+}} = gpu.shuffle  xor %[[PREV:[^ ,]+]], %c1_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// PRE-NEXT: %[[ROWSUM:.+]] = arith.addf %[[PREV]], %[[LAST]] : f32
// PRE: scf.if
// PRE-NEXT: %[[DROW:.+]] = arith.addi %{{[^,]+}}, %{{[^ ]+}} : index
// PRE-NEXT: memref.store %[[ROWSUM]], %[[DELTA]][%[[DROW]]] : memref<1099511627776xf32>

// fa_bwd (mma.sync): LSE and Delta are parameters 4 and 5; heads, key heads
// and the scale.
// BWD-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// BWD-SAME: xbf16>, %[[LSEM:[^:]+]]: memref<1099511627776xf32>, %[[DELTAM:[^:]+]]: memref<1099511627776xf32>,
// BWD-SAME: xbf16>, %{{[^:]+}}: i32, %[[HEADS:[^:]+]]: i32, %[[KVHEADS:[^:]+]]: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[SCALE:[^:]+]]: f32
// BWD: %[[TID:.+]] = gpu.thread_id  x
// BWD: %[[LANE:.+]] = arith.remui %[[TID]], %c32{{(_[0-9]+)?}} : index
// BWD: %[[TIG:.+]] = arith.remui %[[LANE]], %c4{{(_[0-9]+)?}} : index
// BWD: %[[H:.+]] = arith.index_castui %[[HEADS]] : i32 to index
// BWD-NEXT: %[[HKV:.+]] = arith.index_castui %[[KVHEADS]] : i32 to index
// BWD: %[[KVHEAD:.+]] = gpu.block_id  y
// BWD-NEXT: %[[BATCH:.+]] = gpu.block_id  z
// BWD-NEXT: %[[GROUP:.+]] = arith.divui %[[H]], %[[HKV]] : index
// K's rows of key head g start at batch·sB + g·sH (its strides).
// BWD-DAG: arith.muli %[[BATCH]], %{{[^ ]+}} : index
// BWD-DAG: arith.muli %[[KVHEAD]], %{{[^ ]+}} : index
// BWD: %[[LOG2E:.+]] = arith.constant 1.44269502 : f32
// BWD-NEXT: %[[SL2:.+]] = arith.mulf %[[SCALE]], %[[LOG2E]] : f32

// The first query tile's statistics: threads t < 64 copy LSE row t, threads
// 64 ≤ t < 128 Delta row t − 64, both to the slot of value t.
// BWD: %[[ISLSE:.+]] = arith.cmpi slt, %[[TID]], %c64{{(_[0-9]+)?}} : index
// BWD: %[[DTID:.+]] = arith.subi %[[TID]], %c64{{(_[0-9]+)?}} : index
// BWD-NEXT: %[[R:.+]] = arith.select %[[ISLSE]], %[[TID]], %[[DTID]] : index
// BWD-NEXT: %[[ROW:.+]] = arith.addi %{{[^,]+}}, %[[R]] : index
// BWD-NEXT: %[[VALID:.+]] = arith.cmpi slt, %[[ROW]], %{{[^ ]+}} : index
// BWD: %[[CLAMPED:.+]] = arith.select %[[VALID]], %[[ROW]], %c0{{(_[0-9]+)?}} : index
// BWD-NEXT: %[[SRC:.+]] = arith.addi %{{[^,]+}}, %[[CLAMPED]] : index
// BWD: scf.if %[[ISLSE]] {
// BWD-NEXT: nvgpu.device_async_copy %[[LSEM]][%[[SRC]]], %{{[^[]+}}[%[[SLOT:[0-9a-z_]+]]], 1,
// BWD-NEXT: } else {
// BWD: %[[ISDELTA:.+]] = arith.cmpi slt, %[[TID]], %c128{{(_[0-9]+)?}} : index
// BWD-NEXT: scf.if %[[ISDELTA]] {
// BWD-NEXT: nvgpu.device_async_copy %[[DELTAM]][%[[SRC]]], %{{[^[]+}}[%[[SLOT]]], 1,

// The loop over the group's query heads: head = kvHead·(H/Hkv) + i, whose
// rows start at (b·H + head)·Nq.
// BWD: scf.for %[[I:[^ ]+]] = %{{[^ ]+}} to %[[GROUP]] step
// BWD-NEXT: %[[FIRST:.+]] = arith.muli %[[KVHEAD]], %[[GROUP]] : index
// BWD-NEXT: %[[HEAD:.+]] = arith.addi %[[FIRST]], %[[I]] : index
// BWD-NEXT: %[[QBH:.+]] = arith.muli %[[BATCH]], %[[H]] : index
// BWD-NEXT: arith.addi %[[QBH]], %[[HEAD]] : index

// Sᵀ, masked on boundary tiles.
// BWD: %[[S:[^:]+]]:32 = scf.if
// BWD: } else {
// BWD: scf.yield
// Column pair 0 of the query tile: LSE c at the slot of c, Delta c at the
// slot of c + 64 (slot of v: float v mod 4 of K row v / 4's padding).
// BWD: %[[C2:.+]] = arith.muli %[[TIG]], %c2{{(_[0-9]+)?}} : index
// BWD: %[[COL:.+]] = arith.addi %[[C2]], %c0{{(_[0-9]+)?}} : index
// BWD: %[[LM:.+]] = arith.remui %[[COL]], %c4{{(_[0-9]+)?}} : index
// BWD: %[[LMP:.+]] = arith.addi %[[LM]], %c64{{(_[0-9]+)?}} : index
// BWD: %[[LD:.+]] = arith.divui %[[COL]], %c4{{(_[0-9]+)?}} : index
// BWD: %[[LR:.+]] = arith.muli %[[LD]], %c68{{(_[0-9]+)?}} : index
// BWD: %[[LSLOT:.+]] = arith.addi %[[LR]], %[[LMP]] : index
// BWD-NEXT: %[[L2:.+]] = vector.load %[[STATS:[0-9a-z_]+]][%[[LSLOT]]] {alignment = 8 : i64} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// BWD: %[[DCOL:.+]] = arith.addi %[[COL]], %c64{{(_[0-9]+)?}} : index
// BWD: %[[DM:.+]] = arith.remui %[[DCOL]], %c4{{(_[0-9]+)?}} : index
// BWD: %[[DMP:.+]] = arith.addi %[[DM]], %c64{{(_[0-9]+)?}} : index
// BWD: %[[DD:.+]] = arith.divui %[[DCOL]], %c4{{(_[0-9]+)?}} : index
// BWD: %[[DR:.+]] = arith.muli %[[DD]], %c68{{(_[0-9]+)?}} : index
// BWD: %[[DSLOT:.+]] = arith.addi %[[DR]], %[[DMP]] : index
// BWD-NEXT: %[[D2:.+]] = vector.load %[[STATS]][%[[DSLOT]]] {alignment = 8 : i64} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// LSE·log2e, +inf where LSE = -inf.
// BWD-NEXT: %[[L0:.+]] = vector.extract %[[L2]][0] : f32 from vector<2xf32>
// BWD-NEXT: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// BWD-NEXT: %[[DEAD:.+]] = arith.cmpf oeq, %[[L0]], %[[NINF]] : f32
// BWD-NEXT: %[[LOG2EB:.+]] = arith.constant 1.44269502 : f32
// BWD-NEXT: %[[LB2:.+]] = arith.mulf %[[L0]], %[[LOG2EB]] : f32
// BWD-NEXT: %[[PINF:.+]] = arith.constant 0x7F800000 : f32
// BWD-NEXT: %[[LSE2:.+]] = arith.select %[[DEAD]], %[[PINF]], %[[LB2]] : f32
// BWD-NEXT: %[[D0:.+]] = vector.extract %[[D2]][0] : f32 from vector<2xf32>
// P = 2^(S·scale·log2e − LSE·log2e).
// BWD: %[[NEGL:.+]] = arith.negf %[[LSE2]] : f32
// BWD-NEXT: %[[E:.+]] = llvm.intr.fma(%[[S]]#0, %[[SL2]], %[[NEGL]]) : (f32, f32, f32) -> f32
// BWD-NEXT: %[[P:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[E]]) : (f32) -> f32
// dS = P∘(dP − Delta)·scale.
// BWD: %[[DIFF:.+]] = arith.subf %{{[^,]+}}, %[[D0]] : f32
// BWD-NEXT: %[[DSP:.+]] = arith.mulf %[[P]], %[[DIFF]] : f32
// BWD-NEXT: arith.mulf %[[DSP]], %[[SCALE]] : f32

// fa_bwd (wgmma, warp-specialised): the statistics warp (warp 2) folds
// each row's LSE into the exponent's addend −LSE·log2e (−inf where LSE =
// −inf) and Delta into −Delta·scale, 0 past Nq; stage s holds them at floats
// 2·64·s + c and 2·64·s + 64 + c. Sᵀ masked on boundary tiles.
// WS-LABEL: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w12_s2_causal_wgmma_sm90a(
// WS-SAME: %{{[^:]+}}: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[SCALE:[^:]+]]: f32
// WS: %[[LOG2E:.+]] = arith.constant 1.44269502 : f32
// WS-NEXT: %[[SL2:.+]] = arith.mulf %[[SCALE]], %[[LOG2E]] : f32
// WS: %[[ISSTATS:.+]] = arith.cmpi eq, %{{.+}}, %c2 : index
// WS-NEXT: scf.if %[[ISSTATS]] {
// WS: %[[NEGSCALE:.+]] = arith.negf %[[SCALE]] : f32
// WS: %[[VALID:.+]] = arith.cmpi ult, %{{.+}}, %{{.+}} : i32
// WS: %[[LSE:.+]] = memref.load %{{[^[]+}}[%[[SRC:.+]]] : memref<{{[0-9]+}}xf32>
// WS-NEXT: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// WS-NEXT: %[[DEAD:.+]] = arith.cmpf oeq, %[[LSE]], %[[NINF]] : f32
// WS-NEXT: %[[LOG2EB:.+]] = arith.constant 1.44269502 : f32
// WS-NEXT: %[[LB2:.+]] = arith.mulf %[[LSE]], %[[LOG2EB]] : f32
// WS-NEXT: %[[PINF:.+]] = arith.constant 0x7F800000 : f32
// WS-NEXT: %[[LSE2:.+]] = arith.select %[[DEAD]], %[[PINF]], %[[LB2]] : f32
// WS-NEXT: %[[NEGL:.+]] = arith.negf %[[LSE2]] : f32
// WS-NEXT: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// WS-NEXT: arith.select %[[VALID]], %[[NEGL]], %[[ZERO]] : f32
// WS: %[[DELTA:.+]] = memref.load %{{[^[]+}}[%[[SRC]]] : memref<{{[0-9]+}}xf32>
// WS-NEXT: %[[SD:.+]] = arith.mulf %[[DELTA]], %[[NEGSCALE]] : f32
// WS-NEXT: %[[ZERO2:.+]] = arith.constant 0.000000e+00 : f32
// WS-NEXT: arith.select %[[VALID]], %[[SD]], %[[ZERO2]] : f32
// The consumers: P = 2^(S·scale·log2e + addend), the addend as stored.
// WS: %[[S:[^:]+]]:32 = scf.if
// WS: } else {
// WS: scf.yield
// WS: %[[SB:.+]] = arith.muli %[[STAGE:[^,]+]], %c128{{(_[0-9]+)?}} : index
// WS: %[[BASE:.+]] = arith.addi %[[SB]], %[[STATS0:c[0-9]+]]{{(_[0-9]+)?}} : index
// WS: %[[C2:.+]] = arith.muli %[[TIG:[^,]+]], %c2{{(_[0-9]+)?}} : index
// WS: %[[COL:.+]] = arith.addi %[[C2]], %c0{{(_[0-9]+)?}} : index
// WS: %[[LAT:.+]] = arith.addi %[[BASE]], %[[COL]] : index
// WS-NEXT: %[[L2:.+]] = vector.load %[[STATS:[0-9a-z_]+]][%[[LAT]]] {alignment = 8 : i64} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// WS-NEXT: %[[A0:.+]] = vector.extract %[[L2]][0] : f32 from vector<2xf32>
// WS-NEXT: %[[E:.+]] = llvm.intr.fma(%[[S]]#0, %[[SL2]], %[[A0]]) : (f32, f32, f32) -> f32
// WS-NEXT: %[[P:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[E]]) : (f32) -> f32
// dS = P∘(dP·scale − Delta·scale): one FMA, one multiply.
// WS: %[[DSB:.+]] = arith.muli %[[STAGE]], %c128{{(_[0-9]+)?}} : index
// WS: %[[DBASE:.+]] = arith.addi %[[DSB]], %[[STATS0]]{{(_[0-9]+)?}} : index
// WS: %[[DCOL:.+]] = arith.addi %{{[^,]+}}, %c64{{(_[0-9]+)?}} : index
// WS-NEXT: %[[DAT:.+]] = arith.addi %[[DBASE]], %[[DCOL]] : index
// WS-NEXT: %[[D2:.+]] = vector.load %[[STATS]][%[[DAT]]] {alignment = 8 : i64} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// WS-NEXT: %[[D0:.+]] = vector.extract %[[D2]][0] : f32 from vector<2xf32>
// WS-NEXT: %[[FMA:.+]] = llvm.intr.fma(%{{[^,]+}}, %[[SCALE]], %[[D0]]) : (f32, f32, f32) -> f32
// WS-NEXT: arith.mulf %[[P]], %[[FMA]] : f32
func.func @backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
