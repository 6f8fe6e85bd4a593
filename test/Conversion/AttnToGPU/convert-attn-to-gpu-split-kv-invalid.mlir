// RUN: fa-opt %s -attn-gpu-plan -attn-online-softmax -attn-split-kv=splits=4 -attn-tile -convert-attn-to-gpu -verify-diagnostics

// The split form lowers with a split-KV plan only (split forward + merge):
// the tiles of another plan lowered alone would drop the merge, so it is an
// error, not a kernel that ignores it.
func.func @decode(%q: tensor<1x8x1x64xbf16>, %k: tensor<1x2x?x64xbf16>, %v: tensor<1x2x?x64xbf16>) -> (tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>) {
  // expected-error @+1 {{expected a split-KV kernel plan (attn-gpu-plan split-kv=1) on the merge of attn-split-kv, got}}
  %o, %lse = attn.attention %q, %k, %v : tensor<1x8x1x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>
  return %o, %lse : tensor<1x8x1x64xbf16>, tensor<1x8x1xf32>
}
