// RUN: fa-opt %s -fa-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefixes=COMMON,MMA
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma" -fa-wgmma-persistent=false | FileCheck %s --enable-var-scope --check-prefixes=COMMON,WG

// What decides the numbers the forward kernels compute, as data flow: the
// GQA head map, scale·log2(e) folded into one multiply, the online-softmax
// update (m_new = max(m, rowmax(S)·scale·log2e); a row still at -inf takes
// base 0; α = 2^(m − base); l = α·l + Σ P; P = 2^(S·scale·log2e − base);
// acc = α·acc) and the epilogue (1/l and LSE = ln2·(m + log2 l), with 0 and
// -inf for an empty row). The mma.sync (MMA) and wgmma (WG) forwards share
// the softmax code; each is checked on its own kernel.

// The ABI parameters: heads, key heads and the f32 scale.
// MMA-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a(
// WG-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a(
// COMMON-SAME: xf32>, %{{[^:]+}}: i32, %[[HEADS:[^:]+]]: i32, %[[KVHEADS:[^:]+]]: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[SCALE:[^:]+]]: f32

// GQA: query head h (block id y) of batch b (block id z) reads key/value
// head h / (H / Hkv): in the mma.sync kernel its rows start at
// b·sB + (h / (H / Hkv))·sH of K's strides (LSE rows at (b·H + h)·Nq); the
// wgmma kernel's TMA takes (h / (H / Hkv), b) as coordinates.
// COMMON: %[[H:.+]] = arith.index_castui %[[HEADS]] : i32 to index
// COMMON: %[[HKV:.+]] = arith.index_castui %[[KVHEADS]] : i32 to index
// COMMON: %[[HEAD:.+]] = gpu.block_id  y
// COMMON: %[[BATCH:.+]] = gpu.block_id  z
// COMMON: %[[GROUP:.+]] = arith.divui %[[H]], %[[HKV]] : index
// COMMON: %[[KVHEAD:.+]] = arith.divui %[[HEAD]], %[[GROUP]] : index
// MMA-DAG: %[[QBH:.+]] = arith.muli %[[BATCH]], %[[H]] : index
// MMA-DAG: arith.addi %[[QBH]], %[[HEAD]] : index
// MMA-DAG: arith.muli %[[KVHEAD]], %{{.+}} : index

// scale·log2(e) in one multiply of the scale parameter.
// COMMON: %[[LOG2E:.+]] = arith.constant 1.44269502 : f32
// COMMON-NEXT: %[[SL2:.+]] = arith.mulf %[[SCALE]], %[[LOG2E]] : f32

// The key loop carries m (2 rows), l (2 rows) and the O accumulator.
// MMA: %[[LOOP:[^:]+]]:{{[0-9]+}} = scf.for %{{[^ ]+}} = %{{[^ ]+}} to %{{[^ ]+}} step %{{[^ ]+}} iter_args(%[[M0:[^ ]+]] = %{{[^,]+}}, %{{[^ ]+}} = %{{[^,]+}}, %[[L0:[^ ]+]] = %{{[^,]+}}, %{{[^ ]+}} = %{{[^,]+}}, %[[ACC0:[^ ]+]] = %{{[^,]+}},
// The wgmma forward's consumers run it under an scf.if yielding m, l and O
// (empty tile ranges yield the initial state); it peels the first key tile,
// then its key loop carries m, l, O, the wgmma state and each row's α, which
// rescales the accumulator in the next iteration.
// WG: %[[LOOP:[^:]+]]:{{[0-9]+}} = scf.if
// WG: scf.for %{{[^ ]+}} = %{{[^ ]+}} to %{{[^ ]+}} step %{{[^ ]+}} iter_args(%[[M0:[^ ]+]] = %{{[^,]+}}, %{{[^ ]+}} = %{{[^,]+}}, %[[L0:[^ ]+]] = %{{[^,]+}}, %{{[^ ]+}} = %{{[^,]+}}, %[[ACC0:[^ ]+]] = %{{[^,]+}},{{.*}}, %[[ALPHAIN:[^ ]+]] = %{{[^,]+}}, %{{[^ ]+}} = %{{[^,]+}}) -> (
// The previous tile's α of row 0 rescales its accumulator.
// WG: arith.mulf %[[ACC0]], %[[ALPHAIN]] : f32

// Row 0: the tile's row max over the 4 lanes of a quad (xor 1, xor 2), in
// base-2 units, joined with the running max.
// COMMON: %[[X1:[^ ,]+]], %{{[^ ]+}} = gpu.shuffle  xor %[[T0:[^ ,]+]], %c1_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// COMMON-NEXT: %[[T1:.+]] = arith.maxnumf %[[T0]], %[[X1]] : f32
// COMMON: %[[X2:[^ ,]+]], %{{[^ ]+}} = gpu.shuffle  xor %[[T1]], %c2_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// COMMON-NEXT: %[[T2:.+]] = arith.maxnumf %[[T1]], %[[X2]] : f32
// COMMON-NEXT: %[[TS:.+]] = arith.mulf %[[T2]], %[[SL2]] : f32
// COMMON-NEXT: %[[MNEW:.+]] = arith.maxnumf %[[M0]], %[[TS]] : f32
// A row with nothing visible (m_new = -inf) takes base 0.
// COMMON: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// COMMON-NEXT: %[[EMPTY:.+]] = arith.cmpf oeq, %[[MNEW]], %[[NINF]] : f32
// COMMON-NEXT: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// COMMON-NEXT: %[[BASE:.+]] = arith.select %[[EMPTY]], %[[ZERO]], %[[MNEW]] : f32
// α = 2^(m_old − base): sub m_old, base, then ex2; l is rescaled by α.
// COMMON-DAG: %[[NEGBASE:.+]] = arith.negf %[[BASE]] : f32
// COMMON-DAG: %[[DIFF:.+]] = arith.subf %[[M0]], %[[BASE]] : f32
// COMMON: %[[ALPHA:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[DIFF]]) : (f32) -> f32
// COMMON-NEXT: %[[LRESC:.+]] = arith.mulf %[[L0]], %[[ALPHA]] : f32
// P = 2^(S·(scale·log2e) − base) with one FMA, summed into l.
// COMMON-NEXT: %[[E0:.+]] = llvm.intr.fma(%{{[^,]+}}, %[[SL2]], %[[NEGBASE]]) : (f32, f32, f32) -> f32
// COMMON-NEXT: %[[P0:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[E0]]) : (f32) -> f32
// COMMON-NEXT: arith.addf %[[LRESC]], %[[P0]] : f32
// The accumulator of row 0 is rescaled by the same α (wgmma: α is carried
// to the next iteration), the new max carried to the next key tile.
// MMA: arith.mulf %[[ACC0]], %[[ALPHA]] : f32
// MMA: scf.yield %[[MNEW]],
// WG: %[[CARRY:.+]] = arith.mulf %{{[^,]+}}, %[[ALPHA]] : f32
// WG: scf.yield %[[MNEW]], {{.*}}, %[[CARRY]], %{{[^ ]+}} : f32,

// Epilogue of row 0: l summed over the quad; 1/l, 0 for an empty row;
// LSE = ln2·(m + log2 l), -inf for an empty row.
// MMA: nvvm.cp.async.wait.group 0
// COMMON: %[[Y1:[^ ,]+]], %{{[^ ]+}} = gpu.shuffle  xor %[[LOOP]]#2, %c1_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// COMMON-NEXT: %[[S1:.+]] = arith.addf %[[LOOP]]#2, %[[Y1]] : f32
// COMMON: %[[Y2:[^ ,]+]], %{{[^ ]+}} = gpu.shuffle  xor %[[S1]], %c2_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// COMMON-NEXT: %[[L:.+]] = arith.addf %[[S1]], %[[Y2]] : f32
// COMMON-NEXT: %[[LZERO:.+]] = arith.constant 0.000000e+00 : f32
// COMMON-NEXT: %[[NONE:.+]] = arith.cmpf oeq, %[[L]], %[[LZERO]] : f32
// COMMON-NEXT: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// COMMON-NEXT: %[[INV:.+]] = arith.divf %[[ONE]], %[[L]] : f32
// COMMON-NEXT: %[[INVZERO:.+]] = arith.constant 0.000000e+00 : f32
// COMMON-NEXT: %[[INVL:.+]] = arith.select %[[NONE]], %[[INVZERO]], %[[INV]] : f32
// COMMON-NEXT: %[[LOG2L:.+]] = llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"(%[[L]]) : (f32) -> f32
// COMMON-NEXT: %[[LSE2:.+]] = arith.addf %[[LOOP]]#0, %[[LOG2L]] : f32
// COMMON-NEXT: %[[LN2:.+]] = arith.constant 0.693147182 : f32
// COMMON-NEXT: %[[LSENAT:.+]] = arith.mulf %[[LSE2]], %[[LN2]] : f32
// COMMON-NEXT: %[[LSENINF:.+]] = arith.constant 0xFF800000 : f32
// COMMON-NEXT: %[[LSE:.+]] = arith.select %[[NONE]], %[[LSENINF]], %[[LSENAT]] : f32
// O = acc·(1/l) for row 0's first column pair; LSE stored to its row.
// COMMON: arith.mulf %[[LOOP]]#4, %[[INVL]] : f32
// COMMON: memref.store %[[LSE]], %arg4[%{{.+}}] : memref<1099511627776xf32>
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
