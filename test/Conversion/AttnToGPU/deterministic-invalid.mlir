// Only the warp-specialised wgmma backward has a deterministic variant: the
// option is rejected, naming the reason, for forwards, for the mma.sync
// backward and for the 256-thread wgmma backward.
// RUN: not fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma deterministic=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=WGMMA
// RUN: not fa-opt %s -split-input-file -fa-lower-to-nvvm="deterministic=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SYNC
// RUN: not fa-opt %s -split-input-file -fa-wgmma-bwd-ws=false -fa-attn-to-gpu="mma=wgmma deterministic=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOWS

// WGMMA: error: 'attn.attention' op the deterministic option applies to the warp-specialised wgmma backward only, got a forward (its outputs are already deterministic)
// WGMMA-NOT: error:
// SYNC: error: 'attn.attention' op the deterministic option applies to the warp-specialised wgmma backward only, got a forward
// SYNC: error: 'attn.attention_backward' op the deterministic option needs mma = wgmma (the warp-specialised backward), got mma = mma_sync
// NOWS: error: 'attn.attention' op the deterministic option applies to the warp-specialised wgmma backward only, got a forward
// NOWS: error: 'attn.attention_backward' op the deterministic option needs the warp-specialised wgmma backward (-fa-wgmma-bwd-ws), not the 256-thread one

func.func @forward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

func.func @backward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>
}
