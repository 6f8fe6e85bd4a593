//===- Passes.td - attn transformation passes ---------------*- tablegen -*-===//

#ifndef FA_DIALECT_ATTN_TRANSFORMS_PASSES
#define FA_DIALECT_ATTN_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def AttnOnlineSoftmaxPass : Pass<"attn-online-softmax", "func::FuncOp"> {
  let summary = "Rewrite attn.attention into the online-softmax form";
  let description = [{
    Seed 4.2.2. The softmax over a whole row becomes a running (max, sum, acc)
    triple updated by attn.online_attention, so the key reduction can be split
    into blocks. The row is finalised as O = acc / l and LSE = m + log l
    (m in base-2 units: LSE = ln2·(m + log2 l)); l = 0 gives O = 0, LSE = -inf.

    Before:
    ```mlir
    %o, %lse = attn.attention %q, %k, %v : ... -> ...
    ```
    After:
    ```mlir
    %acc0 = linalg.fill ins(%zero) ...   %m0 = linalg.fill ins(%ninf) ...
    %acc, %m, %l = attn.online_attention %q, %k, %v, %acc0, %m0, %l0
        at [%c0, %c0, %c0, %c0] of [%nq, %nk] {apply_mask} : ...
    %o, %lse = linalg.generic ... // acc / l, ln2 * (m + log2 l)
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def AttnSplitKvPass : Pass<"attn-split-kv", "func::FuncOp"> {
  let summary = "Split the key range of the online form over workers joined by attn.merge";
  let description = [{
    For decode (few query rows, a long key range) one worker per query block
    leaves a GPU idle; splitting the key reduction gives S independent
    workers. Each attn.online_attention over a whole problem, with the
    finalisation attn-online-softmax wrote for it, becomes an scf.forall over
    S key splits (marked `attn.key_splits = S`). Split s runs the online
    update over key blocks [s·nblk/S, (s+1)·nblk/S) of `block-kv` keys
    (nblk = ceil(Nk / block-kv); a kernel plan's block_kv wins), with its
    absolute key offset so masks and score_mod see true positions, and is
    finalised into a partial O_s (f32) and LSE_s. attn.merge joins them. A
    split with no visible key (S > nblk, or a mask) gives O_s = 0 and
    LSE_s = −inf and contributes nothing.

    Before:
    ```mlir
    %acc, %m, %l = attn.online_attention %q, %k, %v, %acc0, %m0, %l0 at [...] of [%nq, %nk] : ...
    %rows:2 = linalg.generic ... ins(%m, %l ...)       // 1/l, LSE
    %o = linalg.generic ... ins(%acc, %rows#0 ...)       // acc·(1/l)
    ```
    After:
    ```mlir
    %parts:3 = scf.forall (%s) in (4) shared_outs(...) {
      %k_s = tensor.extract_slice %k[0, 0, %k0, 0] [B, Hkv, %len, D] [1, 1, 1, 1]
      %a, %mx, %sm = attn.online_attention %q, %k_s, %v_s, ... at [0, 0, 0, %k0] of [%nq, %nk]
      ...
    } {attn.key_splits = 4 : i64}
    %o_s, %lse_s = ... finalisation of [S, B, H, Nq, ...] ...
    %o, %lse = attn.merge %o_s, %lse_s : ...
    ```
  }];
  let options = [
    Option<"splits", "splits", "int64_t", "4", "key splits (workers per row)">,
    Option<"blockKV", "block-kv", "int64_t", "64",
           "key rows per block: splits own whole blocks">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def AttnTilePass : Pass<"attn-tile", "func::FuncOp"> {
  let summary = "Tile attn.online_attention into Q blocks and a KV-block loop";
  let description = [{
    Seed 4.2.1/4.2.4. A parallel scf.forall over (batch, head, query block)
    and, inside it, an scf.for over key blocks carrying (acc, m, l). Query head
    h reads key head h / (H / Hkv). With a mask, the key loop only visits
    blocks that intersect the band of the query block; blocks wholly inside
    the band run without a mask, boundary blocks with one (scf.if). Ragged
    tails use dynamically sized slices. No Nq×Nk value remains.

    With `pack-gqa` (or a kernel plan's `pack_gqa`) the query heads that
    share a key head fill one tile: the forall runs over (batch, key head
    hk, query block), and tile (b, hk, qb) holds query heads
    [hk·G, hk·G + G) (G = H / Hkv) × queries [qb·n, qb·n + n) with
    n = max(block-q / G, 1), so each key block is read once for the G heads.
    Masks and score_mod see each row's own head and query.

    ```mlir
    scf.forall (%b, %hk, %qb) in (%B, %Hkv, %nblk) shared_outs(...) {
      %h0 = arith.muli %hk, %G
      %qt = tensor.extract_slice %q[%b, %h0, %q0, 0] [1, %G, %n, D] ...
    ```
  }];
  let options = [
    Option<"blockQ", "block-q", "int64_t", "64", "query rows per tile">,
    Option<"blockKV", "block-kv", "int64_t", "64", "key rows per tile">,
    Option<"packGqa", "pack-gqa", "bool", "false",
           "tile the query heads of one key head together (packed GQA)">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::affine::AffineDialect",
                           "::mlir::arith::ArithDialect"];
}

def AttnRecomputeBackwardPass : Pass<"attn-recompute-backward", "func::FuncOp"> {
  let summary = "Lower attn.attention_backward to the recompute backward";
  let description = [{
    Seed 4.3. D = rowsum(dO∘O) per query row first. Then, for each
    (batch, key head) in parallel, an outer loop over key blocks and an inner
    loop over (query head of the group, query block): S and P are recomputed
    from Q, K and the saved LSE by attn.backward_tile, dK_j and dV_j are
    carried by the inner loop, and dQ is accumulated across key blocks.

    dQ strategy: the key-block loop is sequential per (batch, key head) and
    carries dQ of the group's heads, so every dQ element is summed in a fixed
    order (bit-identical run to run). With `deterministic=false` the key
    blocks form an scf.forall and each writes a partial dQ slab
    [key block, ...] that is summed afterwards: more parallelism, more memory;
    the sum is still in a fixed order on the CPU, while the GPU lowering may
    use atomics instead.
  }];
  let options = [
    Option<"blockQ", "block-q", "int64_t", "64", "query rows per tile">,
    Option<"blockKV", "block-kv", "int64_t", "64", "key rows per tile">,
    Option<"deterministic", "deterministic", "bool", "true",
           "accumulate dQ in a fixed order over key blocks">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::affine::AffineDialect",
                           "::mlir::arith::ArithDialect"];
}

def AttnDequantizePass : Pass<"attn-dequantize", "func::FuncOp"> {
  let summary = "Rewrite fp8 attention into f32 attention of dequantised inputs";
  let description = [{
    The CPU form of the fp8 forward and backward: each f8E4M3FN Q, K, V
    (and the backward's dO) becomes f32 x·descale[b, h / (H / Hkv)] (query
    head h takes its key head's factor), attention or its backward runs in
    f32 (the backward's bf16 O extended) and O, or dQ, dK and dV, are
    rounded to bf16.

    ```mlir
    %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : ...)
        : tensor<1x4x64x128xf8E4M3FN>, ... -> tensor<1x4x64x128xbf16>, ...
    // becomes
    %qf = linalg.generic ... (f8E4M3FN decoded, times %dq[b, h / G]) -> f32
    %of, %lse = attn.attention %qf, %kf, %vf : ... -> tensor<...xf32>, ...
    %o = arith.truncf %of (elementwise) -> bf16
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def AttnIncoherentQkPass : Pass<"attn-incoherent-qk", "func::FuncOp"> {
  let summary = "Rotate Q and K by a Hadamard matrix before their e4m3 quantisation";
  let description = [{
    FA3's incoherent processing. An fp8 attn.attention whose Q and K are
    results of attn.quantize gets an attn.hadamard on both quantised inputs:
    (Q·R)(K·R)ᵀ = Q·Kᵀ for the orthonormal R, so the op computes the same
    attention, but an outlier column of Q or K is spread over its group of
    columns before rounding to e4m3 instead of setting the rounding step of
    its whole head. V is not rotated (O would need the inverse rotation).
    Inputs already rotated are left as they are; a quantisation that other
    ops also read is copied, so they keep the unrotated values. An fp8 op
    whose Q or K is not quantised in the function cannot be rotated: the
    pass warns and leaves it.

    ```mlir
    %q8, %dq = attn.quantize %q : ...
    %k8, %dk = attn.quantize %k : ...
    %o, %lse = attn.attention %q8, %k8, %v8 descale(%dq, %dk, %dv : ...) : ...
    // becomes
    %qr = attn.hadamard %q : ...
    %q8, %dq = attn.quantize %qr : ...
    %kr = attn.hadamard %k : ...
    %k8, %dk = attn.quantize %kr : ...
    %o, %lse = attn.attention %q8, %k8, %v8 descale(%dq, %dk, %dv : ...) : ...
    ```
  }];
}

def AttnDecomposePass : Pass<"attn-decompose", "func::FuncOp"> {
  let summary = "Decompose attn tile ops into linalg / arith / math";
  let description = [{
    attn.online_attention becomes: S = Q·Kᵀ (f32 accumulation), scaled and
    score-modded and masked scores in base-2 units, rowmax, the α rescale,
    P = exp2(t − m), rowsum, acc = α·acc + P·V. attn.backward_tile becomes the
    recomputation of P from LSE and the five gradient products of seed 4.3.
    A score_mod region is inlined into the element-wise body; in the backward
    it is also differentiated. attn.paged_view becomes a gather through the
    page table, attn.rotary an element-wise rotation of each column pair and
    attn.kv_append a loop inserting each new row at its (page, row).
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect"];
}

#endif // FA_DIALECT_ATTN_TRANSFORMS_PASSES
