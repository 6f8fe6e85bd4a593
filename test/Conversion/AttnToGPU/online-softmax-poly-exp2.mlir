// RUN: fa-opt %s -split-input-file -convert-attn-gpu-to-nvvm -verify-diagnostics | FileCheck %s --enable-var-scope

// poly_exp2 = 4: of the two n8 tiles, the first (4·0 mod 8 < 4) takes its
// exponentials from the FMA-pipe polynomial, the second from ex2.approx.
// Lane values 0, 1 are row g's columns 2t, 2t+1 of tile 0; 4, 5 of tile 1.
// CHECK-LABEL: gpu.func @poly
// CHECK-SAME: (%[[X0:[^:]+]]: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %[[X4:[^:]+]]: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %[[C:[^:]+]]: f32,
// CHECK: %[[NEG:.+]] = arith.negf
// CHECK: %[[X:.+]] = llvm.intr.fma(%[[X0]], %[[C]], %[[NEG]])
// CHECK: %[[MAGIC:.+]] = arith.constant 0x4B400000 : f32
// CHECK: %[[T:.+]] = arith.addf %[[X]], %[[MAGIC]] : f32
// CHECK: %[[J:.+]] = arith.subf %[[T]], %[[MAGIC]] : f32
// CHECK: %[[F:.+]] = arith.subf %[[X]], %[[J]] : f32
// CHECK: %[[P3:.+]] = llvm.intr.fma(%{{.+}}, %[[F]], %{{.+}})
// CHECK: %[[P2:.+]] = llvm.intr.fma(%[[P3]], %[[F]], %{{.+}})
// CHECK: %[[P:.+]] = llvm.intr.fma(%[[P2]], %[[F]], %{{.+}})
// CHECK: %[[TB:.+]] = arith.bitcast %[[T]] : f32 to i32
// CHECK: %[[E:.+]] = arith.shli %[[TB]], %{{.+}} : i32
// CHECK: %[[PB:.+]] = arith.bitcast %[[P]] : f32 to i32
// CHECK: %[[SUM:.+]] = arith.addi %[[PB]], %[[E]] : i32
// CHECK: %[[R:.+]] = arith.bitcast %[[SUM]] : i32 to f32
// CHECK: %[[LOW:.+]] = arith.constant -1.250000e+02 : f32
// CHECK: %[[TINY:.+]] = arith.cmpf olt, %[[X]], %[[LOW]] : f32
// CHECK: arith.select %[[TINY]], %{{.+}}, %[[R]] : f32
// CHECK: %[[X4E:.+]] = llvm.intr.fma(%[[X4]], %[[C]], %[[NEG]])
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[X4E]])
gpu.module @m {
  gpu.func @poly(%s0: f32, %s1: f32, %s2: f32, %s3: f32, %s4: f32, %s5: f32, %s6: f32, %s7: f32, %c: f32, %out: memref<8xf32>) kernel {
    %s = builtin.unrealized_conversion_cast %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 : f32, f32, f32, f32, f32, f32, f32, f32 to !attn_gpu.fragment<16x16xf32, accumulator>
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %m = builtin.unrealized_conversion_cast %ninf, %ninf : f32, f32 to !attn_gpu.fragment<16x1xf32, rows>
    %l = builtin.unrealized_conversion_cast %zero, %zero : f32, f32 to !attn_gpu.fragment<16x1xf32, rows>
    %a = attn_gpu.fill %one : !attn_gpu.fragment<16x8xf32, accumulator>
    %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %l, %a scale %c {poly_exp2 = 4 : i64} : !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
    %v:8 = builtin.unrealized_conversion_cast %p : !attn_gpu.fragment<16x16xf32, accumulator> to f32, f32, f32, f32, f32, f32, f32, f32
    %i0 = arith.constant 0 : index
    memref.store %v#0, %out[%i0] : memref<8xf32>
    %i4 = arith.constant 4 : index
    memref.store %v#4, %out[%i4] : memref<8xf32>
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @share(%s: !attn_gpu.fragment<16x16xf32, accumulator>, %m: !attn_gpu.fragment<16x1xf32, rows>, %a: !attn_gpu.fragment<16x8xf32, accumulator>, %c: f32) kernel {
    // expected-error @+1 {{expected poly_exp2 in [1, 8] n8 tiles of every 8, got 9}}
    %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %m, %a scale %c {poly_exp2 = 9 : i64} : !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
    gpu.return
  }
}
