// RUN: fa-opt %s -split-input-file -convert-attn-to-gpu -cse -verify-diagnostics | FileCheck %s

// convert-attn-to-gpu lowers the loop nest it is given: its key-block loop
// runs in the kernel with the bounds of the IR, cloned, not bounds the
// kernel builder recomputes. Here a rewrite (as block sparsity or a split
// of the key range would) capped the loop at two key blocks; the kernel's
// key loop stops there too.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a
// CHECK: %[[NK:.+]] = arith.index_castui %arg9 : i32 to index
// CHECK: %[[UP:.+]] = arith.addi %[[NK]], %{{.+}} : index
// CHECK: %[[BLOCKS:.+]] = arith.divui %[[UP]], %{{.+}} : index
// CHECK: %[[CAP:.+]] = arith.minsi %[[BLOCKS]], %{{.+}} : index
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[CAP]] step
func.func @capped(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %acc: tensor<?x?x?x64xf32>, %m: tensor<?x?x?xf32>, %l: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c63 = arith.constant 63 : index
  %c64 = arith.constant 64 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x?x64xbf16>
  %heads = tensor.dim %q, %c1 : tensor<?x?x?x64xbf16>
  %nq = tensor.dim %q, %c2 : tensor<?x?x?x64xbf16>
  %nk = tensor.dim %k, %c2 : tensor<?x?x?x64xbf16>
  %kvheads = tensor.dim %k, %c1 : tensor<?x?x?x64xbf16>
  %group = arith.divui %heads, %kvheads : index
  %qblocks = arith.ceildivui %nq, %c64 : index
  %r:3 = scf.forall (%b, %h, %qb) in (%batch, %heads, %qblocks) shared_outs(%sacc = %acc, %sm = %m, %sl = %l) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
    %q0 = arith.muli %qb, %c64 : index
    %rest = arith.subi %nq, %q0 : index
    %qs = arith.minsi %rest, %c64 : index
    %hk = arith.divui %h, %group : index
    %qt = tensor.extract_slice %q[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
    %acc0 = tensor.extract_slice %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xf32> to tensor<1x1x?x64xf32>
    %m0 = tensor.extract_slice %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %l0 = tensor.extract_slice %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %up = arith.addi %nk, %c63 : index
    %nblocks = arith.divui %up, %c64 : index
    %cap = arith.minsi %nblocks, %c2 : index

    %t:3 = scf.for %kb = %c0 to %cap step %c1 iter_args(%a = %acc0, %mx = %m0, %sum = %l0) -> (tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>) {
      %k0 = arith.muli %kb, %c64 : index
      %krest = arith.subi %nk, %k0 : index
      %ks = arith.minsi %krest, %c64 : index
      %kt = tensor.extract_slice %k[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      %vt = tensor.extract_slice %v[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      %na, %nm, %ns = attn.online_attention %qt, %kt, %vt, %a, %mx, %sum at [%b, %h, %q0, %k0] of [%nq, %nk] {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} : tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32> -> tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
      scf.yield %na, %nm, %ns : tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
    }
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %t#0 into %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<1x1x?x64xf32> into tensor<?x?x?x64xf32>
      tensor.parallel_insert_slice %t#1 into %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
      tensor.parallel_insert_slice %t#2 into %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
    }
  } {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}}
  return %r#0, %r#1, %r#2 : tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
}

// -----

// A bound the kernel cannot compute (a value of the caller's) is refused.
func.func @foreign(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %acc: tensor<?x?x?x64xf32>, %m: tensor<?x?x?xf32>, %l: tensor<?x?x?xf32>, %n: index) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c63 = arith.constant 63 : index
  %c64 = arith.constant 64 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x?x64xbf16>
  %heads = tensor.dim %q, %c1 : tensor<?x?x?x64xbf16>
  %nq = tensor.dim %q, %c2 : tensor<?x?x?x64xbf16>
  %nk = tensor.dim %k, %c2 : tensor<?x?x?x64xbf16>
  %kvheads = tensor.dim %k, %c1 : tensor<?x?x?x64xbf16>
  %group = arith.divui %heads, %kvheads : index
  %qblocks = arith.ceildivui %nq, %c64 : index
  %r:3 = scf.forall (%b, %h, %qb) in (%batch, %heads, %qblocks) shared_outs(%sacc = %acc, %sm = %m, %sl = %l) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
    %q0 = arith.muli %qb, %c64 : index
    %rest = arith.subi %nq, %q0 : index
    %qs = arith.minsi %rest, %c64 : index
    %hk = arith.divui %h, %group : index
    %qt = tensor.extract_slice %q[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
    %acc0 = tensor.extract_slice %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xf32> to tensor<1x1x?x64xf32>
    %m0 = tensor.extract_slice %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %l0 = tensor.extract_slice %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %up = arith.addi %nk, %c63 : index
    %nblocks = arith.divui %up, %c64 : index
    %cap = arith.minsi %nblocks, %n : index

    %t:3 = scf.for %kb = %c0 to %cap step %c1 iter_args(%a = %acc0, %mx = %m0, %sum = %l0) -> (tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>) {
      %k0 = arith.muli %kb, %c64 : index
      %krest = arith.subi %nk, %k0 : index
      %ks = arith.minsi %krest, %c64 : index
      %kt = tensor.extract_slice %k[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      %vt = tensor.extract_slice %v[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      // expected-error @+1 {{expected the tile loop's bounds to depend on the CTA's block indices and the problem's sizes only}}
      %na, %nm, %ns = attn.online_attention %qt, %kt, %vt, %a, %mx, %sum at [%b, %h, %q0, %k0] of [%nq, %nk] {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} : tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32> -> tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
      scf.yield %na, %nm, %ns : tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
    }
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %t#0 into %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<1x1x?x64xf32> into tensor<?x?x?x64xf32>
      tensor.parallel_insert_slice %t#1 into %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
      tensor.parallel_insert_slice %t#2 into %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
    }
  } {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}}
  return %r#0, %r#1, %r#2 : tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
}

// -----

// The kernel takes Nq and Nk as separate arguments: one tensor as both the
// query and the key is refused rather than compiled into a kernel that
// assumes Nq = Nk for every caller of its tag.
func.func @aliased(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %acc: tensor<?x?x?x64xf32>, %m: tensor<?x?x?xf32>, %l: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c63 = arith.constant 63 : index
  %c64 = arith.constant 64 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x?x64xbf16>
  %heads = tensor.dim %q, %c1 : tensor<?x?x?x64xbf16>
  %nq = tensor.dim %q, %c2 : tensor<?x?x?x64xbf16>
  %nk = tensor.dim %q, %c2 : tensor<?x?x?x64xbf16>
  %kvheads = tensor.dim %q, %c1 : tensor<?x?x?x64xbf16>
  %group = arith.divui %heads, %kvheads : index
  %qblocks = arith.ceildivui %nq, %c64 : index
  %r:3 = scf.forall (%b, %h, %qb) in (%batch, %heads, %qblocks) shared_outs(%sacc = %acc, %sm = %m, %sl = %l) -> (tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
    %q0 = arith.muli %qb, %c64 : index
    %rest = arith.subi %nq, %q0 : index
    %qs = arith.minsi %rest, %c64 : index
    %hk = arith.divui %h, %group : index
    %qt = tensor.extract_slice %q[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
    %acc0 = tensor.extract_slice %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<?x?x?x64xf32> to tensor<1x1x?x64xf32>
    %m0 = tensor.extract_slice %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %l0 = tensor.extract_slice %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x1x?xf32>
    %up = arith.addi %nk, %c63 : index
    %nblocks = arith.divui %up, %c64 : index

    %t:3 = scf.for %kb = %c0 to %nblocks step %c1 iter_args(%a = %acc0, %mx = %m0, %sum = %l0) -> (tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>) {
      %k0 = arith.muli %kb, %c64 : index
      %krest = arith.subi %nk, %k0 : index
      %ks = arith.minsi %krest, %c64 : index
      %kt = tensor.extract_slice %q[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      %vt = tensor.extract_slice %v[%b, %hk, %k0, 0] [1, 1, %ks, 64] [1, 1, 1, 1] : tensor<?x?x?x64xbf16> to tensor<1x1x?x64xbf16>
      // expected-error @+1 {{expected distinct query and key tensors on the GPU path}}
      %na, %nm, %ns = attn.online_attention %qt, %kt, %vt, %a, %mx, %sum at [%b, %h, %q0, %k0] of [%nq, %nk] {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}} : tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xbf16>, tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32> -> tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
      scf.yield %na, %nm, %ns : tensor<1x1x?x64xf32>, tensor<1x1x?xf32>, tensor<1x1x?xf32>
    }
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %t#0 into %sacc[%b, %h, %q0, 0] [1, 1, %qs, 64] [1, 1, 1, 1] : tensor<1x1x?x64xf32> into tensor<?x?x?x64xf32>
      tensor.parallel_insert_slice %t#1 into %sm[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
      tensor.parallel_insert_slice %t#2 into %sl[%b, %h, %q0] [1, 1, %qs] [1, 1, 1] : tensor<1x1x?xf32> into tensor<?x?x?xf32>
    }
  } {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d64_bq64_bkv64_w4_s2_none_sm90a", target = "sm_90a", warps = 4 : i64}}
  return %r#0, %r#1, %r#2 : tensor<?x?x?x64xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>
}
