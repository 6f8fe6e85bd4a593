// REQUIRES: ptxas
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --check-prefix=GPU
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx
// RUN: FileCheck %s --check-prefix=DQ < %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 .*, p, 1,  1, 0,  0;" %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT16
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 .*, p, 1, 1, 1;" %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT4
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 .*, p, 1,  1, 1,  1;" %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx | FileCheck %s --check-prefix=COUNT4
// RUN: FileCheck %s --check-prefix=DEEPSEEK < %t/fa_bwd_bf16_d192v128_bq64_bkv64_w12_s2_none_wgmma_sm90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d192v128_bq64_bkv64_w12_s2_none_wgmma_sm90a.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d256_bq64_bkv64_w12_s2_none_wgmma_sm90a_mod_softcap.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not=C7508 --implicit-check-not=C7512 --implicit-check-not=C7513 --implicit-check-not=C7514 --implicit-check-not=C7519
// RUN: not fa-opt %s -split-input-file -fa-wgmma-bwd-ws=false -attn-gpu-plan="mma=wgmma" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOWS
// RUN: not fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma deterministic=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=DET

// The wgmma backward above D = 128 (issue 19): dK and dV of 64 keys at
// D = 256 would need 256 registers a thread, so both consumer warpgroups take
// one 64-key block and split the chain of products by role.
// PLAN: attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, {{.*}}mma = "wgmma", {{.*}}tag = "bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a"
// Shared: K, V 64 x 256; Q, dO 64 x 256 in two stages; two dSᵀ buffers;
// LSE and Delta; the Pᵀ exchange (64 x 64 f32); no dQ tiles:
// 2·(64·256 + 64·256 + 2·64·256 + 2·64·256 + 2·64·64) + 1024 + 64·64·4.
// PTX: .maxntid 384, 1, 1
// PTX-DAG: setmaxnreg.inc.sync.aligned.u32 240;
// GPU-LABEL: gpu.func @fa_bwd_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a(
// GPU-SAME: fa.shared_bytes = 230400
// Warpgroup 0 recomputes Pᵀ from the stage's LSE; warpgroup 1 takes
// Pᵀ·scale from the exchange (bar.sync 2), dSᵀ from it and the stage's
// Delta, prescaled.
// TILE-LABEL: gpu.func @fa_bwd_bwd_bf16_d256_bq64_bkv64_w12_s2_causal_wgmma_sm90a(
// TILE: attn_gpu.recompute_probs %{{.+}}, %[[STATS:.+]][%{{.+}}] scale %{{[^ ]+}} {folded_lse} : <16x64xf32, accumulator>, memref<{{[0-9]+}}xf32, 3>{{$}}
// TILE: "bar.sync 2, 256;"
// TILE: attn_gpu.score_gradient %{{.+}}, %{{.+}} delta(%[[STATS]][%{{.+}}] : memref<{{[0-9]+}}xf32, 3>) {prescaled} : <16x64xf32, accumulator>{{$}}
// At D = Dv both roles run one wgmma sequence on their own operands:
// Sᵀ = K·Qᵀ (warpgroup 0) or dPᵀ = V·dOᵀ (1), m64n64 over 16 k16 steps
// (COUNT16); dV += Pᵀ·dO or dK += dSᵀ·Q, m64n256 with register A over 4
// (COUNT4), left in flight past barrier 1; dQ, D/2 = 128 columns a
// warpgroup, over the 64 keys (COUNT4).
// COUNT16: {{^}}16{{$}}
// COUNT4: {{^}}4{{$}}
// The exchange: warpgroup 0 arrives on named barrier 2 after its stores,
// warpgroup 1 waits there before its loads; barrier 1 publishes dSᵀ.
// PTX-DAG: bar.arrive 2, 256;
// PTX-DAG: bar.sync 2, 256;
// PTX-DAG: bar.sync 1, 256;
// dQ: each warpgroup stages its 128 columns in the tile's query slot (Q's
// tile, 2·64·256·2 bytes from the start of K, or dO's), chunk-swizzled; the
// producer adds them into dq_accum's two panels with one bulk reduction each
// (512 B rows), then frees the slot; fa_bwd_post reads the panels.
// DQ-NOT: red.global.add
// DQ: st.shared.v2.b32
// DQ: shl.b32 {{%r[0-9]+}}, {{%r[0-9]+}}, 9;
// DQ: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// DQ: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// DQ: cp.async.bulk.wait_group.read 0;
// DQ-LABEL: .entry fa_bwd_post_
// DQ: .minnctapersm 1
// DQ: xor.b
// PTXAS-COUNT-3: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// NOWS: error: 'attn.attention_backward' op the mma = wgmma backward above D = 128 is warp-specialised only (-fa-wgmma-bwd-ws), got D 256 and Dv 256
// DET: error: 'attn.attention_backward' op expected no deterministic option on the mma = wgmma backward above D = 128 (its dQ panels are added in arrival order), got D 256 and Dv 256
func.func @causal_bf16_d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %do: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
}

// -----

// The DeepSeek shape: Sᵀ over D = 192, dPᵀ over Dv = 128; dV (warpgroup 0)
// m64n128, dK (warpgroup 1) m64n192; dQ's 96 columns a warpgroup in two
// slab-sized pieces (64 and 32), staged as 96-column panels (warpgroup 1's
// pieces at panel columns 32 and 0); warpgroup 1's panel (24 KB) outgrows
// dO's tile (16 KB), so each stage has a panel buffer:
// 2·(64·192 + 64·128 + 2·64·192 + 2·64·128 + 2·64·64) + 1024 + 64·64·4 +
// 2·64·96·4.
// PLAN: tag = "bwd_bf16_d192v128_bq64_bkv64_w12_s2_none_wgmma_sm90a"
// GPU-LABEL: gpu.func @fa_bwd_bwd_bf16_d192v128_bq64_bkv64_w12_s2_none_wgmma_sm90a(
// GPU-SAME: fa.shared_bytes = 205824
// DEEPSEEK-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// DEEPSEEK-DAG: wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// DEEPSEEK-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{.*}}, p, 1,  1, 1,  1;
// DEEPSEEK-NOT: red.global.add
// DEEPSEEK-DAG: mul.wide.u32 {{%rd[0-9]+}}, {{%r[0-9]+}}, 384;
// DEEPSEEK-DAG: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// NOWS: error: 'attn.attention_backward' op the mma = wgmma backward above D = 128 is warp-specialised only (-fa-wgmma-bwd-ws), got D 192 and Dv 128
func.func @none_bf16_d192_v128(%q: tensor<?x?x?x192xbf16>, %k: tensor<?x?x?x192xbf16>, %v: tensor<?x?x?x128xbf16>, %o: tensor<?x?x?x128xbf16>, %do: tensor<?x?x?x128xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16>
}

// -----

// A score_mod (Gemma 2's logit soft-capping at d256): warpgroup 0 hands
// Pᵀ·d(score)/d(Sᵀ) over, so warpgroup 1's dSᵀ needs no score of its own.
// PLAN: tag = "bwd_bf16_d256_bq64_bkv64_w12_s2_none_wgmma_sm90a_mod_softcap"
func.func @softcap_bf16_d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %do: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {attn.score_mod_name = "softcap"} score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 50.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %y = arith.mulf %t, %cap : f32
    attn.yield %y : f32
  } : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
}
