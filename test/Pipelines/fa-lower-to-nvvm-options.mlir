// Every bad option of fa-lower-to-nvvm is an error and a non-zero exit
// (`not`), never a message followed by success.
// RUN: not fa-opt %s -fa-lower-to-nvvm="format=bogus" 2>&1 | FileCheck %s --check-prefix=FORMAT
// FORMAT: for the --format option: Cannot find option named 'bogus'!
// RUN: not fa-opt %s -fa-lower-to-nvvm="format=" 2>&1 | FileCheck %s --check-prefix=BLANKFORMAT
// BLANKFORMAT: for the --format option: Cannot find option named ''!
// RUN: not fa-opt %s -fa-lower-to-nvvm="opt-level=9" 2>&1 | FileCheck %s --check-prefix=OPT
// OPT: error: Invalid optimization level: 9.
// RUN: not fa-opt %s -fa-lower-to-nvvm="block-q=abc" 2>&1 | FileCheck %s --check-prefix=NUMBER
// NUMBER: for the --block-q option: 'abc' value invalid
// RUN: not fa-opt %s -fa-lower-to-nvvm="block-q=-64" 2>&1 | FileCheck %s --check-prefix=BLOCK
// BLOCK: error: 'attn.attention' op expected block-q and block-kv to be positive multiples of 16
// RUN: not fa-opt %s -fa-lower-to-nvvm="target=sm_999" 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: 'attn.attention' op expected target sm_80, sm_90 or sm_90a, got sm_999
// RUN: not fa-opt %s -fa-lower-to-nvvm="mma=xx" 2>&1 | FileCheck %s --check-prefix=MMA
// MMA: error: 'attn.attention' op expected mma = mma_sync or wgmma, got xx
// RUN: not fa-opt %s -fa-lower-to-nvvm="warps=64" 2>&1 | FileCheck %s --check-prefix=WARPS
// WARPS: error: 'attn.attention' op expected 1 to 32 warps (at most 1024 threads per CTA), got 64
// RUN: not fa-opt %s -fa-lower-to-nvvm="format=bin toolkit=%t.none" 2>&1 | FileCheck %s --check-prefix=TOOLKIT
// TOOLKIT: error: CUDA path: {{.*}}.none does not exist or is not a directory.
// RUN: not fa-opt %s -fa-lower-to-nvvm="no-such-option=1" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: no such option no-such-option

// The valid formats still pass.
// RUN: fa-opt %s -fa-lower-to-nvvm="format=isa" | FileCheck %s --check-prefix=ISA
// ISA: gpu.binary @fa_fwd_bf16_d64
func.func @f(%q: tensor<1x2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>, %v: tensor<1x2x128x64xbf16>)
    -> (tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>) {
  %o, %lse = attn.attention %q, %k, %v {scale = 0.125 : f32}
      : tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16> -> tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>
  return %o, %lse : tensor<1x2x128x64xbf16>, tensor<1x2x128xf32>
}
