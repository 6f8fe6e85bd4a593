// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-plan="pack-gqa=1 split-kv=1"
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="pack-gqa=1 split-kv=1 mma=wgmma" 2>&1 | FileCheck %s --check-prefix=WGMMA
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="pack-gqa=1" 2>&1 | FileCheck %s --check-prefix=UNSPLIT

// Packed rows are a choice of the mma.sync forward only.
// WGMMA: error: 'attn.attention_backward' op {{.*}}applies to the forward only, got a backward
func.func @backward(%q: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  // expected-error @+1 {{applies to the forward only, got a backward}}
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}

// -----

// The mma.sync split-KV forward takes it; the wgmma forward and the unsplit
// one do not.
// WGMMA: error: 'attn.attention' op {{.*}}needs mma = mma_sync, got mma = wgmma
// UNSPLIT: error: 'attn.attention' op pack-gqa needs split-kv (the packed forward is the split-KV kernel; it runs unsplit with splits = 1)
func.func @forward(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}
