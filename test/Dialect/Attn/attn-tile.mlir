// RUN: fa-opt %s -split-input-file -attn-tile="block-q=64 block-kv=32" -canonicalize | FileCheck %s
// RUN: fa-opt %s -split-input-file -attn-tile="block-q=128 block-kv=128" -canonicalize | FileCheck %s --check-prefix=BIG

// No mask, blocks divide the lengths: static tiles, one KV loop over every
// key block, no masking anywhere.
// CHECK-LABEL: func @nomask
// CHECK: scf.forall (%[[B:.+]], %[[H:.+]], %[[QB:.+]]) in (2, 4, 2) shared_outs(%[[ACC:.+]] = %{{.+}}, %[[M:.+]] = %{{.+}}, %[[L:.+]] = %{{.+}})
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %c64
// CHECK:   %[[HK:.+]] = arith.divui %[[H]], %c2
// CHECK:   %[[QT:.+]] = tensor.extract_slice %{{.+}}[%[[B]], %[[H]], %[[Q0]], 0] [1, 1, 64, 32]
// CHECK:   scf.for %[[KB:.+]] = %c0 to %c4 step %c1 iter_args({{.+}}) -> (tensor<1x1x64x32xf32>, tensor<1x1x64xf32>, tensor<1x1x64xf32>)
// CHECK:     %[[K0:.+]] = arith.muli %[[KB]], %c32
// CHECK:     tensor.extract_slice %{{.+}}[%[[B]], %[[HK]], %[[K0]], 0] [1, 1, 32, 32]
// CHECK-NOT: scf.if
// CHECK:     attn.online_attention %[[QT]], {{.+}} at [%[[B]], %[[H]], %[[Q0]], %[[K0]]] of [%c128, %c128]
// CHECK-NOT: apply_mask
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice %{{.+}} into %[[ACC]][%[[B]], %[[H]], %[[Q0]], 0] [1, 1, 64, 32]
// BIG-LABEL: func @nomask
// BIG: scf.forall (%{{.+}}, %{{.+}}) in (2, 4)
// BIG: tensor<1x1x128x32xbf16>
func.func @nomask(%q: tensor<2x4x128x32xbf16>, %k: tensor<2x2x128x32xbf16>, %v: tensor<2x2x128x32xbf16>,
                  %acc: tensor<2x4x128x32xf32>, %m: tensor<2x4x128xf32>, %l: tensor<2x4x128xf32>) -> (tensor<2x4x128x32xf32>, tensor<2x4x128xf32>, tensor<2x4x128xf32>) {
  %c0 = arith.constant 0 : index
  %n = arith.constant 128 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%n, %n]
      : tensor<2x4x128x32xbf16>, tensor<2x2x128x32xbf16>, tensor<2x2x128x32xbf16>, tensor<2x4x128x32xf32>, tensor<2x4x128xf32>, tensor<2x4x128xf32>
      -> tensor<2x4x128x32xf32>, tensor<2x4x128xf32>, tensor<2x4x128xf32>
  return %a, %mm, %ll : tensor<2x4x128x32xf32>, tensor<2x4x128xf32>, tensor<2x4x128xf32>
}

// -----

// Causal with ragged tails: the key loop stops at the last block a row of the
// Q block can see; blocks inside the band run unmasked, boundary blocks masked.
// CHECK-LABEL: func @causal_ragged
// CHECK: scf.forall (%[[QB:.+]]) in (2)
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %c64
// CHECK:   %[[QS:.+]] = arith.minsi %{{.+}}, %c64
// CHECK:   tensor.extract_slice {{.+}} [1, 1, %[[QS]], 16] {{.+}} to tensor<1x1x?x16xf16>
// CHECK:   %[[QE:.+]] = arith.addi %[[Q0]], %c64
// CHECK:   %[[QEND:.+]] = arith.minsi %[[QE]], %c100
// CHECK:   %[[HI:.+]] = arith.minsi %[[QEND]], %c90
// CHECK:   %[[HI0:.+]] = arith.maxsi %[[HI]], %c0
// CHECK:   %[[UP:.+]] = arith.addi %[[HI0]], %c31
// CHECK:   %[[END:.+]] = arith.divui %[[UP]], %c32
// CHECK:   %[[KBEND:.+]] = arith.maxsi %[[END]], %c0
// CHECK:   scf.for %[[KB:.+]] = %c0 to %[[KBEND]] step %c1
// CHECK:     %[[INSIDE:.+]] = arith.cmpi sle
// CHECK:     scf.if %[[INSIDE]]
// CHECK:       attn.online_attention {{.+}} {mask = #attn.mask<causal>}
// CHECK:     } else {
// CHECK:       attn.online_attention {{.+}} {apply_mask, mask = #attn.mask<causal>}
func.func @causal_ragged(%q: tensor<1x1x100x16xf16>, %k: tensor<1x1x90x16xf16>, %v: tensor<1x1x90x16xf16>,
                         %acc: tensor<1x1x100x16xf32>, %m: tensor<1x1x100xf32>, %l: tensor<1x1x100xf32>) -> (tensor<1x1x100x16xf32>, tensor<1x1x100xf32>, tensor<1x1x100xf32>) {
  %c0 = arith.constant 0 : index
  %nq = arith.constant 100 : index
  %nk = arith.constant 90 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk] {apply_mask, mask = #attn.mask<causal>}
      : tensor<1x1x100x16xf16>, tensor<1x1x90x16xf16>, tensor<1x1x90x16xf16>, tensor<1x1x100x16xf32>, tensor<1x1x100xf32>, tensor<1x1x100xf32>
      -> tensor<1x1x100x16xf32>, tensor<1x1x100xf32>, tensor<1x1x100xf32>
  return %a, %mm, %ll : tensor<1x1x100x16xf32>, tensor<1x1x100xf32>, tensor<1x1x100xf32>
}

// -----

// A sliding window also skips the key blocks left of the band.
// CHECK-LABEL: func @window
// CHECK: %[[LO:.+]] = arith.maxsi %{{.+}}, %c0
// CHECK: %[[KBBEGIN:.+]] = arith.divui %[[LO]], %c32
// CHECK: %[[END:.+]] = arith.divui %{{.+}}, %c32
// CHECK: %[[KBEND:.+]] = arith.maxsi %[[END]], %[[KBBEGIN]]
// CHECK: scf.for %{{.+}} = %[[KBBEGIN]] to %[[KBEND]]
// CHECK:   arith.cmpi sge
// CHECK:   arith.cmpi sle
// CHECK:   scf.if
func.func @window(%q: tensor<1x1x256x16xf32>, %k: tensor<1x1x256x16xf32>, %v: tensor<1x1x256x16xf32>,
                  %acc: tensor<1x1x256x16xf32>, %m: tensor<1x1x256xf32>, %l: tensor<1x1x256xf32>) -> (tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>) {
  %c0 = arith.constant 0 : index
  %n = arith.constant 256 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%n, %n]
      {apply_mask, mask = #attn.mask<window>, window_left = 64, window_right = 0}
      : tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
      -> tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
  return %a, %mm, %ll : tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
}

// -----

// A window of INT64_MAX is unbounded, not an overflow of diag - size that
// masked every row: the band clamps each size to 2^40.
// CHECK-LABEL: func @window_int64_max
// CHECK-NOT: arith.constant {{-?}}92233720368547758
// CHECK: arith.constant 1099511627776 : index
// CHECK-NOT: arith.constant {{-?}}92233720368547758
// CHECK: return
func.func @window_int64_max(%q: tensor<1x1x256x16xf32>, %k: tensor<1x1x256x16xf32>, %v: tensor<1x1x256x16xf32>,
                            %acc: tensor<1x1x256x16xf32>, %m: tensor<1x1x256xf32>, %l: tensor<1x1x256xf32>) -> (tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>) {
  %c0 = arith.constant 0 : index
  %n = arith.constant 256 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%n, %n]
      {apply_mask, mask = #attn.mask<window>, window_left = 9223372036854775807, window_right = 0}
      : tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
      -> tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
  return %a, %mm, %ll : tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
}

// -----

// A run-time window bounds the key-block loop by its operands: each size is
// made unbounded-safe once (unsigned min with 2^40: -1 becomes 2^40) and the
// tiles keep reading the operands.
// CHECK-LABEL: func @window_runtime
// CHECK-SAME: %[[WL:[^:]+]]: i64, %[[WR:[^:]+]]: i64
// CHECK-DAG: %[[BOUND:.+]] = arith.constant 1099511627776 : i64
// CHECK-DAG: %[[L:.+]] = arith.minui %[[WL]], %[[BOUND]]
// CHECK-DAG: %[[LI:.+]] = arith.index_cast %[[L]]
// CHECK: arith.subi %{{.+}}, %[[LI]]
// CHECK: scf.for
// CHECK: attn.online_attention {{.*}} window(%[[WL]], %[[WR]]) {apply_mask, mask = #attn.mask<window>}
func.func @window_runtime(%q: tensor<1x1x256x16xf32>, %k: tensor<1x1x256x16xf32>, %v: tensor<1x1x256x16xf32>,
                          %acc: tensor<1x1x256x16xf32>, %m: tensor<1x1x256xf32>, %l: tensor<1x1x256xf32>,
                          %wl: i64, %wr: i64) -> (tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>) {
  %c0 = arith.constant 0 : index
  %n = arith.constant 256 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%n, %n]
      window(%wl, %wr) {apply_mask, mask = #attn.mask<window>}
      : tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
      -> tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
  return %a, %mm, %ll : tensor<1x1x256x16xf32>, tensor<1x1x256xf32>, tensor<1x1x256xf32>
}

// -----

// Varlen: a forall over (sequence, head, query blocks of the longest
// sequence); each tile reads its sequence's span from cu_seqlens, slices its
// rows from the sequence's start, sees positions and lengths of its own
// sequence, and a block past a shorter sequence's end has no rows and no key
// blocks.
// CHECK-LABEL: func @varlen
// CHECK: %[[LONGEST:.+]] = scf.for
// CHECK:   tensor.extract %[[CUQ:.+]][%{{.+}}] : tensor<4xi32>
// CHECK:   arith.maxsi %{{.+}}, %{{.+}} : index
// CHECK: %[[QBLOCKS:.+]] = arith.ceildivui %[[LONGEST]], %c64
// CHECK: scf.forall (%[[S:.+]], %[[H:.+]], %[[QB:.+]]) in (3, 4, %[[QBLOCKS]])
// CHECK:   tensor.extract %[[CUQ]][%[[S]]] : tensor<4xi32>
// CHECK:   tensor.extract %[[CUK:.+]][%[[S]]] : tensor<4xi32>
// CHECK:   %[[KSTART:.+]] = arith.minsi %{{.+}}, %{{.+}} : index
// CHECK:   %[[KLEN:.+]] = arith.subi %{{.+}}, %[[KSTART]] : index
// CHECK:   %[[Q0:.+]] = arith.muli %[[QB]], %c64
// CHECK:   %[[QS:.+]] = arith.maxsi %{{.+}}, %c0 : index
// CHECK:   %[[QROW:.+]] = arith.addi %{{.+}}, %{{.+}} : index
// CHECK:   tensor.extract_slice %{{.+}}[0, %[[H]], %[[QROW]], 0] [1, 1, %[[QS]], 32]
// CHECK:   %[[EMPTY:.+]] = arith.cmpi eq, %[[QS]], %c0 : index
// CHECK:   %[[KBEND:.+]] = arith.select %[[EMPTY]], %c0, %{{.+}} : index
// CHECK:   scf.for %[[KB:.+]] = %c0 to %[[KBEND]]
// CHECK:     %[[K0:.+]] = arith.muli %[[KB]], %c32
// CHECK:     %[[KROW:.+]] = arith.addi %[[KSTART]], %[[K0]] : index
// CHECK:     tensor.extract_slice %{{.+}}[0, %{{.+}}, %[[KROW]], 0]
// CHECK:     attn.online_attention {{.+}} at [%[[S]], %[[H]], %[[Q0]], %[[K0]]] of [%{{.+}}, %[[KLEN]]]
// CHECK-NOT: varlen
// CHECK:   scf.forall.in_parallel
// CHECK:     tensor.parallel_insert_slice %{{.+}} into %{{.+}}[0, %[[H]], %[[QROW]], 0] [1, 1, %[[QS]], 32]
func.func @varlen(%q: tensor<1x4x?x32xbf16>, %k: tensor<1x2x?x32xbf16>, %v: tensor<1x2x?x32xbf16>,
                  %acc: tensor<1x4x?x32xf32>, %m: tensor<1x4x?xf32>, %l: tensor<1x4x?xf32>,
                  %cuq: tensor<4xi32>, %cuk: tensor<4xi32>, %nq: index, %nk: index) -> (tensor<1x4x?x32xf32>, tensor<1x4x?xf32>, tensor<1x4x?xf32>) {
  %c0 = arith.constant 0 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%nq, %nk]
      varlen(%cuq, %cuk : tensor<4xi32>, tensor<4xi32>) {apply_mask, mask = #attn.mask<causal_bottom_right>}
      : tensor<1x4x?x32xbf16>, tensor<1x2x?x32xbf16>, tensor<1x2x?x32xbf16>, tensor<1x4x?x32xf32>, tensor<1x4x?xf32>, tensor<1x4x?xf32>
      -> tensor<1x4x?x32xf32>, tensor<1x4x?xf32>, tensor<1x4x?xf32>
  return %a, %mm, %ll : tensor<1x4x?x32xf32>, tensor<1x4x?xf32>, tensor<1x4x?xf32>
}

// -----

// seqused_k: each batch's key count, clamped into [0, Nk], is its problem's
// Nk (the masks') and bounds its key loop; the key tiles are dynamic.
// CHECK-LABEL: func @seqused
// CHECK-SAME: %[[N:[^:]+]]: tensor<2xi32>
// CHECK: scf.forall (%[[B:.+]], %{{.+}}) in (2, 4)
// CHECK:   %[[RAW:.+]] = tensor.extract %[[N]][%[[B]]] : tensor<2xi32>
// CHECK:   %[[USED:.+]] = arith.index_cast %[[RAW]] : i32 to index
// CHECK:   %[[LO:.+]] = arith.maxsi %[[USED]], %c0
// CHECK:   %[[NK:.+]] = arith.minsi %[[LO]], %c128
// CHECK:   scf.for
// CHECK:     tensor.extract_slice {{.+}} to tensor<1x1x?x32xbf16>
// CHECK:     attn.online_attention {{.+}} of [%c4, %[[NK]]]
// CHECK-NOT: seqused_k
func.func @seqused(%q: tensor<2x4x4x32xbf16>, %k: tensor<2x2x128x32xbf16>, %v: tensor<2x2x128x32xbf16>,
                   %acc: tensor<2x4x4x32xf32>, %m: tensor<2x4x4xf32>, %l: tensor<2x4x4xf32>, %n: tensor<2xi32>) -> (tensor<2x4x4x32xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %a, %mm, %ll = attn.online_attention %q, %k, %v, %acc, %m, %l at [%c0, %c0, %c0, %c0] of [%c4, %c128] seqused_k(%n : tensor<2xi32>)
      : tensor<2x4x4x32xbf16>, tensor<2x2x128x32xbf16>, tensor<2x2x128x32xbf16>, tensor<2x4x4x32xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
      -> tensor<2x4x4x32xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
  return %a, %mm, %ll : tensor<2x4x4x32xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
}
