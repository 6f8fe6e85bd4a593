// RUN: fa-opt %s -o /dev/null
// RUN: fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:mod=softcap30 --config bwd:bf16:d64:none:mod=alibi16 --config fwd:f16:d64:window:l64:r16:mod=relbias --config bwd:bf16:d64:causal:mod=clamp | FileCheck %s
// CHECK-DAG: fwd_bf16_d64_{{.+}}_mod_softcap30: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d64_{{.+}}_mod_alibi16: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_f16_d64_{{.+}}_mod_relbias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d64_{{.+}}_mod_clamp: registers {{[0-9]+}}, spill bytes 0

// The score_mod library of the GPU tests: `fa-aot --score-mods
// test/gpu/score_mods.mlir` with configs that name a function, e.g.
// fwd:bf16:d128:causal:mod=softcap30 (test/gpu/configs_score_mod.txt).
// Each function takes the score after the scale (scale·q·k) of query row %q
// of head %h of batch %b against key %kv and returns the score the softmax
// sees; the backward differentiates it. Their PyTorch references (run in
// float64 and in the inputs' precision, and as FlexAttention score_mods) are
// in test/gpu/score_mods.py: keep the two in step.

// Logit soft-capping (Gemma 2): 30·tanh(s/30).
func.func @softcap30(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {
  %cap = arith.constant 30.0 : f32
  %x = arith.divf %s, %cap : f32
  %t = math.tanh %x : f32
  %r = arith.mulf %t, %cap : f32
  return %r : f32
}

// ALiBi for 16 heads: s - slope_h·|q - kv| with slope_h = 2^(-8(h+1)/16),
// the slope computed from the head index.
func.func @alibi16(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {
  %one = arith.constant 1.0 : f32
  %step = arith.constant -0.5 : f32
  %hi = arith.index_cast %h : index to i32
  %hf = arith.sitofp %hi : i32 to f32
  %h1 = arith.addf %hf, %one : f32
  %e = arith.mulf %h1, %step : f32
  %slope = math.exp2 %e : f32
  %qi = arith.index_cast %q : index to i32
  %ki = arith.index_cast %kv : index to i32
  %qf = arith.sitofp %qi : i32 to f32
  %kf = arith.sitofp %ki : i32 to f32
  %dist = arith.subf %qf, %kf : f32
  %adist = math.absf %dist : f32
  %bias = arith.mulf %slope, %adist : f32
  %r = arith.subf %s, %bias : f32
  return %r : f32
}

// A smooth relative-position bias: s + 0.5·tanh(0.05·(q - kv)).
func.func @relbias(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {
  %rate = arith.constant 0.05 : f32
  %half = arith.constant 0.5 : f32
  %qi = arith.index_cast %q : index to i32
  %ki = arith.index_cast %kv : index to i32
  %qf = arith.sitofp %qi : i32 to f32
  %kf = arith.sitofp %ki : i32 to f32
  %dist = arith.subf %qf, %kf : f32
  %x = arith.mulf %dist, %rate : f32
  %t = math.tanh %x : f32
  %bias = arith.mulf %t, %half : f32
  %r = arith.addf %s, %bias : f32
  return %r : f32
}

// Piecewise linear: max(s, -1.5) up to 2, then 2 + 0.1·(s - 2) (maximumf
// and select, each with its own derivative).
func.func @clamp(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {
  %lo = arith.constant -1.5 : f32
  %knee = arith.constant 2.0 : f32
  %slow = arith.constant 0.1 : f32
  %floor = arith.maximumf %s, %lo : f32
  %over = arith.cmpf ogt, %s, %knee : f32
  %above = arith.subf %s, %knee : f32
  %damped = arith.mulf %above, %slow : f32
  %soft = arith.addf %damped, %knee : f32
  %r = arith.select %over, %soft, %floor : f32
  return %r : f32
}

// score_mods that read tensors (mod_args, docs/ABI.md): the tensors follow
// kv_idx; fa.dims says what each extent must be, which the runtime checks at
// every launch. Reads are clamped into the tensor.

// ALiBi with a slope per query head from a tensor [H]: s + slopes[h]·(kv - q).
func.func @alibi_slopes(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: tensor<?xf32> {fa.dims = ["heads"]}) -> f32 {
  %slope = tensor.extract %slopes[%h] : tensor<?xf32>
  %d = arith.subi %kv, %q : index
  %di = arith.index_cast %d : index to i32
  %df = arith.sitofp %di : i32 to f32
  %bias = arith.mulf %slope, %df : f32
  %r = arith.addf %s, %bias : f32
  return %r : f32
}

// A relative-position bias table [H, 8191] (distances -4095..4095, the ends
// clamped): s + table[h, kv - q + 4095].
func.func @rel_bias(%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: tensor<?x?xf32> {fa.dims = ["heads", "any"]}) -> f32 {
  %center = arith.constant 4095 : index
  %d = arith.subi %kv, %q : index
  %col = arith.addi %d, %center : index
  %x = tensor.extract %table[%h, %col] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}

// A per-key bias [B, Nk] (padding, key importance): s + bias[b, kv].
func.func @key_bias(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: tensor<?x?xf32> {fa.dims = ["batch", "nk"]}) -> f32 {
  %x = tensor.extract %bias[%b, %kv] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}
