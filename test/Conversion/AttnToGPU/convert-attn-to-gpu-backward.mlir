// RUN: fa-opt %s -fa-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -fa-attn-to-gpu | fa-opt > /dev/null
// RUN: fa-opt %s -fa-lower-to-nvvm > %t
// RUN: FileCheck %s --check-prefix=PTX < %t
// RUN: FileCheck %s --check-prefix=ATOM < %t
// RUN: FileCheck %s --check-prefix=LDMT < %t

// The backward becomes three kernels of docs/ABI.md in one gpu.module.
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a
// Delta = rowsum(dO∘O) with 16-byte loads, dq_accum zeroed. O and dO are
// the caller's: their batch, head and row strides (i64) come last, and a
// row's chunks start at b·sB + h·sH + n·sN.
// CHECK: gpu.func @fa_bwd_pre_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(%{{.*}}: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xf32>, %{{.*}}: memref<1099511627776xf32>, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32,
// CHECK-SAME: %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[OSN:[^:]+]]: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[DOSN:[^:]+]]: i64) kernel
// CHECK-DAG: %[[SN:.+]] = arith.index_cast %[[OSN]] : i64 to index
// CHECK-DAG: %[[DSN:.+]] = arith.index_cast %[[DOSN]] : i64 to index
// CHECK-DAG: arith.muli %{{.+}}, %[[SN]] : index
// CHECK-DAG: arith.muli %{{.+}}, %[[DSN]] : index
// CHECK: vector.load {{.*}} : memref<1099511627776xbf16>, vector<8xbf16>
// CHECK: vector.reduction <add>
// CHECK: vector.store {{.*}} : memref<1099511627776xf32>, vector<4xf32>
// The main kernel: K/V resident, a loop over the group's query heads and
// over the query tiles of the key block's band; dK/dV carried in registers.
// CHECK: gpu.func @fa_bwd_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(
// Then the strides of q, k, v, do, dk and dv.
// CHECK-SAME: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{[^:]+}}: f32, %arg15: i64{{.*}}, %arg32: i64) kernel
// CHECK-SAME: fa.shared_bytes = 122880
// The first query tile's LSE and Delta go to shared memory with 4-byte
// cp.async before the loops.
// CHECK: llvm.inline_asm "cvta.to.global.u64 $0, $1;"
// CHECK: nvgpu.device_async_copy {{.*}} : memref<1099511627776xf32> to memref<{{[0-9]+}}xf32, 3>
// CHECK: %{{[0-9]+}}:128 = scf.for {{.*}} iter_args
// CHECK: %[[TILES:[0-9]+]]:128 = scf.for {{.*}} iter_args
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: nvvm.mma.sync
// Boundary tiles only are masked; P recomputed from LSE with exp2.
// CHECK: scf.if
// CHECK: } else {
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xf32, 3>, vector<2xf32>
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// dSᵀ goes to shared memory; the next tile's loads start after the barrier;
// dQ is read back transposed and reduced with vector red.global.
// CHECK: vector.store {{.*}} : memref<{{[0-9]+}}xbf16, 3>, vector<2xbf16>
// CHECK: gpu.barrier
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK: llvm.inline_asm has_side_effects "red.global.add.v2.f32 [$0+{{[0-9]+}}], {$1, $2};", "l,f,f"
// CHECK: scf.yield
// CHECK: scf.yield %[[TILES]]#
// dK and dV stored once per CTA.
// CHECK: vector.store {{.*}} : memref<1099511627776xbf16>, vector<2xbf16>
// fa_bwd_post writes dQ through its strides.
// CHECK: gpu.func @fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a(%{{.*}}: memref<1099511627776xf32>, %{{.*}}: memref<1099511627776xbf16>, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[DQSN:[^:]+]]: i64) kernel
// CHECK: %[[QSN:.+]] = arith.index_cast %[[DQSN]] : i64 to index
// CHECK: arith.muli %{{.+}}, %[[QSN]] : index
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xbf16>

// PTX: gpu.binary @fa_bwd_bf16_d128_bq64_bkv128_w8_s1_causal_sm90a
// PTX-SAME: .entry fa_bwd_pre_bwd_bf16_d128
// PTX-SAME: .entry fa_bwd_bwd_bf16_d128
// PTX-SAME: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-SAME: .entry fa_bwd_post_bwd_bf16_d128
// ATOM: gpu.binary @fa_bwd_bf16_d128
// ATOM-SAME: red.global.add.v2.f32
// LDMT: gpu.binary @fa_bwd_bf16_d128
// LDMT-SAME: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
func.func @backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
