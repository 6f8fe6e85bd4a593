// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 kv-append=1" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -attn-gpu-plan="split-kv=1 kv-append=1" -attn-online-softmax -attn-split-kv="splits=1" -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope

// kv-append is a choice of the split-KV plan: the plan records it
// (kv_append) and the tag ends in _append, and the module gains
// fa_kv_append_<tag> beside the split forward and the merge: 256 threads,
// one element each, grid y choosing the new keys, values or queries
// (fa-aot-kv-append.test checks the refusal without split-kv).
// PLAN: attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, kv_append, mma = "mma_sync", paged, split_kv, stages = 2 : i64, tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_paged_append"

// The decode is fa_kv_append's dependent launch (docs/ABI.md): the split
// forward waits for the append before it reads the page table or the cache,
// and lets its merge be scheduled; the append lets the split be scheduled.
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_paged_append(
// CHECK-NOT: memref.load
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.launch_dependents;"
// CHECK-NEXT: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.wait;", "~{memory}"
// CHECK: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_paged_append(
// CHECK: gpu.func @fa_kv_append_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv_paged_append(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NEXT: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.launch_dependents;"
// CHECK: %[[Y:.+]] = gpu.block_id y
// CHECK: arith.mulf
// CHECK: arith.subf
// CHECK: arith.truncf
// CHECK: scf.if
// CHECK: memref.store

func.func @decode(%q: tensor<?x8x1x128xbf16>, %k: tensor<?x16x2x128xbf16>, %v: tensor<?x16x2x128xbf16>, %pt: tensor<?x?xi32>, %n: tensor<?xi32>) -> (tensor<?x8x1x128xbf16>, tensor<?x8x1xf32>) {
  %o, %lse = attn.attention %q, %k, %v paged(%pt, %n : tensor<?x?xi32>, tensor<?xi32>) : tensor<?x8x1x128xbf16>, tensor<?x16x2x128xbf16>, tensor<?x16x2x128xbf16> -> tensor<?x8x1x128xbf16>, tensor<?x8x1xf32>
  return %o, %lse : tensor<?x8x1x128xbf16>, tensor<?x8x1xf32>
}
