//===- Passes.td - attn conversion passes -------------------*- tablegen -*-===//

#ifndef FA_CONVERSION_PASSES
#define FA_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def AttnGPUPlanPass : Pass<"attn-gpu-plan", "ModuleOp"> {
  let summary = "Choose the GPU kernel plan of each attn op and attach it as IR";
  let description = [{
    Resolves, for every `attn.attention` and `attn.attention_backward`, the
    plan of the kernel that will compute it: the block sizes, warps, stages,
    the tensor-core instructions and the grid, each default chosen for the
    head dim and target. The plan rides on the op as the discardable
    dictionary attribute `attn.kernel_plan`; `attn-online-softmax`,
    `attn-recompute-backward` and `attn-tile` carry it onto the tiled loops
    and tile ops and take their block sizes from it, and
    `convert-attn-to-gpu` builds the kernels it names. An invalid choice is
    diagnosed here, on the op, and so is a function the GPU path would
    compile only in part: its kernels replace the function whole (they read
    its arguments and write its results), so it may hold only attn ops,
    constants, `tensor.dim` and the return.

    ```mlir
    %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>,
        attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64,
          mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a",
          target = "sm_90a", warps = 4 : i64}} : ...
    ```
  }];
  let options = [
    Option<"blockQ", "block-q", "int64_t", "0",
           "query rows per CTA (16 per warp; 0: the default for the head dim)">,
    Option<"blockKV", "block-kv", "int64_t", "0",
           "key rows per shared-memory tile (0: the default for the head dim)">,
    Option<"warps", "warps", "int64_t", "0",
           "warps per CTA (0: block-q / 16)">,
    Option<"stages", "stages", "int64_t", "2",
           "K/V shared-memory buffers (2: double buffering)">,
    Option<"target", "target", "std::string", "\"sm_90a\"",
           "sm_80, sm_90 or sm_90a; selects the MMA strategy">,
    Option<"mma", "mma", "std::string", "\"mma_sync\"",
           "mma_sync, or wgmma (sm_90a forward: TMA, warp specialisation)">,
    Option<"deterministic", "deterministic", "bool", "false",
           "warp-specialised wgmma backward only: add dQ in key-block order "
           "behind per-query-tile semaphores (bit-reproducible dQ; one more "
           "kernel parameter, docs/ABI.md)">,
    Option<"grid", "grid", "std::string", "\"\"",
           "wgmma forward: persistent (one CTA per SM taking query tiles "
           "from a counter), blocks (one CTA per query tile), or empty for "
           "the default of -fa-wgmma-persistent">,
    Option<"splitKv", "split-kv", "bool", "false",
           "mma.sync forward: split-KV decode (the key range split over a "
           "grid dimension by a run-time count, partials joined by "
           "attn.merge; run attn-split-kv after attn-online-softmax)">,
    Option<"packGqa", "pack-gqa", "bool", "false",
           "mma.sync forward: packed GQA (the query heads of one key head "
           "share a CTA's rows; attn-tile reads the plan's pack_gqa)">,
    Option<"blockSparse", "block-sparse", "bool", "false",
           "wgmma forward with a mask_mod: the key loop runs over the key "
           "blocks of a block mask built by the kernel's fa_block_mask "
           "entries (docs/ABI.md)">,
    Option<"kvAppend", "kv-append", "bool", "false",
           "split-KV forward: the module also holds fa_kv_append, which "
           "writes new keys and values (rotary optional) into the KV cache">,
    Option<"quantize", "quantize", "std::string", "\"\"",
           "fp8 forward: the module also holds fa_quantize_amax and "
           "fa_quantize, attn.quantize (Hadamard rotation optional) of "
           "inputs of this type (bf16, f16 or f32)">,
    Option<"producerWarp", "producer-warp", "bool", "false",
           "mma.sync forward: one more warp copies K/V into the ring and "
           "signals it on mbarriers (attn-gpu-warp-specialize)">,
    Option<"tma", "tma", "bool", "false",
           "split-KV forward with a producer warp: it loads K/V by TMA from "
           "tensor maps (sm_90a)">,
    Option<"tf32", "tf32", "bool", "false",
           "f32 inputs: one TF32 MMA per product (opt-in, as PyTorch's "
           "allow_tf32); else three (3xTF32), as accurate as f32 math">
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def ConvertAttnToGPUPass : Pass<"convert-attn-to-gpu", "ModuleOp"> {
  let summary = "Lower tiled attn ops to fused tensor-core GPU kernels";
  let description = [{
    Takes the tiled form of attention: the loops of `attn-tile` (forward) or
    `attn-recompute-backward` (backward) around `attn.online_attention` /
    `attn.backward_tile` tile ops, each carrying the `attn.kernel_plan` of
    `attn-gpu-plan`. Every function holding such a loop nest is replaced by
    a `gpu.module` with the kernels of docs/ABI.md that execute it: flat
    pointer parameters, i32 sizes and an f32 scale, shapes read at run time,
    so one kernel serves every (B, H, Hkv, Nq, Nk). The query-block loop
    becomes the grid, the key-block loop the kernel's main loop, the tile
    op's online-softmax update its fragment code (OnlineSoftmaxMath, shared
    with the CPU decomposition). An untiled attn op, a tile op without a
    plan, or any attn op left behind is an error.

    The mma.sync forward is FlashAttention-2: one CTA per (query block, head,
    batch), 16 query rows per warp, K/V tiles double-buffered with cp.async,
    ldmatrix fragments, mma.sync m16n8k16 with f32 accumulators, exp2 with
    scale·log2e folded, blocks outside the mask skipped and only boundary
    blocks masked. It is emitted at the GPU tile level (attn_gpu ops: its
    schedule as IR, lowered by `convert-attn-gpu-to-nvvm`), except packed
    GQA, which is still built from fragments directly. The wgmma kernels (sm_90a) add TMA, warp specialisation
    and ping-pong.

    After (the `fa-attn-to-gpu` pipeline on a causal bf16 d128 forward):
    ```mlir
    gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a {
      gpu.func @fa_fwd_fwd_bf16_d128_..._sm90a(%q: memref<...xbf16>, ...,
          %batch: i32, %heads: i32, %kv_heads: i32, %nq: i32, %nk: i32,
          %scale: f32) kernel { ... nvgpu.ldmatrix ... nvvm.mma.sync ... }
    }
    ```
  }];
  let dependentDialects = ["::mlir::fa::attn_gpu::AttnGPUDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

def ConvertAttnGPUToNVVMPass : Pass<"convert-attn-gpu-to-nvvm", "ModuleOp"> {
  let summary = "Lower the attn_gpu tile level to mma.sync, ldmatrix and cp.async";
  let description = [{
    Lowers the warpgroup roles of the wgmma kernels
    (`attn_gpu.warp_specialize`: one branch on tid / 128 with setmaxnreg),
    then every kernel whose body is attn_gpu tile ops (the mma.sync forward
    and backward that `convert-attn-to-gpu` builds) to the fragment
    builders' code: register fragments become the scalar values one lane holds (a 1:N
    type conversion; the key loop's `scf.for` carries them), shared tiles
    their element offsets in the dynamic shared buffer, `attn_gpu.mma_qk` /
    `mma_pv` ldmatrix loads and `nvvm.mma.sync` m16n8k16, `async_copy`
    cp.async groups, `online_softmax` and `finalize_softmax` the quad-shuffle
    row reductions and exp2 of Softmax.cpp, `score_mod` the region through
    the CPU decomposition's score builder. The kernel's plan is resolved
    again from its `attn.kernel_plan` (the tag must match) and the tile ops'
    types and attributes.

    ```mlir
    %s = attn_gpu.mma_qk %qf, %kt : !attn_gpu.fragment<16x128xbf16, operand_a>,
        !attn_gpu.shared_tile<64x128xbf16, stride = 136>
        -> !attn_gpu.fragment<16x64xf32, accumulator>
    // becomes, per k16 step and n16 pair of key rows:
    %b:4 = nvgpu.ldmatrix %smem[%off] {numTiles = 4 : i32, transpose = false}
    %c = nvvm.mma.sync A[...] B[...] C[...] {shape = #nvvm.shape<m = 16, n = 8, k = 16>, ...}
    ```
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

def AttnGridConstantParamsPass
    : Pass<"attn-grid-constant-params", "::mlir::LLVM::LLVMFuncOp"> {
  let summary = "Pass a kernel's CUtensorMaps by value as __grid_constant__ parameters";
  let description = [{
    Runs on the kernels after `convert-gpu-to-nvvm`. Every parameter that the
    kernel's `fa.grid_constant_params` attribute lists (set by
    `convert-attn-to-gpu` for the TMA tensor maps) becomes a 128-byte,
    64-byte-aligned by-value parameter marked `nvvm.grid_constant`: the
    launch copies the CUtensorMap into the kernel's parameter space, and the
    kernel uses the parameter's generic address (`cvta.param`) for
    `prefetch.tensormap` and the TMA loads, so no launch needs device memory
    of its own and every launch can be captured into a CUDA graph. Each use
    gets the address right before it (inline PTX naming the parameter's
    symbol, `<kernel>_param_<index>`), so no 64-bit address stays live across
    a producer's loops. The attribute is removed; a listed index that is not
    a `!llvm.ptr` parameter is an error.

    ```mlir
    llvm.func @fa_fwd_(%arg11: !llvm.ptr, ...)
        attributes {fa.grid_constant_params = array<i32: 11>, nvvm.kernel}
    // becomes
    llvm.func @fa_fwd_(%arg11: !llvm.ptr {llvm.align = 64 : i64,
        llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, ...)
        attributes {nvvm.kernel} {
      ...
      %a = llvm.inline_asm has_side_effects "mov.b64 $0, fa_fwd__param_11;
          cvta.param.u64 $0, $0;", "=l"  : () -> i64
      %map = llvm.inttoptr %a : i64 to !llvm.ptr
    ```
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
}

#endif // FA_CONVERSION_PASSES
