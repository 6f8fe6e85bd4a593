//===- Passes.td - attn conversion passes -------------------*- tablegen -*-===//

#ifndef FA_CONVERSION_PASSES
#define FA_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def ConvertAttnToGPUPass : Pass<"convert-attn-to-gpu", "ModuleOp"> {
  let summary = "Lower attn.attention to fused tensor-core GPU kernels";
  let description = [{
    Every function holding one `attn.attention` (or `attn.attention_backward`)
    is replaced by a `gpu.module` with the kernels of docs/ABI.md: flat
    pointer parameters, i32 sizes and an f32 scale, shapes read at run time,
    so one kernel serves every (B, H, Hkv, Nq, Nk). The host side is the fa
    runtime, not IR.

    The forward is FlashAttention-2: one CTA per (query block, head, batch),
    16 query rows per warp, K/V tiles double-buffered in dynamic shared
    memory with cp.async, fragments loaded with ldmatrix, Q·Kᵀ and P·V on
    mma.sync m16n8k16 with f32 accumulators, the online softmax in registers
    (exp2 with scale·log2e folded), tiles outside the mask skipped and only
    boundary tiles masked.

    Before:
    ```mlir
    func.func @f(%q: tensor<?x?x?x128xbf16>, ...) -> ... {
      %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : ...
    }
    ```
    After:
    ```mlir
    gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a {
      gpu.func @fa_fwd_fwd_bf16_d128_..._sm90a(%q: memref<...xbf16>, ...,
          %batch: i32, %heads: i32, %kv_heads: i32, %nq: i32, %nk: i32,
          %scale: f32) kernel { ... nvgpu.ldmatrix ... nvvm.mma.sync ... }
    }
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
           "the default of -fa-wgmma-persistent">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

#endif // FA_CONVERSION_PASSES
