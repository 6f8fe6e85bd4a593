//===- AttnBase.td - attn dialect, attributes ---------------*- tablegen -*-===//
//
// The attn dialect: attention as one op, plus the intermediate tile ops the
// FlashAttention passes rewrite it into.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_BASE_TD
#define ATTN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::mlir::fa::attn";
  let summary = "Attention and its FlashAttention tile forms";
  let description = [{
    `attn.attention` and `attn.attention_backward` describe whole attention
    problems. The passes rewrite them into `attn.online_attention` (the
    online-softmax update of one query block by one key block) and
    `attn.backward_tile` (the recomputed gradient of one block pair), which
    `attn-decompose` lowers to linalg / arith / math.
  }];
  let useDefaultAttributePrinterParser = 1;
}

// A mask is a band of allowed keys per query row i, with
//   off = 0 (top-left alignment) or Nk - Nq (bottom-right alignment):
//   none:                  every key
//   causal:                j <= i                      (top-left)
//   causal_bottom_right:   j <= i + Nk - Nq
//   window:                i + off - left <= j <= i + off + right, off = Nk - Nq
def Attn_MaskKind : I32EnumAttr<"MaskKind", "attention mask kind", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Causal", 1, "causal">,
    I32EnumAttrCase<"CausalBottomRight", 2, "causal_bottom_right">,
    I32EnumAttrCase<"Window", 3, "window">]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::fa::attn";
}

def Attn_MaskKindAttr : EnumAttr<Attn_Dialect, Attn_MaskKind, "mask"> {
  let assemblyFormat = "`<` $value `>`";
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTN_BASE_TD
