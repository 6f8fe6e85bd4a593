// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope

// fa_bwd_pre and fa_bwd_post keep every thread busy and each warp's accesses
// contiguous. Delta = rowsum(dO∘O): lanes of one row take consecutive 16-byte
// chunks of it (16 lanes for Dv/8 = 16 chunks, 256 threads: 16 rows at a
// time, 4 row steps), every load first, then a butterfly of xor shuffles
// (8, 4, 2, 1) over the row's lanes; its lane 0 stores. dq_accum and dQ: the
// block's rows as one run of 16-byte f32 chunks, thread t taking t + 256·k.
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d128_bq64_bkv128_w8_s1_none_sm90a
// CHECK: gpu.func @fa_bwd_pre_bwd_bf16_d128_bq64_bkv128_w8_s1_none_sm90a(
// CHECK: %[[TID:.+]] = gpu.thread_id x
// The block: first row 64·block_id.x of its head, min(Nq − that, 64) rows.
// CHECK: %[[ROW0:.+]] = arith.muli %block_id_x, %c64{{(_[0-9]+)?}} : index
// CHECK: %[[FIRST:.+]] = arith.addi %{{.+}}, %[[ROW0]] : index
// CHECK: %[[REST:.+]] = arith.subi %{{.+}}, %[[ROW0]] : index
// CHECK: %[[COUNT:.+]] = arith.minsi %[[REST]], %c64{{(_[0-9]+)?}} : index
// O's (and dO's) block starts at b·sB + h·sH + row0·sN (the caller's
// strides, parameters 7-9 and 10-12); lanes past Nq read that first chunk.
// CHECK: %[[OSN:.+]] = arith.index_cast %arg9 : i64 to index
// CHECK: %[[R0SN:.+]] = arith.muli %[[ROW0]], %[[OSN]] : index
// CHECK-NEXT: %[[OFIRST:.+]] = arith.addi %{{.+}}, %[[R0SN]] : index
// The thread id splits into the chunk (tid mod 16) and the row (tid / 16).
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[ROWIN:.+]] = arith.divui %[[TID]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[R0:.+]] = arith.addi %[[ROWIN]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[CH0:.+]] = arith.addi %[[LANE]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[OK0:.+]] = arith.cmpi slt, %[[R0]], %[[COUNT]] : index
// CHECK: %[[COL0:.+]] = arith.muli %[[CH0]], %c8{{(_[0-9]+)?}} : index
// CHECK: %[[ROWAT0:.+]] = arith.muli %[[R0]], %[[OSN]] : index
// CHECK: %[[ABS0:.+]] = arith.addi %[[OFIRST]], %[[ROWAT0]] : index
// CHECK: %[[AT0:.+]] = arith.addi %[[ABS0]], %[[COL0]] : index
// CHECK: %[[OAT0:.+]] = arith.select %[[OK0]], %[[AT0]], %[[OFIRST]] : index
// CHECK: vector.load %arg0[%[[OAT0]]] {alignment = 16 : i64} : memref<1099511627776xbf16>, vector<8xbf16>
// CHECK: vector.load %arg1[%{{.+}}] {alignment = 16 : i64} : memref<1099511627776xbf16>, vector<8xbf16>
// CHECK-NOT: gpu.shuffle
// CHECK: arith.addi %[[ROWIN]], %c16{{(_[0-9]+)?}} : index
// CHECK-COUNT-2: vector.load
// CHECK-NOT: gpu.shuffle
// CHECK: arith.addi %[[ROWIN]], %c32{{(_[0-9]+)?}} : index
// CHECK-COUNT-2: vector.load
// CHECK-NOT: gpu.shuffle
// CHECK: arith.addi %[[ROWIN]], %c48{{(_[0-9]+)?}} : index
// CHECK-COUNT-2: vector.load
// CHECK-NOT: gpu.shuffle
// CHECK: %[[LANE0:.+]] = arith.cmpi eq, %[[LANE]], %c0{{(_[0-9]+)?}} : index
// CHECK: vector.reduction <add>
// Out-of-range lanes add 0; the shuffles themselves are not predicated.
// CHECK: %[[P:.+]] = arith.select %[[OK0]], %{{.+}}, %{{.+}} : f32
// CHECK-NOT: scf.if
// CHECK: %[[S8:[^ ,]+]], %{{.+}} = gpu.shuffle xor %[[P]], %c8_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// CHECK: %[[A8:.+]] = arith.addf %[[P]], %[[S8]] : f32
// CHECK: %[[S4:[^ ,]+]], %{{.+}} = gpu.shuffle xor %[[A8]], %c4_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// CHECK: %[[A4:.+]] = arith.addf %[[A8]], %[[S4]] : f32
// CHECK: %[[S2:[^ ,]+]], %{{.+}} = gpu.shuffle xor %[[A4]], %c2_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// CHECK: %[[A2:.+]] = arith.addf %[[A4]], %[[S2]] : f32
// CHECK: %[[S1:[^ ,]+]], %{{.+}} = gpu.shuffle xor %[[A2]], %c1_i32{{(_[0-9]+)?}}, %c32_i32{{(_[0-9]+)?}} : f32
// CHECK: %[[A1:.+]] = arith.addf %[[A2]], %[[S1]] : f32
// CHECK-NOT: gpu.shuffle
// One lane per row stores Delta, rows at or past Nq skipped.
// CHECK: %[[ROWOK:.+]] = arith.cmpi slt, %[[R0]], %[[COUNT]] : index
// CHECK: %[[STORE:.+]] = arith.andi %[[LANE0]], %[[ROWOK]] : i1
// CHECK: scf.if %[[STORE]] {
// CHECK-NEXT: %[[DROW:.+]] = arith.addi %[[FIRST]], %[[R0]] : index
// CHECK-NEXT: memref.store %[[A1]], %arg2[%[[DROW]]] : memref<1099511627776xf32>
// CHECK-COUNT-3: memref.store
// dq_accum: 64 rows · 32 chunks = 2048 chunks, 8 per thread, rows < Nq only.
// CHECK: %[[ZBASE:.+]] = arith.muli %[[FIRST]], %c128{{(_[0-9]+)?}} : index
// CHECK: %[[ZLIMIT:.+]] = arith.muli %[[COUNT]], %c32{{(_[0-9]+)?}} : index
// CHECK: %[[Z0:.+]] = arith.addi %[[TID]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[ZOK:.+]] = arith.cmpi slt, %[[Z0]], %[[ZLIMIT]] : index
// CHECK: %[[ZCOL:.+]] = arith.muli %[[Z0]], %c4{{(_[0-9]+)?}} : index
// CHECK: %[[ZAT:.+]] = arith.addi %[[ZBASE]], %[[ZCOL]] : index
// CHECK: scf.if %[[ZOK]] {
// CHECK-NEXT: vector.store %{{.+}}, %arg3[%[[ZAT]]] {alignment = 16 : i64} : memref<1099511627776xf32>, vector<4xf32>
// CHECK-COUNT-6: vector.store {{.*}} vector<4xf32>
// CHECK: arith.addi %[[TID]], %c1792{{(_[0-9]+)?}} : index
// CHECK: vector.store {{.*}} vector<4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return
// fa_bwd_post: 8 16-byte f32 loads per thread (chunks tid + 256·k), then the
// stores of rows < Nq.
// CHECK: gpu.func @fa_bwd_post_bwd_bf16_d128_bq64_bkv128_w8_s1_none_sm90a(
// CHECK: %[[PTID:.+]] = gpu.thread_id x
// CHECK: %[[PLIMIT:.+]] = arith.muli %{{.+}}, %c32{{(_[0-9]+)?}} : index
// CHECK: %[[P0:.+]] = arith.addi %[[PTID]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[POK:.+]] = arith.cmpi slt, %[[P0]], %[[PLIMIT]] : index
// CHECK: %[[PV:.+]] = vector.load %arg0[%{{.+}}] {alignment = 16 : i64} : memref<1099511627776xf32>, vector<4xf32>
// CHECK-NOT: scf.if
// CHECK-COUNT-7: vector.load %arg0
// CHECK: scf.if %[[POK]] {
// CHECK-NEXT: %[[PT:.+]] = arith.truncf %[[PV]] : vector<4xf32> to vector<4xbf16>
// CHECK-NEXT: vector.store %[[PT]], %arg1[%{{.+}}] {alignment = 8 : i64} : memref<1099511627776xbf16>, vector<4xbf16>
func.func @backward_d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}

// -----

// D = 72: Dv/8 = 9 chunks, rounded up to 16 lanes per row (128 threads: 8
// rows at a time, 4 row steps); lanes 9-15 are masked and add 0. dq_accum:
// 32 rows · 18 chunks = 576 chunks, 5 steps of 128 (the last one partial).
// CHECK-LABEL: gpu.module @fa_bwd_f16_d72_bq32_bkv64_w4_s1_none_sm90a
// CHECK: gpu.func @fa_bwd_pre_bwd_f16_d72_bq32_bkv64_w4_s1_none_sm90a(
// CHECK: %[[TID:.+]] = gpu.thread_id x
// CHECK: %[[COUNT:.+]] = arith.minsi %{{.+}}, %c32{{(_[0-9]+)?}} : index
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[ROWIN:.+]] = arith.divui %[[TID]], %c16{{(_[0-9]+)?}} : index
// CHECK: %[[R0:.+]] = arith.addi %[[ROWIN]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[CH0:.+]] = arith.addi %[[LANE]], %c0{{(_[0-9]+)?}} : index
// CHECK: %[[ROWOK:.+]] = arith.cmpi slt, %[[R0]], %[[COUNT]] : index
// CHECK: %[[CHOK:.+]] = arith.cmpi slt, %[[CH0]], %c9{{(_[0-9]+)?}} : index
// CHECK: %[[OK0:.+]] = arith.andi %[[ROWOK]], %[[CHOK]] : i1
// CHECK: %[[COL0:.+]] = arith.muli %[[CH0]], %c8{{(_[0-9]+)?}} : index
// CHECK: arith.muli %[[R0]], %{{.+}} : index
// CHECK: arith.select %[[OK0]]
// CHECK: vector.load %arg0[%{{.+}}] {alignment = 16 : i64} : memref<1099511627776xf16>, vector<8xf16>
// CHECK: arith.addi %[[ROWIN]], %c8{{(_[0-9]+)?}} : index
// CHECK: arith.addi %[[ROWIN]], %c16{{(_[0-9]+)?}} : index
// CHECK: arith.addi %[[ROWIN]], %c24{{(_[0-9]+)?}} : index
// CHECK: %[[LANE0:.+]] = arith.cmpi eq, %[[LANE]], %c0{{(_[0-9]+)?}} : index
// CHECK: arith.extf {{.*}} : vector<8xf16> to vector<8xf32>
// CHECK: %[[P:.+]] = arith.select %[[OK0]], %{{.+}}, %{{.+}} : f32
// CHECK: gpu.shuffle xor %[[P]], %c8_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c4_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c2_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c1_i32
// CHECK-NOT: gpu.shuffle
// CHECK: arith.andi %[[LANE0]], %{{.+}} : i1
// CHECK: memref.store
// CHECK: %[[ZLIMIT:.+]] = arith.muli %[[COUNT]], %c18{{(_[0-9]+)?}} : index
// CHECK-COUNT-4: vector.store {{.*}} : memref<1099511627776xf32>, vector<4xf32>
// CHECK: %[[Z4:.+]] = arith.addi %[[TID]], %c512{{(_[0-9]+)?}} : index
// CHECK: arith.cmpi slt, %[[Z4]], %[[ZLIMIT]] : index
// CHECK: vector.store {{.*}} : memref<1099511627776xf32>, vector<4xf32>
// CHECK-NOT: vector.store
// CHECK: gpu.return
func.func @backward_d72(%q: tensor<?x?x?x72xf16>, %k: tensor<?x?x?x72xf16>, %v: tensor<?x?x?x72xf16>, %o: tensor<?x?x?x72xf16>, %do: tensor<?x?x?x72xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>
  return %dq, %dk, %dv : tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>, tensor<?x?x?x72xf16>
}

// -----

// D = 256: Dv/8 = 32 chunks, a whole warp per row and shuffles 16 … 1.
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_none_sm90a
// CHECK: gpu.func @fa_bwd_pre_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_none_sm90a(
// CHECK: arith.remui %thread_id_x, %c32{{(_[0-9]+)?}} : index
// CHECK: arith.remui %thread_id_x, %c32{{(_[0-9]+)?}} : index
// CHECK-NEXT: arith.constant 32 : index
// CHECK-NEXT: arith.divui %thread_id_x, %c32{{(_[0-9]+)?}} : index
// CHECK: gpu.shuffle xor %{{.+}}, %c16_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c8_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c4_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c2_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c1_i32
// CHECK: gpu.func @fa_bwd_bwd_bf16_d256
func.func @backward_d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %do: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
}
