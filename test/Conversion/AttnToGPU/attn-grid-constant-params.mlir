// RUN: fa-opt %s -split-input-file -verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(gpu.module(llvm.func(attn-grid-constant-params)))' | FileCheck %s

// The listed parameters become 128-byte, 64-aligned by-value grid constants;
// each use reads the parameter's generic address right before it; other
// parameters and kernels without the attribute are left alone.
// CHECK-LABEL: llvm.func @k(
// CHECK-SAME: %[[P0:[^:]+]]: !llvm.ptr,
// CHECK-SAME: %{{[^:]+}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME: %{{[^:]+}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// CHECK-NOT: fa.grid_constant_params
// CHECK: llvm.inline_asm has_side_effects "mov.b64 $0, k_param_1;\0A\09cvta.param.u64 $0, $0;", "=l"  : () -> i64
// CHECK-NEXT: %[[A1:.+]] = llvm.inttoptr
// CHECK-NEXT: llvm.inline_asm has_side_effects "prefetch.tensormap [$0];", "l" %[[A1]]
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "mov.b64 $0, k_param_2;\0A\09cvta.param.u64 $0, $0;", "=l"
// CHECK-NEXT: %[[A2:.+]] = llvm.inttoptr
// CHECK-NEXT: llvm.inline_asm has_side_effects "prefetch.tensormap [$0];", "l" %[[A2]]
// CHECK: llvm.load %[[P0]]
// CHECK-LABEL: llvm.func @plain(
// CHECK-SAME: %{{[^:]+}}: !llvm.ptr)
gpu.module @m {
  llvm.func @k(%p0: !llvm.ptr, %map1: !llvm.ptr, %map2: !llvm.ptr) attributes {fa.grid_constant_params = array<i32: 1, 2>, nvvm.kernel} {
    llvm.inline_asm has_side_effects "prefetch.tensormap [$0];", "l" %map1 : (!llvm.ptr) -> ()
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      llvm.inline_asm has_side_effects "prefetch.tensormap [$0];", "l" %map2 : (!llvm.ptr) -> ()
    }
    %x = llvm.load %p0 : !llvm.ptr -> i32
    llvm.return
  }
  llvm.func @plain(%p: !llvm.ptr) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

gpu.module @m {
  // expected-error @+1 {{expected fa.grid_constant_params to list !llvm.ptr parameters, got 1 of 2 parameters}}
  llvm.func @k(%p0: !llvm.ptr, %n: i32) attributes {fa.grid_constant_params = array<i32: 1>, nvvm.kernel} {
    llvm.return
  }
}

// -----

gpu.module @m {
  // expected-error @+1 {{expected fa.grid_constant_params to list !llvm.ptr parameters, got 5 of 1 parameters}}
  llvm.func @k(%p0: !llvm.ptr) attributes {fa.grid_constant_params = array<i32: 5>, nvvm.kernel} {
    llvm.return
  }
}
