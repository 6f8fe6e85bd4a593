// RUN: fa-opt %s -convert-attn-gpu-to-nvvm | FileCheck %s --check-prefix=NVVM --enable-var-scope

// The update with a scale per 8 columns of a 16-column block: each row's
// maximum is taken per column block and scaled by the block's factor, then
// reduced over the row's four lanes; each score's exponent takes its own
// column's factor (lane values 0, 1 and 4, 5 are row g's columns 2t, 2t+1
// of the two n8 tiles).
// NVVM-LABEL: gpu.func @block_scales
// NVVM-SAME: (%[[X0:[^:]+]]: f32, %[[X1:[^:]+]]: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %[[X4:[^:]+]]: f32, %[[X5:[^:]+]]: f32, %{{[^:]+}}: f32, %{{[^:]+}}: f32, %[[C0:[^:]+]]: f32, %[[C1:[^:]+]]: f32,
// NVVM: %[[A0:.+]] = arith.maxnumf %{{.+}}, %[[X0]] : f32
// NVVM: %[[A1:.+]] = arith.maxnumf %[[A0]], %[[X1]] : f32
// NVVM: %[[M0:.+]] = arith.mulf %[[A1]], %[[C0]] : f32
// NVVM: %[[B0:.+]] = arith.maxnumf %{{.+}}, %[[X4]] : f32
// NVVM: %[[B1:.+]] = arith.maxnumf %[[B0]], %[[X5]] : f32
// NVVM: %[[M1:.+]] = arith.mulf %[[B1]], %[[C1]] : f32
// NVVM: %[[M:.+]] = arith.maxnumf %[[M0]], %[[M1]] : f32
// NVVM: gpu.shuffle  xor %[[M]]
// NVVM: %[[NEG:.+]] = arith.negf
// NVVM: llvm.intr.fma(%[[X0]], %[[C0]], %[[NEG]])
// NVVM: llvm.intr.fma(%[[X1]], %[[C0]], %[[NEG]])
// NVVM: llvm.intr.fma(%[[X4]], %[[C1]], %[[NEG]])
// NVVM: llvm.intr.fma(%[[X5]], %[[C1]], %[[NEG]])
gpu.module @m {
  gpu.func @block_scales(%s0: f32, %s1: f32, %s2: f32, %s3: f32, %s4: f32, %s5: f32, %s6: f32, %s7: f32, %c0: f32, %c1: f32, %out: memref<8xf32>) kernel {
    %s = builtin.unrealized_conversion_cast %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 : f32, f32, f32, f32, f32, f32, f32, f32 to !attn_gpu.fragment<16x16xf32, accumulator>
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %m = builtin.unrealized_conversion_cast %ninf, %ninf : f32, f32 to !attn_gpu.fragment<16x1xf32, rows>
    %l = builtin.unrealized_conversion_cast %zero, %zero : f32, f32 to !attn_gpu.fragment<16x1xf32, rows>
    %a = attn_gpu.fill %one : !attn_gpu.fragment<16x8xf32, accumulator>
    %p, %m1, %l1, %a1 = attn_gpu.online_softmax %s, %m, %l, %a scale %c0, %c1 {scale_block = 8 : i64} : !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x16xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
    %v:8 = builtin.unrealized_conversion_cast %p : !attn_gpu.fragment<16x16xf32, accumulator> to f32, f32, f32, f32, f32, f32, f32, f32
    %i0 = arith.constant 0 : index
    memref.store %v#0, %out[%i0] : memref<8xf32>
    %i5 = arith.constant 5 : index
    memref.store %v#5, %out[%i5] : memref<8xf32>
    gpu.return
  }
}
