// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm > %t
// RUN: FileCheck %s < %t
// RUN: FileCheck %s --check-prefix=MMA < %t
// RUN: FileCheck %s --check-prefix=LDM < %t
// RUN: FileCheck %s --check-prefix=LDMT < %t
// RUN: FileCheck %s --check-prefix=CPASYNC < %t
// RUN: FileCheck %s --check-prefix=SOFTMAX < %t
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="target=sm_80" | FileCheck %s --check-prefix=SM80

// The PTX of the forward kernel (one line per gpu.binary; LLVM's block layout
// decides the order, so each instruction family is checked on its own):
// tensor-core MMAs, ldmatrix (plain for Q and K, transposed for V), 16-byte
// cp.async with zero-fill, shuffles and ex2.approx.ftz for the softmax, the
// dynamic shared buffer as a real .extern .shared symbol.
// CHECK: gpu.binary @fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90a", features = "+ptx81">
// CHECK-SAME: .target sm_90a
// CHECK-SAME: .extern .shared .align 1024 .b8 fa_smem_16bf[]
// CHECK-SAME: .entry fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a(
// CHECK-SAME: .maxntid 128, 1, 1
// MMA: gpu.binary @fa_fwd_bf16_d64
// MMA-SAME: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// LDM: gpu.binary @fa_fwd_bf16_d64
// LDM-SAME: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// LDMT: gpu.binary @fa_fwd_bf16_d64
// LDMT-SAME: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CPASYNC: gpu.binary @fa_fwd_bf16_d64
// CPASYNC-SAME: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r
// CPASYNC-SAME: cp.async.commit_group
// CPASYNC-SAME: cp.async.wait_group
// SOFTMAX: gpu.binary @fa_fwd_bf16_d64
// SOFTMAX-SAME: shfl.sync.bfly.b32
// SOFTMAX-SAME: ex2.approx.ftz.f32
// SM80: #nvvm.target<O = 3, chip = "sm_80", features = "+ptx81">
// SM80-SAME: .target sm_80
func.func @causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}

// -----

// CHECK: gpu.binary @fa_fwd_f16_d128_bq64_bkv64_w4_s2_none_sm90a
// MMA: gpu.binary @fa_fwd_f16_d128
// MMA-SAME: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
func.func @f16(%q: tensor<?x?x?x128xf16>, %k: tensor<?x?x?x128xf16>, %v: tensor<?x?x?x128xf16>) -> (tensor<?x?x?x128xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16> -> tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xf16>, tensor<?x?x?xf32>
}
