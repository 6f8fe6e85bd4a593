// RUN: fa-opt %s -o /dev/null
// RUN: fa-aot --score-mods %s -o %t --config fwd:bf16:d128:none:wgmma:maskmod=document:blocksparse --config fwd:bf16:d128:none:wgmma:maskmod=tile_pattern:blocksparse --config fwd:bf16:d128:none:wgmma:maskmod=head_tile_pattern:blocksparse --config fwd:f16:d64:none:wgmma:maskmod=document:blocksparse | FileCheck %s
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// CHECK-DAG: fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_blocksparse_maskmod_tile_pattern: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_blocksparse_maskmod_head_tile_pattern: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_f16_d64_{{.+}}_blocksparse_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// MANIFEST-DAG: "version": 23
// MANIFEST-DAG: "block_sparse": true
// MANIFEST-DAG: "block_mask_param": 26
// MANIFEST-DAG: "mod_arg_param": 28
// MANIFEST-DAG: "fa_block_mask_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document"
// MANIFEST-DAG: "fa_block_lists_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document"
// MANIFEST-DAG: "fa_block_order_fwd_bf16_d128_bq128_bkv128_w12_s2_none_wgmma_sm90a_blocksparse_maskmod_document"

// The mask_mods of the block-sparse GPU tests (test/gpu/test_blocksparse.py,
// bench/blocksparse.py): `fa-aot --score-mods test/gpu/block_masks.mlir` with
// configs `fwd:<dtype>:d<D>:none:wgmma:maskmod=<name>:blocksparse`. Each
// block-sparse forward comes with the entries that build its block mask and
// grid order from the same function (docs/ABI.md "Block sparsity").

// Document masking of packed sequences: doc ids [B, N] (i32).
func.func @document(%b: index, %h: index, %q: index, %kv: index, %doc: tensor<?x?xi32>) -> i1 {
  %dq = tensor.extract %doc[%b, %q] : tensor<?x?xi32>
  %dk = tensor.extract %doc[%b, %kv] : tensor<?x?xi32>
  %same = arith.cmpi eq, %dq, %dk : i32
  return %same : i1
}

// The same and every earlier document (doc ids [B, N], i32, non-decreasing
// in the tests): a compare of a q_idx value with a kv_idx value other than
// equality, classed from ranges like the document mask.
func.func @earlier_documents(%b: index, %h: index, %q: index, %kv: index, %doc: tensor<?x?xi32>) -> i1 {
  %dq = tensor.extract %doc[%b, %q] : tensor<?x?xi32>
  %dk = tensor.extract %doc[%b, %kv] : tensor<?x?xi32>
  %seen = arith.cmpi sge, %dq, %dk : i32
  return %seen : i1
}

// A causal band shifted per batch row: key kv is seen from query
// kv + shift[b] on (shift i32 [B], negative too). Index compares, classed
// from ranges in 64 bits.
func.func @shifted_causal(%b: index, %h: index, %q: index, %kv: index, %shift: tensor<?xi32>) -> i1 {
  %s = tensor.extract %shift[%b] : tensor<?xi32>
  %si = arith.index_cast %s : i32 to index
  %from = arith.addi %kv, %si : index
  %seen = arith.cmpi sle, %from, %q : index
  return %seen : i1
}

// A random block pattern at 64 x 64 granularity, half the kernels' blocks:
// tiles [B, ceil(Nq/64), ceil(Nk/64)] holds 0 (hidden), 1 (visible) or 2
// (a checkerboard: q + kv even), so a 128 x 128 block is empty, full or
// partial depending on its four tiles.
func.func @tile_pattern(%b: index, %h: index, %q: index, %kv: index,
                        %tiles: tensor<?x?x?xi32>) -> i1 {
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %qt = arith.divui %q, %c64 : index
  %kt = arith.divui %kv, %c64 : index
  %t = tensor.extract %tiles[%b, %qt, %kt] : tensor<?x?x?xi32>
  %visible = arith.cmpi eq, %t, %one : i32
  %checker = arith.cmpi eq, %t, %two : i32
  %sum = arith.addi %q, %kv : index
  %odd = arith.andi %sum, %c1 : index
  %c0 = arith.constant 0 : index
  %even = arith.cmpi eq, %odd, %c0 : index
  %part = arith.andi %checker, %even : i1
  %r = arith.ori %visible, %part : i1
  return %r : i1
}

// The same per query head: tiles [B, H, ceil(Nq/64), ceil(Nk/64)] (block
// masks with one mask per head, fa.block_mask(per_head=True)).
func.func @head_tile_pattern(%b: index, %h: index, %q: index, %kv: index,
                             %tiles: tensor<?x?x?x?xi32>) -> i1 {
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %qt = arith.divui %q, %c64 : index
  %kt = arith.divui %kv, %c64 : index
  %t = tensor.extract %tiles[%b, %h, %qt, %kt] : tensor<?x?x?x?xi32>
  %visible = arith.cmpi eq, %t, %one : i32
  %checker = arith.cmpi eq, %t, %two : i32
  %sum = arith.addi %q, %kv : index
  %odd = arith.andi %sum, %c1 : index
  %even = arith.cmpi eq, %odd, %c0 : index
  %part = arith.andi %checker, %even : i1
  %r = arith.ori %visible, %part : i1
  return %r : i1
}
