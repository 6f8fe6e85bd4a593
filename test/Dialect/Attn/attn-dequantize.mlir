// RUN: fa-opt %s -split-input-file -attn-dequantize | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-lower-to-llvm | FileCheck %s --check-prefix=LLVM

// fp8 attention on the CPU: Q, K, V decoded from e4m3 and scaled by their
// key head's descale factor (Q's query head h by h / (H / Hkv)), f32
// attention with the same attributes, O rounded to bf16; LSE as is.
// CHECK-LABEL: func.func @gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x8x16xf8E4M3FN>, %[[K:.+]]: tensor<2x2x8x16xf8E4M3FN>, %[[V:.+]]: tensor<2x2x8x16xf8E4M3FN>, %[[DQ:.+]]: tensor<2x2xf32>, %[[DK:.+]]: tensor<2x2xf32>, %[[DV:.+]]: tensor<2x2xf32>)
// CHECK: %[[QF:.+]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<2x4x8x16xf8E4M3FN>)
// CHECK: arith.bitcast %{{.+}} : f8E4M3FN to i8
// CHECK: arith.divui
// CHECK: tensor.extract %[[DQ]]
// CHECK: -> tensor<2x4x8x16xf32>
// CHECK: %[[KF:.+]] = linalg.generic {{.*}} ins(%[[K]] : tensor<2x2x8x16xf8E4M3FN>)
// CHECK: tensor.extract %[[DK]]
// CHECK: %[[VF:.+]] = linalg.generic {{.*}} ins(%[[V]] : tensor<2x2x8x16xf8E4M3FN>)
// CHECK: tensor.extract %[[DV]]
// CHECK: %[[ATT:.+]], %[[LSE:.+]] = attn.attention %[[QF]], %[[KF]], %[[VF]] {mask = #attn.mask<causal>, scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
// CHECK: %[[OB:.+]] = linalg.generic {{.*}} ins(%[[ATT]] : tensor<2x4x8x16xf32>)
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: return %[[OB]], %[[LSE]]
// The CPU pipeline runs it first: no fp8 value reaches LLVM but the bytes.
// LLVM-LABEL: llvm.func @gqa
// LLVM-NOT: f8E4M3FN
func.func @gqa(%q: tensor<2x4x8x16xf8E4M3FN>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>,
               %dq: tensor<2x2xf32>, %dk: tensor<2x2xf32>, %dv: tensor<2x2xf32>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {mask = #attn.mask<causal>, scale = 0.25 : f32}
      : tensor<2x4x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return %o, %lse : tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
}

// -----

// Block descales: Q row n of query head h takes dq[b, h, n / 64] (no head
// division), key n of key head hk dk[b, hk, n / 64], V its key head's.
// CHECK-LABEL: func.func @block
// CHECK-SAME: %[[DQ:[a-z0-9]+]]: tensor<2x4x3xf32>, %[[DK:[a-z0-9]+]]: tensor<2x2x2xf32>, %[[DV:[a-z0-9]+]]: tensor<2x2xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<2x4x130x16xf8E4M3FN>)
// CHECK: %[[QB:.+]] = linalg.index 0 : index
// CHECK: %[[QH:.+]] = linalg.index 1 : index
// CHECK: %[[QH1:.+]] = arith.divui %[[QH]], %c1 : index
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[QN:.+]] = linalg.index 2 : index
// CHECK: %[[QBLK:.+]] = arith.divui %[[QN]], %[[C64]] : index
// CHECK: tensor.extract %[[DQ]][%[[QB]], %[[QH1]], %[[QBLK]]]
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<2x2x70x16xf8E4M3FN>)
// CHECK: tensor.extract %[[DK]][%{{.+}}, %{{.+}}, %{{.+}}]
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<2x2x70x16xf8E4M3FN>)
// CHECK: tensor.extract %[[DV]][%{{.+}}, %{{.+}}] : tensor<2x2xf32>
func.func @block(%q: tensor<2x4x130x16xf8E4M3FN>, %k: tensor<2x2x70x16xf8E4M3FN>, %v: tensor<2x2x70x16xf8E4M3FN>,
                 %dq: tensor<2x4x3xf32>, %dk: tensor<2x2x2xf32>, %dv: tensor<2x2xf32>) -> (tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<2x4x3xf32>, tensor<2x2x2xf32>, tensor<2x2xf32>)
      : tensor<2x4x130x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN>, tensor<2x2x70x16xf8E4M3FN> -> tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
  return %o, %lse : tensor<2x4x130x16xbf16>, tensor<2x4x130xf32>
}

// -----

// The fp8 backward: Q, K, V and dO decoded and scaled (Q and dO by their
// query head's key head, h / (H / Hkv)), O extended from bf16, the f32
// backward with the same attributes, dQ, dK, dV rounded to bf16.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<1x4x8x16xf8E4M3FN>, %[[K:[a-z0-9]+]]: {{.+}}, %[[V:[a-z0-9]+]]: {{.+}}, %[[O:[a-z0-9]+]]: tensor<1x4x8x16xbf16>, %[[DO:[a-z0-9]+]]: tensor<1x4x8x16xf8E4M3FN>, %[[LSE:[a-z0-9]+]]: tensor<1x4x8xf32>, %[[SQ:[a-z0-9]+]]: tensor<1x2xf32>, %[[SK:[a-z0-9]+]]: tensor<1x2xf32>, %[[SV:[a-z0-9]+]]: tensor<1x2xf32>, %[[SDO:[a-z0-9]+]]: tensor<1x2xf32>)
// CHECK: %[[QF:.+]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<1x4x8x16xf8E4M3FN>)
// CHECK: arith.divui
// CHECK: tensor.extract %[[SQ]]
// CHECK: %[[KF:.+]] = linalg.generic {{.*}} ins(%[[K]] :
// CHECK: tensor.extract %[[SK]]
// CHECK: %[[VF:.+]] = linalg.generic {{.*}} ins(%[[V]] :
// CHECK: tensor.extract %[[SV]]
// CHECK: %[[DOF:.+]] = linalg.generic {{.*}} ins(%[[DO]] : tensor<1x4x8x16xf8E4M3FN>)
// CHECK: arith.divui
// CHECK: tensor.extract %[[SDO]]
// CHECK: %[[OF:.+]] = linalg.generic {{.*}} ins(%[[O]] : tensor<1x4x8x16xbf16>)
// CHECK: arith.extf %{{.+}} : bf16 to f32
// CHECK: %[[GQ:.+]], %[[GK:.+]], %[[GV:.+]] = attn.attention_backward %[[QF]], %[[KF]], %[[VF]], %[[OF]], %[[DOF]], %[[LSE]] {mask = #attn.mask<causal>} : tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32> -> tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
// CHECK: %[[BQ:.+]] = linalg.generic {{.*}} ins(%[[GQ]] :
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: %[[BK:.+]] = linalg.generic {{.*}} ins(%[[GK]] :
// CHECK: %[[BV:.+]] = linalg.generic {{.*}} ins(%[[GV]] :
// CHECK: return %[[BQ]], %[[BK]], %[[BV]]
// LLVM-LABEL: llvm.func @backward
// LLVM-NOT: f8E4M3FN
func.func @backward(%q: tensor<1x4x8x16xf8E4M3FN>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>,
                    %o: tensor<1x4x8x16xbf16>, %do: tensor<1x4x8x16xf8E4M3FN>, %lse: tensor<1x4x8xf32>,
                    %sq: tensor<1x2xf32>, %sk: tensor<1x2xf32>, %sv: tensor<1x2xf32>, %sdo: tensor<1x2xf32>)
    -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse descale(%sq, %sk, %sv, %sdo : tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) {mask = #attn.mask<causal>}
      : tensor<1x4x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xf8E4M3FN>, tensor<1x4x8xf32>
      -> tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
  return %dq, %dk, %dv : tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
}

// -----

// Attention of other element types is left alone.
// CHECK-LABEL: func.func @bf16
// CHECK-NOT: linalg.generic
// CHECK: attn.attention
func.func @bf16(%q: tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>) {
  %o, %lse = attn.attention %q, %q, %q : tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16> -> tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>
  return %o, %lse : tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>
}
