// RUN: fa-opt %s -split-input-file -verify-diagnostics

// A paged cache: K, V [num_pages, page_size, Hkv, D], page_table i32
// [B, max_pages], seqused_k i32 [B].

func.func @page_size(%q: tensor<2x4x1x64xf16>, %k: tensor<8x24x2x64xf16>, %v: tensor<8x24x2x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected page_size to be a positive multiple of 16, got 24}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x24x2x64xf16>, tensor<8x24x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @table_rows(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x2x64xf16>, %v: tensor<8x16x2x64xf16>, %pt: tensor<3x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected a page_table row per sequence, got 3 rows and batch 2}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<3x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x2x64xf16>, tensor<8x16x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @table_type(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x2x64xf16>, %v: tensor<8x16x2x64xf16>, %pt: tensor<2x4xi64>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected page_table to be a rank-2 tensor of i32 [batch, max_pages], got 'tensor<2x4xi64>'}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi64>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x2x64xf16>, tensor<8x16x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @seqused(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x2x64xf16>, %v: tensor<8x16x2x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<3xi32>) {
  // expected-error @+1 {{expected seqused_k shape [2], got [3]}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<3xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x2x64xf16>, tensor<8x16x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @pages_layout(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x2x64xf16>, %v: tensor<8x32x2x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected key and value pages of one layout, got [8, 16, 2, 64] and [8, 32, 2, 64]}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x2x64xf16>, tensor<8x32x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @pages_rank(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x128xf16>, %v: tensor<8x16x2x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected paged key to have rank 4 [num_pages, page_size, heads, head_dim], got rank 3}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x128xf16>, tensor<8x16x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @no_pages(%q: tensor<2x4x1x64xf16>, %k: tensor<0x16x2x64xf16>, %v: tensor<0x16x2x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected paged key to hold at least one page, got 0}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<0x16x2x64xf16>, tensor<0x16x2x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

// Key heads must divide query heads, read off the pages' head extent.
func.func @heads(%q: tensor<2x4x1x64xf16>, %k: tensor<8x16x3x64xf16>, %v: tensor<8x16x3x64xf16>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected key head count to divide query head count, got 3 and 4}}
  %o, %l = attn.attention %q, %k, %v paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<8x16x3x64xf16>, tensor<8x16x3x64xf16> -> tensor<2x4x1x64xf16>, tensor<2x4x1xf32>
  return
}

// -----

func.func @paged_varlen(%q: tensor<10x4x64xf16>, %k: tensor<8x16x2x64xf16>, %v: tensor<8x16x2x64xf16>, %cq: tensor<3xi32>, %ck: tensor<3xi32>, %pt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{expected a paged cache or a varlen batch, not both}}
  %o, %l = attn.attention %q, %k, %v varlen(%cq, %ck : tensor<3xi32>, tensor<3xi32>) paged(%pt, %n : tensor<2x4xi32>, tensor<2xi32>) : tensor<10x4x64xf16>, tensor<8x16x2x64xf16>, tensor<8x16x2x64xf16> -> tensor<10x4x64xf16>, tensor<4x10xf32>
  return
}

// -----

func.func @view_result(%p: tensor<8x16x2x64xf16>, %pt: tensor<2x4xi32>) {
  // expected-error @+1 {{expected result shape [2, 2, 64, 64], got [2, 2, 32, 64]}}
  %k = attn.paged_view %p, %pt : tensor<8x16x2x64xf16>, tensor<2x4xi32> -> tensor<2x2x32x64xf16>
  return
}

// -----

func.func @online_seqused(%q: tensor<1x1x4x16xf32>, %k: tensor<1x1x8x16xf32>, %acc: tensor<1x1x4x16xf32>, %m: tensor<1x1x4xf32>, %n: tensor<1xi64>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  // expected-error @+1 {{expected seqused_k to be a rank-1 tensor of i32 [batch], got 'tensor<1xi64>'}}
  %a, %mx, %s = attn.online_attention %q, %k, %k, %acc, %m, %m at [%c0, %c0, %c0, %c0] of [%c4, %c8] seqused_k(%n : tensor<1xi64>) : tensor<1x1x4x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x4x16xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32> -> tensor<1x1x4x16xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>
  return
}
