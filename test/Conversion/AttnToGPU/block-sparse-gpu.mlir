// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma block-sparse=1" | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma block-sparse=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document.ptx
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma block-sparse=1" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE --enable-var-scope
// REQUIRES: ptxas

// A block-sparse plan (attn-gpu-plan block-sparse=1) gives the wgmma forward
// a block mask parameter and its head count after the 12 strides (arg26,
// arg27), before the mask_mod's tensor; its key loop runs from 0 to the
// query block's full + partial count, each iteration's key tile read from
// the lists (full ones first), and the mask_mod and the Nk bound are
// applied in the branch of partial tiles only. CTA (x, y) is l = y·NQB + x,
// in group g = l / (4·NQB) of 4 heads (kForwardOrderHeads), and takes the
// query block at place r / n of head 4g + r mod n (r = l − g·4·NQB, n = min(4,
// H − 4g)) in the head's mask row's grid order (longest key-block list
// first, the group's heads in turn).
// The module also holds the three entries that build the block mask from
// the same mask_mod.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document
// The tile level: a listed tile past the full ones takes the masked path of an
// scf.if, the mask_mod there, then the band's mask of every element (the
// whole-tile test is the branch) with the key offset made opaque before it.
// TILE-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// TILE: %[[BOUNDS:.+]] = attn_gpu.key_bounds at [{{.+}}] of [{{.+}}] row %{{.+}} block %{{.+}} {block_rows = 64 : i64, mask_mod}
// TILE: %[[S:.+]] = builtin.unrealized_conversion_cast {{.+}} to !attn_gpu.fragment<16x128xf32, accumulator>
// TILE: %[[KEY:.+]] = arith.muli %{{.+}}, %c128{{.*}} : index
// TILE: llvm.inline_asm has_side_effects "mov.u32 $0, $1;"
// TILE-NEXT: %[[OPAQUE:.+]] = arith.index_castui %{{.+}} : i32 to index
// TILE-NEXT: %[[FULL:.+]] = arith.cmpi slt, %{{.+}}, %{{.+}} : index
// TILE-NEXT: %{{.+}} = scf.if %[[FULL]] -> (!attn_gpu.fragment<16x128xf32, accumulator>) {
// TILE-NEXT: scf.yield %[[S]]
// TILE-NEXT: } else {
// TILE-NEXT: %[[M:.+]] = attn_gpu.mask_mod %[[S]] at [{{.+}}] of [{{.+}}] row %{{.+}} key %[[KEY]]
// TILE: attn_gpu.mask %[[M]], %[[BOUNDS]] key %[[OPAQUE]] {every_element}
// TILE-NEXT: scf.yield
// TILE: attn_gpu.online_softmax
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %[[MASK:arg26]]: !llvm.ptr<1>, %[[HEADS:arg27]]: i32, %[[DOC:arg28]]: !llvm.ptr<1>, %arg29: i32, %arg30: i32)
// The query block: kv_order[row, place] (row = batch · mask_heads + head mod
// mask_heads), clamped into [0, NQB).
// CHECK: %[[X:.+]] = gpu.block_id  x
// CHECK: %[[Y:.+]] = gpu.block_id  y
// CHECK: %[[GX:.+]] = gpu.grid_dim  x
// CHECK: %[[L0:.+]] = arith.muli %[[Y]], %[[GX]] : index
// CHECK: %[[L:.+]] = arith.addi %[[L0]], %[[X]] : index
// CHECK: %[[SPAN:.+]] = arith.muli %[[GX]], %c4{{.*}} : index
// CHECK: %[[G:.+]] = arith.divui %[[L]], %[[SPAN]] : index
// CHECK: %[[G0:.+]] = arith.muli %[[G]], %[[SPAN]] : index
// CHECK: %[[R:.+]] = arith.subi %[[L]], %[[G0]] : index
// CHECK: %[[FIRST:.+]] = arith.muli %[[G]], %c4{{.*}} : index
// CHECK: %[[LEFT:.+]] = arith.subi %{{.+}}, %[[FIRST]] : index
// CHECK: %[[N:.+]] = arith.minsi %c4{{.*}}, %[[LEFT]] : index
// CHECK: %[[PLACE:.+]] = arith.divui %[[R]], %[[N]] : index
// CHECK: %[[HOFF:.+]] = arith.remui %[[R]], %[[N]] : index
// CHECK: %[[HEAD:.+]] = arith.addi %[[FIRST]], %[[HOFF]] : index
// CHECK: %[[Z:.+]] = gpu.block_id  z
// CHECK: %[[NQB:.+]] = arith.divui %{{.+}}, %c128{{.*}} : index
// CHECK: %[[HMOD:.+]] = arith.remui %[[HEAD]], %[[MH:.+]] : index
// CHECK: %[[ROW0:.+]] = arith.muli %[[Z]], %[[MH]] : index
// CHECK: %[[ROW:.+]] = arith.addi %[[ROW0]], %[[HMOD]] : index
// CHECK: %[[LINE0:.+]] = arith.muli %[[ROW]], %[[NQB]] : index
// CHECK: %[[LINE:.+]] = arith.addi %[[LINE0]], %[[PLACE]] : index
// CHECK: %[[AT:.+]] = arith.addi %{{.+}}, %[[LINE]] : index
// CHECK: %[[AT64:.+]] = arith.index_cast %[[AT]] : index to i64
// CHECK: %[[ORDP:.+]] = llvm.getelementptr %[[MASK]][%[[AT64]]]
// CHECK: %[[ORD:.+]] = llvm.load %[[ORDP]] invariant
// CHECK: %[[ORD0:.+]] = arith.maxsi %[[ORD]], %{{.+}} : i32
// CHECK: %[[ORDI:.+]] = arith.index_castui %[[ORD0]] : i32 to index
// CHECK: %[[LAST:.+]] = arith.subi %[[NQB]], %c1 : index
// CHECK: %[[QB:.+]] = arith.minsi %[[ORDI]], %[[LAST]] : index
// CHECK: arith.muli %[[QB]], %c128{{.*}} : index
// The tile's counts: full_kv_count, then kv_count, clamped.
// CHECK: llvm.getelementptr %[[MASK]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK: arith.maxsi
// CHECK: arith.minsi
// The consumers read the doc ids only in the branch of partial tiles.
// CHECK: llvm.getelementptr %[[DOC]]
// CHECK: gpu.return
// fa_block_mask: one warp per block. doc[q] == doc[kv] compares a value of
// q_idx with one of kv_idx (attn::separableMaskCompare), so the block is
// classed from the two ranges: each lane reads the doc ids of keys lane + 32j
// and of rows lane + 32i (4 each), the warp reduces min and max of both (5
// butterfly steps each, in i32 like the ids), and no element is evaluated.
// CHECK: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i32, %{{.+}}: i32)
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK-NOT: scf.for
// CHECK-COUNT-8: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load
// CHECK-COUNT-20: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// Every element kept: one doc id on both sides; none: the ranges apart.
// CHECK-COUNT-3: arith.cmpi eq, %{{.+}}, %{{.+}} : i32
// CHECK-COUNT-2: arith.cmpi slt, %{{.+}}, %{{.+}} : i32
// CHECK-NOT: scf.for
// CHECK: llvm.store
// CHECK: gpu.func @fa_block_lists_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK: nvvm.vote.sync ballot
// CHECK: llvm.intr.ctpop
// fa_block_order: CTA (0 query blocks / 1 key blocks, row); thread t ranks
// lines t, t + 128, ... by count + full count against every line of the row
// (greater first, ties by index) and stores the line at its rank.
// CHECK: gpu.func @fa_block_order_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document(
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: %[[TID:.+]] = gpu.thread_id  x
// CHECK: %[[KEYS:.+]] = arith.cmpi slt, %c0{{.*}}, %block_id_x : index
// CHECK: %[[LINES:.+]] = arith.select %[[KEYS]]
// CHECK: scf.for %[[MINE:.+]] = %[[TID]] to %[[LINES]] step %c128
// CHECK-COUNT-2: llvm.load %{{.+}} invariant
// CHECK: %[[OWN:.+]] = arith.addi %{{.+}}, %{{.+}} : i32
// CHECK: %[[RANK:.+]] = scf.for %[[OTHER:.+]] = %c0{{.*}} to %[[LINES]] step %c1{{.*}} iter_args(%[[R:.+]] = %c0{{.*}}) -> (index)
// CHECK-COUNT-2: llvm.load %{{.+}} invariant
// CHECK: %[[THEIRS:.+]] = arith.addi %{{.+}}, %{{.+}} : i32
// CHECK: %[[BELOW:.+]] = arith.cmpi slt, %[[OTHER]], %[[MINE]] : index
// CHECK: %[[TIE:.+]] = arith.cmpi eq, %[[THEIRS]], %[[OWN]] : i32
// CHECK: %[[TIEB:.+]] = arith.andi %[[TIE]], %[[BELOW]] : i1
// CHECK: %[[MORE:.+]] = arith.cmpi sgt, %[[THEIRS]], %[[OWN]] : i32
// CHECK: %[[BEFORE:.+]] = arith.ori %[[MORE]], %[[TIEB]] : i1
// CHECK: %[[NEXT:.+]] = arith.addi %[[R]], %c1{{.*}} : index
// CHECK: arith.select %[[BEFORE]], %[[NEXT]], %[[R]] : index
// CHECK: %[[LINE32:.+]] = arith.index_castui %[[MINE]] : index to i32
// CHECK: %[[SLOT:.+]] = arith.addi %{{.+}}, %[[RANK]] : index
// CHECK: %[[SLOT64:.+]] = arith.index_cast %[[SLOT]] : index to i64
// CHECK: %[[P:.+]] = llvm.getelementptr %{{.+}}[%[[SLOT64]]]
// CHECK: llvm.store %[[LINE32]], %[[P]]
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// PTX: .entry fa_fwd_fwd_bf16_d128
// The PTX reads 8 doc ids per lane, then only shuffles: no loop, no vote.
// PTX: .entry fa_block_mask_fwd_bf16_d128
// PTX-COUNT-8: ld.global.nc.{{[bs]}}32
// PTX-NOT: ld.global
// PTX-NOT: vote.sync
// PTX-NOT: bra
// PTX: shfl.sync.bfly.b32
// PTX: .entry fa_block_lists_fwd_bf16_d128
// PTX: vote.sync.ballot.b32
func.func @document(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %doc: tensor<?x?xi32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%doc : tensor<?x?xi32>) {attn.mask_mod_name = "document"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?xi32>):
    %dq = tensor.extract %t[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %t[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// A mask_mod that is no separable compare (it reads a tensor at both
// indices) is evaluated per element, in its stages: the constant 64 once, kv / 64
// (reads kv_idx only) for the lane's 16 keys before the row loop, q / 64
// (reads q_idx only) once per row, and the read of tiles[b, q / 64, kv / 64]
// (reads both) per element.

// CHECK-LABEL: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_tiles(
// CHECK: %[[C64:c64_[0-9]+]] = arith.constant 64 : index
// CHECK-NOT: scf.for
// CHECK-COUNT-16: arith.divui %{{.+}}, %[[C64]] : index
// CHECK-NOT: llvm.load
// 8 steps of 16 rows (a warp's 4 row lanes x 4 rows) cover the 128 rows; a
// step runs while the warp has not seen both a kept and a hidden element.
// CHECK: scf.for %[[STEP:.+]] = %{{.+}} to %c8{{[_0-9]*}} step %{{.+}} iter_args(%[[ANY:.+]] = %false, %[[ALL:.+]] = %true) -> (i1, i1)
// CHECK: nvvm.vote.sync  any
// CHECK: nvvm.vote.sync  any %{{.+}}, %[[ANY]]
// CHECK: scf.if
// CHECK-NEXT: scf.yield %[[ANY]], %[[ALL]]
// CHECK: arith.muli %[[STEP]], %c16{{[_0-9]*}} : index
// CHECK: arith.divui %{{.+}}, %[[C64]] : index
// CHECK-NOT: arith.divui
// CHECK-COUNT-16: llvm.load %{{.+}} invariant : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load
// CHECK: arith.divui %{{.+}}, %[[C64]] : index
// CHECK: gpu.return
func.func @tiles(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %tiles: tensor<?x?x?xi32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v mod_args(%tiles : tensor<?x?x?xi32>) {attn.mask_mod_name = "tiles"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %t: tensor<?x?x?xi32>):
    %c64 = arith.constant 64 : index
    %qt = arith.divui %qi, %c64 : index
    %kt = arith.divui %kv, %c64 : index
    %x = tensor.extract %t[%b, %qt, %kt] : tensor<?x?x?xi32>
    %one = arith.constant 1 : i32
    %r = arith.cmpi eq, %x, %one : i32
    attn.yield %r : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// kv_idx <= q_idx compares two index values, one per index: classed from
// ranges in i64 (each side's min and max, two i32 halves per butterfly step),
// the predicate's own comparisons on the ranges (every pair passes: the
// largest key below the smallest row; none: the smallest key above the
// largest row).

// CHECK-LABEL: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_below_diagonal(
// CHECK-NOT: scf.for
// CHECK-COUNT-40: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: arith.cmpi sle, %{{.+}}, %{{.+}} : i64
// CHECK: arith.cmpi sgt, %{{.+}}, %{{.+}} : i64
// CHECK-NOT: scf.for
// CHECK: llvm.store
// CHECK: gpu.return
func.func @below_diagonal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.mask_mod_name = "below_diagonal"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index):
    %r = arith.cmpi sle, %kv, %qi : index
    attn.yield %r : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// A compare of a value that reads both indices is no separable compare: the
// class kernel evaluates it per element.

// CHECK-LABEL: gpu.func @fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_band(
// CHECK-NOT: gpu.shuffle
// CHECK: scf.for
// CHECK: arith.subi
// CHECK: arith.cmpi ult
// CHECK: gpu.return
func.func @band(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {attn.mask_mod_name = "band"} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index):
    %d = arith.subi %qi, %kv : index
    %c = arith.constant 256 : index
    %r = arith.cmpi ult, %d, %c : index
    attn.yield %r : i1
  } : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
