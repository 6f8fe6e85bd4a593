//===- AttnOps.td - attn dialect ops ------------------------*- tablegen -*-===//

#ifndef ATTN_OPS_TD
#define ATTN_OPS_TD

include "attn/AttnBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

// Attributes shared by every op that evaluates scores, and the run-time
// window sizes: mask window takes either window_left/window_right (-1:
// unbounded on that side) or `window(%left, %right)`, two i64 operands
// (negative: unbounded) that one kernel reads for every window. Sizes
// beyond 2^40 mean unbounded (the band's arithmetic cannot overflow).
defvar AttnScoreAttrs = (ins
    OptionalAttr<F32Attr>:$scale,
    DefaultValuedAttr<Attn_MaskKindAttr, "::mlir::fa::attn::MaskKind::None">:$mask,
    OptionalAttr<I64Attr>:$window_left,
    OptionalAttr<I64Attr>:$window_right,
    Variadic<I64>:$window_sizes);

def Attn_AttentionOp : Attn_Op<"attention", [
    RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "scaled dot-product attention with its log-sum-exp";
  let description = [{
    O = softmax(mask(score_mod(Q·Kᵀ·scale)))·V and LSE = log Σ_j exp(s_ij) per row.
    Q is [B,H,Nq,D], K [B,Hkv,Nk,D], V [B,Hkv,Nk,Dv], with H a multiple of Hkv:
    query head h reads key/value head h / (H / Hkv). Accumulation is in f32.
    `scale` defaults to 1/sqrt(D). The optional `score_mod` region maps
    (score : f32, b, h, q_idx, kv_idx : index) to a new score, after scaling.
    It may read tensors defined outside it with `tensor.extract`; each index
    is clamped into [0, size - 1] of its dimension (a negative index reads
    the first element, one past the end the last). An index the verifier can
    bound (a constant, or b, h, q_idx, kv_idx themselves against static
    extents) must lie inside, and an indexed dimension must not be empty.
    A row whose keys are all masked out gives O = 0 and LSE = -inf.

    Variable-length batches (`varlen(%cu_seqlens_q, %cu_seqlens_k)`, i32
    [B+1] each): B sequences packed along the token axis, Q [Tq,H,D], K
    [Tk,Hkv,D], V [Tk,Hkv,Dv], O [Tq,H,Dv] and LSE [H,Tq] (flash-attn's
    varlen layout). Sequence b holds query rows [cu_q[b], cu_q[b+1]) and key
    rows [cu_k[b], cu_k[b+1]); its queries see only its keys. Masks and
    score_mod see b and indices measured from the sequence's own start, and
    causal_bottom_right / window use the sequence's own Nq and Nk. The
    offsets start at 0, never decrease and end at Tq (Tk); a sequence may be
    empty.

    `mod_args` are tensors the score_mod reads (per-head ALiBi slopes [H], a
    relative-position bias table [H, Nq+Nk-1], a per-key bias [B, Nk]): ranked,
    of f32, f16, bf16, i32 or i64. The region receives them as block arguments
    after kv_idx, of the same types, and reads them with `tensor.extract`
    under the clamping rule above. Unlike a captured tensor, a mod_arg is an
    operand, so a GPU kernel takes it as a parameter. The backward treats
    mod_args as constants: no gradient flows to them.

    The optional `mask_mod` region maps (b, h, q_idx, kv_idx : index, then
    the mod_args) to an i1: false masks the element out (-inf before the
    softmax). It composes with `mask` (an element is visible only if both
    keep it) and applies after score_mod. It reads mod_args under the same
    rule as score_mod; a document mask reads doc ids [B, N]:
    `visible = doc[b, q_idx] == doc[b, kv_idx]`.

    fp8 (FA3's forward): Q, K and V of f8E4M3FN take
    `descale(%dq, %dk, %dv)`, f32 [B, Hkv] each: the op computes attention
    of the dequantised x·descale[b, h / (H / Hkv)] (query head h reads the
    factors of its key head), O is bf16 and LSE f32. Block descales scale
    Q and K per 64 rows instead: dq f32 [B, H, ceil(Nq/64)] and dk f32
    [B, Hkv, ceil(Nk/64)] (query row n of head h reads dq[b, h, n / 64], key
    n of key head hk dk[b, hk, n / 64]), dv [B, Hkv] as before; an outlier
    then coarsens only its own block's quantisation. No score_mod,
    mask_mod or varlen with fp8; `attn-dequantize` rewrites it into f32
    attention for the CPU, the sm_90a wgmma kernel consumes it as is.
    `sinks` (f32 [H], one per query head) are learnable logits that join
    every row's softmax denominator without a value (attention sinks):
    O = Σ_j e^{s_j−m} v_j / (e^{sink_h−m} + Σ_j e^{s_j−m}), and LSE counts
    the sink, so a row whose keys are all masked out gives O = 0 and
    LSE = sink_h. A sink of -inf is no sink.

    A paged KV cache (`paged(%page_table, %seqused_k)`, flash-attn's
    layout): K [num_pages, page_size, Hkv, D] and V [num_pages, page_size,
    Hkv, Dv] are pools of pages, page_table (i32 [B, max_pages]) lists each
    sequence's pages in order and seqused_k (i32 [B]) its key count. Key n of
    sequence b is row n mod page_size of page page_table[b, n / page_size]
    (an entry outside [0, num_pages) reads the nearest page); sequence b sees
    keys [0, min(seqused_k[b], max_pages·page_size)) (a negative count is
    0), and masks and score_mod measure its Nk as that count. page_size is a
    multiple of 16. Q, O and LSE are as for a dense batch; no varlen, fp8.

    ```mlir
    %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>}
        : tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>
        -> tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                            AnyRankedTensor:$value,
                            Optional<AnyRankedTensor>:$cu_seqlens_q,
                            Optional<AnyRankedTensor>:$cu_seqlens_k,
                            Variadic<AnyRankedTensor>:$mod_args,
                            Optional<AnyRankedTensor>:$descale_q,
                            Optional<AnyRankedTensor>:$descale_k,
                            Optional<AnyRankedTensor>:$descale_v,
                            Optional<AnyRankedTensor>:$sinks,
                            Optional<AnyRankedTensor>:$page_table,
                            Optional<AnyRankedTensor>:$seqused_k), AttnScoreAttrs);
  let results = (outs AnyRankedTensor:$output, AnyRankedTensor:$lse);
  let regions = (region MaxSizedRegion<1>:$score_mod, MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $query `,` $key `,` $value
    (`varlen` `(` $cu_seqlens_q^ `,` $cu_seqlens_k `:` type($cu_seqlens_q) `,` type($cu_seqlens_k) `)`)?
    (`mod_args` `(` $mod_args^ `:` type($mod_args) `)`)?
    (`descale` `(` $descale_q^ `,` $descale_k `,` $descale_v `:` type($descale_q) `,` type($descale_k) `,` type($descale_v) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`paged` `(` $page_table^ `,` $seqused_k `:` type($page_table) `,` type($seqused_k) `)`)?
    (`window` `(` $window_sizes^ `)`)?
    attr-dict (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
    `:` type($query) `,` type($key) `,` type($value) `->` type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::fa::attn::ScoreSpec getScoreSpec();
    /// Whether the batch is packed sequences (cu_seqlens operands).
    bool isVarlen() { return static_cast<bool>(getCuSeqlensQ()); }
    /// Whether K and V are a paged cache (page_table, seqused_k operands).
    bool isPaged() { return static_cast<bool>(getPageTable()); }
  }];
}

def Attn_AttentionBackwardOp : Attn_Op<"attention_backward", [
    RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "gradients of attn.attention";
  let description = [{
    Given Q, K, V, the forward output O, the output gradient dO and the saved
    LSE, computes dQ, dK, dV of the attention with the same scale, mask,
    score_mod and mod_args. dK and dV are summed over the query heads that
    share a key head. mod_args are constants of the backward: it computes no
    gradient for them. With `varlen(...)` every tensor is packed as in
    attn.attention (dQ like Q, dK and dV like K and V, LSE [H,Tq]).
    With `sinks` (attn.attention's, f32 [H]) the LSE includes them and the
    op also returns their gradient
    d sink_h = −Σ_{b,q} e^{sink_h − LSE_bhq}·Delta_bhq (Delta = rowsum(dO∘O)).
    fp8: Q, K, V and dO of f8E4M3FN take `descale(%dq, %dk, %dv, %ddo)`, f32
    [B, Hkv] each (dO's too: query head h reads the factor of its key head,
    as Q's): the op computes the gradients of attn.attention's fp8 form at
    the dequantised x·descale, with dO·descale_do as the output gradient; O
    (the forward's) is bf16 and dQ, dK, dV are bf16. No score_mod, mask_mod,
    varlen or sinks with fp8; `attn-dequantize` rewrites it into the f32
    backward for the CPU.

    ```mlir
    %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>}
        : tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>,
          tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64xf32>
        -> tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>, tensor<1x4x64x32xf32>
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                            AnyRankedTensor:$value, AnyRankedTensor:$output,
                            AnyRankedTensor:$grad_output, AnyRankedTensor:$lse,
                            Optional<AnyRankedTensor>:$cu_seqlens_q,
                            Optional<AnyRankedTensor>:$cu_seqlens_k,
                            Variadic<AnyRankedTensor>:$mod_args,
                            Optional<AnyRankedTensor>:$descale_q,
                            Optional<AnyRankedTensor>:$descale_k,
                            Optional<AnyRankedTensor>:$descale_v,
                            Optional<AnyRankedTensor>:$descale_do,
                            Optional<AnyRankedTensor>:$sinks),
                       AttnScoreAttrs);
  let results = (outs AnyRankedTensor:$grad_query, AnyRankedTensor:$grad_key,
                      AnyRankedTensor:$grad_value,
                      Optional<AnyRankedTensor>:$grad_sinks);
  let regions = (region MaxSizedRegion<1>:$score_mod, MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $grad_output `,` $lse
    (`varlen` `(` $cu_seqlens_q^ `,` $cu_seqlens_k `:` type($cu_seqlens_q) `,` type($cu_seqlens_k) `)`)?
    (`mod_args` `(` $mod_args^ `:` type($mod_args) `)`)?
    (`descale` `(` $descale_q^ `,` $descale_k `,` $descale_v `,` $descale_do `:` type($descale_q) `,` type($descale_k) `,` type($descale_v) `,` type($descale_do) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`window` `(` $window_sizes^ `)`)? attr-dict
    (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
    `:` type($query) `,` type($key) `,` type($value) `,` type($output) `,`
        type($grad_output) `,` type($lse)
    `->` type($grad_query) `,` type($grad_key) `,` type($grad_value)
    (`,` type($grad_sinks)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::fa::attn::ScoreSpec getScoreSpec();
    /// Whether the batch is packed sequences (cu_seqlens operands).
    bool isVarlen() { return static_cast<bool>(getCuSeqlensQ()); }
  }];
}

def Attn_OnlineAttentionOp : Attn_Op<"online_attention", [
    RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "online-softmax update of (acc, max, sum) by a block of keys";
  let description = [{
    The running form of attention (seed 4.2.2). For the scores
    s = mask(score_mod(Q·Kᵀ·scale)) of this key block, in base-2 units
    t = s·log2(e):
      m_new = max(m, rowmax(t))
      α     = 2^(m − m_new)
      P     = 2^(t − m_new)
      l_new = α·l + rowsum(P)
      acc'  = α·acc + P·V
    `max` is kept in base-2 units so that scale·log2(e) folds into one multiply
    when there is no score_mod. A row with nothing unmasked keeps m = -inf and
    takes α = P = 0 instead of NaN.

    `at [b, h, q, kv]` gives the position of this block in the whole problem
    and `of [nq, nk]` the whole problem's lengths, so masks and score_mod see
    absolute indices. Without `apply_mask` the block is known to lie inside
    the mask and no mask is evaluated.

    A whole varlen problem (`varlen(%cu_seqlens_q, %cu_seqlens_k)`, the
    offsets of attn.attention) views the packed tensors head-major with one
    batch: Q [1,H,Tq,D], K and V [1,Hkv,Tk,D], acc [1,H,Tq,Dv]; `of` is
    then [Tq, Tk] and each sequence's own lengths bound its masks. attn-tile
    tiles it per sequence into ordinary tiles.

    fp8: f8E4M3FN blocks with `descale(%dq, %dk, %dv)` of the whole problem
    (f32 [B, Hkv], or block descales, indexed by the absolute b, heads and
    rows of `at`): the scores take dq·dk and P·V takes dv, as
    attn.attention's dequantisation.

    `seqused_k(%n)` (i32 [B], of a paged attn.attention): batch b (the
    absolute one, `at`'s b plus the local index) sees only the whole
    problem's keys [0, clamp(n[b], 0, nk)), and its masks take that count
    as Nk. attn-tile bounds each batch's key loop by it.
  }];
  let arguments = !con((ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                            AnyRankedTensor:$value, AnyRankedTensor:$acc,
                            AnyRankedTensor:$max, AnyRankedTensor:$sum,
                            Variadic<Index>:$offsets, Variadic<Index>:$lengths,
                            Optional<AnyRankedTensor>:$cu_seqlens_q,
                            Optional<AnyRankedTensor>:$cu_seqlens_k,
                            Variadic<AnyRankedTensor>:$mod_args,
                            Optional<AnyRankedTensor>:$descale_q,
                            Optional<AnyRankedTensor>:$descale_k,
                            Optional<AnyRankedTensor>:$descale_v,
                            Optional<AnyRankedTensor>:$seqused_k,
                            UnitAttr:$apply_mask),
                       AttnScoreAttrs);
  let results = (outs AnyRankedTensor:$new_acc, AnyRankedTensor:$new_max,
                      AnyRankedTensor:$new_sum);
  let regions = (region MaxSizedRegion<1>:$score_mod, MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $acc `,` $max `,` $sum
    `at` ` ` `[` $offsets `]` `of` ` ` `[` $lengths `]`
    (`varlen` `(` $cu_seqlens_q^ `,` $cu_seqlens_k `:` type($cu_seqlens_q) `,` type($cu_seqlens_k) `)`)?
    (`mod_args` `(` $mod_args^ `:` type($mod_args) `)`)?
    (`descale` `(` $descale_q^ `,` $descale_k `,` $descale_v `:` type($descale_q) `,` type($descale_k) `,` type($descale_v) `)`)?
    (`seqused_k` `(` $seqused_k^ `:` type($seqused_k) `)`)?
    (`window` `(` $window_sizes^ `)`)?
    attr-dict (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
    `:` type($query) `,` type($key) `,` type($value) `,` type($acc) `,` type($max)
    `,` type($sum) `->` type($new_acc) `,` type($new_max) `,` type($new_sum)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::fa::attn::ScoreSpec getScoreSpec();
    /// Whether this is a whole varlen problem (cu_seqlens operands).
    bool isVarlen() { return static_cast<bool>(getCuSeqlensQ()); }
  }];
}

def Attn_BackwardTileOp : Attn_Op<"backward_tile", [
    RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "recomputed gradient contribution of one (query, key) block pair";
  let description = [{
    Seed 4.3: from Q_i, K_j, V_j, dO_i, the saved LSE_i and D_i = rowsum(dO_i∘O_i),
    recompute S_ij and P_ij = exp(S_ij − LSE_i), then
      dV_j += P_ijᵀ·dO_i,   dP_ij = dO_i·V_jᵀ,   dS_ij = P_ij∘(dP_ij − D_i),
      dK_j += dS_ijᵀ·Q_i·scale,   dQ_i += dS_ij·K_j·scale.
    With a score_mod, dS is multiplied by the region's derivative. Rows with
    LSE = -inf contribute nothing. Operands are single-head blocks
    [1,1,rows,D]; `at`/`of` are as in attn.online_attention. f8E4M3FN
    blocks (Q, K, V and dO) arise only on the GPU path (the CPU dequantises
    first): their kernel applies the function's descale factors.
  }];
  let arguments = !con((ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                            AnyRankedTensor:$value, AnyRankedTensor:$grad_output,
                            AnyRankedTensor:$lse, AnyRankedTensor:$delta,
                            AnyRankedTensor:$grad_query, AnyRankedTensor:$grad_key,
                            AnyRankedTensor:$grad_value,
                            Variadic<Index>:$offsets, Variadic<Index>:$lengths,
                            Variadic<AnyRankedTensor>:$mod_args,
                            UnitAttr:$apply_mask),
                       AttnScoreAttrs);
  let results = (outs AnyRankedTensor:$new_grad_query,
                      AnyRankedTensor:$new_grad_key,
                      AnyRankedTensor:$new_grad_value);
  let regions = (region MaxSizedRegion<1>:$score_mod, MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $grad_output `,` $lse `,` $delta `into`
    $grad_query `,` $grad_key `,` $grad_value
    `at` ` ` `[` $offsets `]` `of` ` ` `[` $lengths `]`
    (`mod_args` `(` $mod_args^ `:` type($mod_args) `)`)?
    (`window` `(` $window_sizes^ `)`)? attr-dict (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
    `:` type($query) `,` type($key) `,` type($value) `,` type($grad_output) `,`
        type($lse) `,` type($delta) `,` type($grad_query) `,` type($grad_key) `,`
        type($grad_value)
    `->` type($new_grad_query) `,` type($new_grad_key) `,` type($new_grad_value)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::fa::attn::ScoreSpec getScoreSpec();
  }];
}

def Attn_MergeOp : Attn_Op<"merge", [Pure]> {
  let summary = "combines partial attention results by their log-sum-exp";
  let description = [{
    The join of attention computed over S disjoint parts of the key range
    (split-KV decode, context parallelism, a shared prefix in cascade
    attention). Partial s holds O_s = softmax over its keys times V, in f32,
    and LSE_s = log Σ_j exp(s_ij) over its keys. With M = max_s LSE_s and
    w_s = exp(LSE_s − M):
      O   = Σ_s w_s·O_s / Σ_s w_s
      LSE = M + log Σ_s w_s
    A partial that saw no visible key (LSE_s = -inf) contributes nothing; a
    row no partial saw gives O = 0 and LSE = -inf, never NaN.

    Partials are [S,B,H,Nq,Dv] (f32) and [S,B,H,Nq] (f32); the output O is
    [B,H,Nq,Dv] of f16, bf16 or f32 and LSE is [B,H,Nq] f32.

    Optional `sinks` (f32 [H], attn.attention's) join every row as one more
    partial with LSE = sink_h and O = 0: M = max(sink_h, max_s LSE_s) and
    the sink's weight e^{sink_h − M} joins Σ_s w_s, so O and LSE are those
    of the unsplit attention with sinks (a row no partial saw gives O = 0
    and LSE = sink_h). attn-split-kv moves the sinks here from the split
    attention, whose partials are computed without them.

    ```mlir
    %o, %lse = attn.merge %parts, %part_lses
        : tensor<4x1x32x1x128xf32>, tensor<4x1x32x1xf32>
        -> tensor<1x32x1x128xbf16>, tensor<1x32x1xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$partial_output,
                       AnyRankedTensor:$partial_lse,
                       Optional<AnyRankedTensor>:$sinks);
  let results = (outs AnyRankedTensor:$output, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $partial_output `,` $partial_lse
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)? attr-dict
    `:` type($partial_output) `,` type($partial_lse)
    `->` type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def Attn_PagedViewOp : Attn_Op<"paged_view", [Pure]> {
  let summary = "a paged cache's pages as a dense [B, Hkv, N, D] tensor";
  let description = [{
    The keys (or values) of a paged cache in sequence order:
    result[b, h, n, d] = pages[page_table[b, n / page_size], n mod page_size,
    h, d], with N = max_pages·page_size and a page index outside
    [0, num_pages) clamped into it. attn-online-softmax views a paged
    attn.attention's K and V through it, so the key splits and tiles slice
    it like a dense tensor; the CPU gathers it (attn-decompose) and a GPU
    kernel reads each key tile through the page table instead.

    ```mlir
    %k = attn.paged_view %pages, %page_table
        : tensor<64x16x2x64xf16>, tensor<2x8xi32> -> tensor<2x2x128x64xf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$pages, AnyRankedTensor:$page_table);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $pages `,` $page_table attr-dict `:` type($pages) `,` type($page_table)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Attn_RotaryOp : Attn_Op<"rotary", [Pure]> {
  let summary = "rotary position embedding of rows at per-sequence positions";
  let description = [{
    flash-attn's rotary embedding of new tokens: X is [B, N, H, D] (the
    [batch, token, head, dim] layout of flash_attn_with_kvcache's q and k),
    cos and sin are [max_pos, R/2] with the rotary dim R even and at most D,
    start is i32 [B]. Row n of sequence b sits at position p = start[b] + n
    (start[b] for every row with `same_position`, as flash-attn rotates a
    non-causal q), clamped into [0, max_pos). Each pair (x1, x2) of the
    first R columns becomes (x1·c − x2·s, x1·s + x2·c) with c = cos[p, i],
    s = sin[p, i], computed in f32 from separately rounded products (no
    fused multiply-add) and rounded once to X's type; the pair i is
    (x[2i], x[2i+1]) with `interleaved` (GPT-J) and (x[i], x[i + R/2])
    without (GPT-NeoX). Columns R..D-1 are copied.

    ```mlir
    %kr = attn.rotary %k, %cos, %sin at %seqlens {interleaved}
        : tensor<2x4x8x128xbf16>, tensor<4096x32xf32>, tensor<4096x32xf32>,
          tensor<2xi32> -> tensor<2x4x8x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$cos,
                       AnyRankedTensor:$sin, AnyRankedTensor:$start,
                       UnitAttr:$interleaved, UnitAttr:$same_position);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin `at` $start attr-dict `:` type($input) `,`
    type($cos) `,` type($sin) `,` type($start) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The rotary dim R: twice cos's column count.
    int64_t getRotaryDim();
  }];
}

def Attn_KvAppendOp : Attn_Op<"kv_append", [Pure]> {
  let summary = "writes new keys and values into a KV cache after its used rows";
  let description = [{
    flash_attn_with_kvcache's append: K_new [B, Nnew, Hkv, D] and V_new
    [B, Nnew, Hkv, Dv] become rows cache_seqlens[b] .. cache_seqlens[b] +
    Nnew − 1 of sequence b (a negative count is 0); the results are the
    caches with those rows replaced. Contiguous caches are [B, Ncap, Hkv, D]
    and [B, Ncap, Hkv, Dv]; with `paged(%page_table)` they are pools of
    pages [num_pages, page_size, Hkv, D] and row n of sequence b is row
    n mod page_size of page page_table[b, n / page_size] (clamped into
    [0, num_pages), as attn.paged_view reads it). A row at or past the
    capacity (Ncap, or max_pages·page_size) is not written: the runtime
    rejects such a call before it launches. Rotary embedding of the new keys
    is an attn.rotary on K_new before the append.

    ```mlir
    %kc, %vc = attn.kv_append %k, %v into %k_cache, %v_cache at %seqlens
        paged(%page_table : tensor<2x8xi32>)
        : tensor<2x3x8x128xbf16>, tensor<2x3x8x128xbf16>,
          tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<2xi32>
        -> tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$key, AnyRankedTensor:$value,
                       AnyRankedTensor:$key_cache, AnyRankedTensor:$value_cache,
                       AnyRankedTensor:$cache_seqlens,
                       Optional<AnyRankedTensor>:$page_table);
  let results = (outs AnyRankedTensor:$new_key_cache,
                      AnyRankedTensor:$new_value_cache);
  let assemblyFormat = [{
    $key `,` $value `into` $key_cache `,` $value_cache `at` $cache_seqlens
    (`paged` `(` $page_table^ `:` type($page_table) `)`)? attr-dict
    `:` type($key) `,` type($value) `,` type($key_cache) `,`
        type($value_cache) `,` type($cache_seqlens)
    `->` type($new_key_cache) `,` type($new_value_cache)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the caches are pools of pages (page_table operand).
    bool isPaged() { return static_cast<bool>(getPageTable()); }
  }];
}

def Attn_HadamardOp : Attn_Op<"hadamard", [Pure]> {
  let summary = "an orthonormal Hadamard rotation of each row";
  let description = [{
    FA3's incoherent processing: the last dimension D of X is cut into
    groups of g columns, g the largest power of two dividing D (D itself
    for 64, 128, 256; 32 for 96, 64 for 192), and each group x becomes
    x·H_g/√g with H_g Sylvester's ±1 matrix (H_g[i, j] = (−1)^popcount(i & j)),
    computed in f32 and rounded once to X's type. The rotation is
    orthonormal, so (Q·R)(K·R)ᵀ = Q·Kᵀ: attention of rotated Q and K is
    attention of Q and K, while an outlier column spreads over its group,
    which is what e4m3 quantisation needs (attn-incoherent-qk).

    ```mlir
    %qr = attn.hadamard %q : tensor<1x8x256x128xbf16> -> tensor<1x8x256x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Columns per rotated group: the largest power of two dividing D.
    int64_t getGroupSize();
  }];
}

def Attn_QuantizeOp : Attn_Op<"quantize", [Pure]> {
  let summary = "e4m3 quantisation of Q, K or V with its descale factors";
  let description = [{
    X [B, H, N, D] (f32, f16 or bf16) becomes X8 of f8E4M3FN and descale
    factors such that X ≈ X8·descale, the inputs attn.attention's fp8 form
    takes. The descale's type chooses what a factor covers: f32 [B, G] with
    G dividing H gives one factor per batch and group of H / G consecutive
    heads (G = Hkv for Q: the query heads of one key head; G = H for K and
    V), f32 [B, H, ceil(N/64)] one per head and block of 64 rows (the block
    descales). Each factor is amax / 448 of |x| over what it covers (1 where
    that is all zeros); x8 = x / factor in f32, clamped to ±448 and rounded
    to the nearest e4m3 value (ties to even), PyTorch's
    `(x / factor).clamp(-448, 448).to(torch.float8_e4m3fn)`.

    ```mlir
    %q8, %dq = attn.quantize %q : tensor<1x8x256x128xbf16>
        -> tensor<1x8x256x128xf8E4M3FN>, tensor<1x2xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$descale);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result) `,` type($descale)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Consecutive heads one factor covers: H / G, or 1 for block descales.
    int64_t getHeadsPerFactor();
  }];
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, ReturnLike, Terminator,
    ParentOneOf<["AttentionOp", "AttentionBackwardOp", "OnlineAttentionOp",
                 "BackwardTileOp"]>]> {
  let summary = "yields the score of a score_mod or the visibility of a mask_mod";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // ATTN_OPS_TD
