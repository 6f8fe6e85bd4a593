"""score_mods written in Python.

A score_mod is a function of one attention score and its position,

    def softcap(score, b, h, q_idx, kv_idx):
        return 30 * fa.mods.tanh(score / 30)

with FlexAttention's signature (fa.mods.softcap(30) is this one): `score` is
the score after the scale, the indices are integers. fa.mods.trace(fn) runs it once on symbolic values and
writes what it computed as a func.func of fa's score_mod library (MLIR), which
fa-aot and the JIT compile into the kernels (forward and, differentiated by
the compiler, backward). fa.attention(..., score_mod=fn) does this itself and
compiles on first use.

What a score_mod may use: + - * / (and unary -, abs) on the score, the
indices and Python numbers; // and % on indices; comparisons, & | ~ on their
results; and where, tanh, exp, exp2, log, sqrt, maximum, minimum,
clamp from this module (or the same torch functions and tensor methods, so a
FlexAttention score_mod written with torch runs unchanged). Index arithmetic
stays in integers; an index meets the score as float32. Python `if` on a
traced value cannot be traced: the error says so.

A score_mod may read torch tensors it captures, indexed in all their
dimensions at once by index expressions:

    slopes = torch.tensor([...], device="cuda")            # [H]
    alibi = lambda s, b, h, q, kv: s + slopes[h] * (kv - q)
    rel = lambda s, b, h, q, kv: s + table[h, q - kv + nk - 1]   # [H, Nq+Nk-1]

Each tensor becomes a mod_arg of the kernel (a parameter, so new values in
the same or another tensor of that dtype and rank need no recompile); an
index outside the tensor is clamped into it. float32/float16/bfloat16
elements meet the score as float32, int32/int64 ones are indices. The
kernels only read them: no gradient flows to a captured tensor.

The same function serves as its own reference: on numbers and torch tensors
fa.mods.tanh etc. compute with math / torch.

mask_mods are FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool, traced
by fa.mods.trace_mask (fa.attention(..., mask_mod=fn) does it itself):

    sliding = lambda b, h, q, kv: (kv <= q) & (q - kv < 256)
    document = lambda b, h, q, kv: doc_ids[b, q] == doc_ids[b, kv]   # [B, N] int32
    prefix_lm = lambda b, h, q, kv: (kv < prefix[b]) | (kv <= q)       # [B] int32

built from comparisons, & | ~ of them, where, + - * // % on the indices and
reads of captured tensors (mod_args, as for score_mods; a score_mod's come
first where a call has both). They return a condition: a number, Python
if/and/or/not on a traced value, or a float `/` are errors saying what to
write instead. The kernels evaluate the mask_mod on every score, after the
score_mod and together with the call's causal/window mask.
"""
import functools
import hashlib
import math
import os
import re

from ._runtime import FaError

_F32, _INDEX, _I1 = "f32", "index", "i1"


class _Trace:
    """The ops of one trace, in order, as MLIR lines, and the tensors it
    reads (its mod_args, in order of first read)."""

    def __init__(self, kind="score_mod"):
        self.kind = kind  # "score_mod" or "mask_mod", for the messages
        self.lines = []
        self.count = 0
        self.consts = {}
        self.tensors = []

    def mod_arg(self, tensor):
        """The block argument of captured `tensor`, added on its first read."""
        for i, t in enumerate(self.tensors):
            if t is tensor:
                return "%%m%d" % i
        self.tensors.append(tensor)
        return "%%m%d" % (len(self.tensors) - 1)

    def emit(self, text, type_):
        name = "%%v%d" % self.count
        self.count += 1
        self.lines.append("  %s = %s" % (name, text))
        return Sym(self, name, type_)

    def const(self, value, type_):
        key = (repr(value), type_)
        if key not in self.consts:
            if type_ == _I1:  # a bool literal has its type
                text = "arith.constant %s" % ("true" if value else "false")
            else:
                literal = (_float_literal(value, self.kind) if type_ == _F32
                           else str(int(value)))
                text = "arith.constant %s : %s" % (literal, type_)
            self.consts[key] = self.emit(text, type_)
        return self.consts[key]


def _float_literal(value, kind="score_mod"):
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise FaError(1, "fa.mods: the constant %r is not finite; a %s's constants "
                         "must be finite numbers" % (value, kind))
    return "%.9e" % value


class Sym:
    """A traced value: the score (f32), an index, or a condition (i1)."""

    def __init__(self, trace, name, type_):
        self._trace, self._name, self._type = trace, name, type_

    # The traced value's dtype, for `x.to(score.dtype)` in torch-style code.
    @property
    def dtype(self):
        return self._type

    def to(self, dtype=None, *args, **kwargs):
        """x.to(score.dtype) in torch-style code: a number as float32."""
        return _as(self, _F32)

    def float(self):
        return _as(self, _F32)

    def abs(self):
        return abs_(self)

    def clamp(self, min=None, max=None):
        return clamp(self, min, max)

    def tanh(self):
        return tanh(self)

    def exp(self):
        return exp(self)

    def __bool__(self):
        if self._trace.kind == "mask_mod":
            raise FaError(1, "fa.mods: a mask_mod branched on a traced value (Python if/and/"
                             "or/not/bool()); combine conditions with & | ~ or write "
                             "fa.mods.where(condition, x, y) instead")
        raise FaError(1, "fa.mods: a score_mod branched on a traced value (Python if/and/or/"
                         "bool()); write fa.mods.where(condition, x, y) instead")

    def __index__(self):
        raise FaError(1, "fa.mods: a %s used a traced value as a Python integer "
                         "(indexing a list or a tuple?); only captured torch tensors can "
                         "be indexed by positions" % self._trace.kind)

    __int__ = __float__ = __index__

    def __add__(self, o): return _arith("add", self, o)
    def __radd__(self, o): return _arith("add", o, self)
    def __sub__(self, o): return _arith("sub", self, o)
    def __rsub__(self, o): return _arith("sub", o, self)
    def __mul__(self, o): return _arith("mul", self, o)
    def __rmul__(self, o): return _arith("mul", o, self)
    def __truediv__(self, o): return _arith("div", _as(self, _F32), o)
    def __rtruediv__(self, o): return _arith("div", o, _as(self, _F32))
    def __floordiv__(self, o): return _int_arith("floordivsi", self, o)
    def __rfloordiv__(self, o): return _int_arith("floordivsi", o, self)
    def __mod__(self, o): return _int_arith("remsi", self, o)
    def __rmod__(self, o): return _int_arith("remsi", o, self)
    def __neg__(self): return _arith("sub", 0, self)
    def __pos__(self): return self
    def __abs__(self): return abs_(self)
    def __lt__(self, o): return _compare("lt", self, o)
    def __le__(self, o): return _compare("le", self, o)
    def __gt__(self, o): return _compare("gt", self, o)
    def __ge__(self, o): return _compare("ge", self, o)
    def __eq__(self, o): return _compare("eq", self, o)
    def __ne__(self, o): return _compare("ne", self, o)
    def __and__(self, o): return _logic("andi", self, o)
    __rand__ = __and__
    def __or__(self, o): return _logic("ori", self, o)
    __ror__ = __or__
    def __invert__(self): return _logic("xori", self, True)
    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch.tanh(score) and friends on traced values."""
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name == "__getitem__" and len(args) == 2:
            return _read(args[0], args[1])
        handler = _TORCH.get(name)
        if handler is None:
            t = _trace_of(*args, *kwargs.values())
            raise FaError(1, "fa.mods: torch.%s is not supported in a %s (supported: %s)"
                          % (name, t.kind if t else "score_mod", ", ".join(sorted(_TORCH))))
        return handler(*args, **kwargs)


def _trace_of(*values):
    for v in values:
        if isinstance(v, Sym):
            return v._trace
    return None


def _lift(trace, value, type_):
    """A Sym of `type_` for a Sym or a Python number."""
    if isinstance(value, Sym):
        return _as(value, type_)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FaError(1, "fa.mods: a %s combined a traced value with %r (%s); only "
                         "Python numbers and traced values can be combined"
                         % (trace.kind, value, type(value).__name__))
    return trace.const(value, type_)


def _as(sym, type_):
    """`sym` converted to `type_` (index → f32 through i32, i1 → f32 as 0/1)."""
    if sym._type == type_:
        return sym
    t = sym._trace
    if sym._type == _INDEX and type_ == _F32:
        i32 = t.emit("arith.index_cast %s : index to i32" % sym._name, "i32")
        return t.emit("arith.sitofp %s : i32 to f32" % i32._name, _F32)
    if sym._type == _I1 and type_ == _F32:
        return t.emit("arith.uitofp %s : i1 to f32" % sym._name, _F32)
    raise FaError(1, "fa.mods: a %s used a %s value where an %s is needed (use "
                     "fa.mods.where to turn a condition into a number)"
                     % (t.kind, sym._type, type_))


def _common_type(a, b):
    types = {getattr(x, "_type", _F32 if isinstance(x, float) else _INDEX) for x in (a, b)}
    return _F32 if _F32 in types or _I1 in types else _INDEX


def _arith(op, a, b):
    t = _trace_of(a, b)
    type_ = _common_type(a, b)
    x, y = _lift(t, a, type_), _lift(t, b, type_)
    suffix = "f" if type_ == _F32 else "i"
    if op == "div" and type_ != _F32:
        raise FaError(1, "fa.mods: '/' of two integers; use // for integer division")
    return t.emit("arith.%s%s %s, %s : %s" % (op, suffix, x._name, y._name, type_), type_)


def _int_arith(op, a, b):
    t = _trace_of(a, b)
    if _common_type(a, b) != _INDEX:
        raise FaError(1, "fa.mods: // and %% apply to indices only in a %s" % t.kind)
    x, y = _lift(t, a, _INDEX), _lift(t, b, _INDEX)
    return t.emit("arith.%s %s, %s : index" % (op, x._name, y._name), _INDEX)


_FLOAT_PREDICATES = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_INT_PREDICATES = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


def _compare(pred, a, b):
    t = _trace_of(a, b)
    type_ = _common_type(a, b)
    x, y = _lift(t, a, type_), _lift(t, b, type_)
    if type_ == _F32:
        return t.emit("arith.cmpf %s, %s, %s : f32" % (_FLOAT_PREDICATES[pred], x._name, y._name), _I1)
    return t.emit("arith.cmpi %s, %s, %s : index" % (_INT_PREDICATES[pred], x._name, y._name), _I1)


def _logic(op, a, b):
    t = _trace_of(a, b)
    x, y = _lift_bool(t, a), _lift_bool(t, b)
    return t.emit("arith.%s %s, %s : i1" % (op, x._name, y._name), _I1)


def _lift_bool(trace, v):
    if isinstance(v, Sym):
        if v._type != _I1:
            raise FaError(1, "fa.mods: & | ~ apply to conditions (comparisons) only")
        return v
    return trace.const(bool(v), _I1)


def _unary_math(op, x):
    x = _as(x, _F32)
    return x._trace.emit("math.%s %s : f32" % (op, x._name), _F32)


def _dispatch(name, numeric, op):
    """A function of one value: traced, torch (by name) or Python number."""
    def fn(x):
        if isinstance(x, Sym):
            return op(x)
        if isinstance(x, (int, float)):
            return numeric(x)
        import torch
        return getattr(torch, name)(x)
    fn.__name__ = name
    return fn


tanh = _dispatch("tanh", math.tanh, lambda x: _unary_math("tanh", x))
exp = _dispatch("exp", math.exp, lambda x: _unary_math("exp", x))
exp2 = _dispatch("exp2", lambda v: 2.0 ** v, lambda x: _unary_math("exp2", x))
log = _dispatch("log", math.log, lambda x: _unary_math("log", x))
sqrt = _dispatch("sqrt", math.sqrt, lambda x: _unary_math("sqrt", x))


def _abs_sym(x):
    if x._type == _F32:
        return _unary_math("absf", x)
    # |i| = i < 0 ? 0 - i : i, in index arithmetic.
    return where(x < 0, 0 - x, x)


abs_ = _dispatch("abs", abs, _abs_sym)


def where(condition, x, y):
    """x where `condition` holds, else y."""
    t = _trace_of(condition, x, y)
    if t is None:
        if isinstance(condition, (bool, int)):
            return x if condition else y
        import torch
        return torch.where(condition, x, y)
    c = _lift_bool(t, condition)
    if _is_condition(x) and _is_condition(y):  # a condition (a mask_mod's result)
        a, b = _lift_bool(t, x), _lift_bool(t, y)
        return t.emit("arith.select %s, %s, %s : i1" % (c._name, a._name, b._name), _I1)
    type_ = _common_type(x, y)
    a, b = _lift(t, x, type_), _lift(t, y, type_)
    return t.emit("arith.select %s, %s, %s : %s" % (c._name, a._name, b._name, type_), type_)


def _is_condition(v):
    return isinstance(v, bool) or (isinstance(v, Sym) and v._type == _I1)


def maximum(x, y):
    if _trace_of(x, y) is None:
        return max(x, y) if isinstance(x, (int, float)) else __import__("torch").maximum(x, y)
    return _minmax("maximumf", "maxsi", x, y)


def minimum(x, y):
    if _trace_of(x, y) is None:
        return min(x, y) if isinstance(x, (int, float)) else __import__("torch").minimum(x, y)
    return _minmax("minimumf", "minsi", x, y)


def _minmax(fop, iop, x, y):
    t = _trace_of(x, y)
    type_ = _common_type(x, y)
    a, b = _lift(t, x, type_), _lift(t, y, type_)
    return t.emit("arith.%s %s, %s : %s" % (fop if type_ == _F32 else iop, a._name, b._name,
                                             type_), type_)


def clamp(x, min=None, max=None):
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


# torch dtype name -> the element type of a mod_arg, and the type its
# elements meet the score_mod's arithmetic as.
_ELEMENT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16",
                  "int32": "i32", "int64": "i64"}


@functools.lru_cache(maxsize=64)
def softcap(cap):
    """Logit soft-capping (Gemma 2, flash-attn's softcap) as a score_mod:
    cap · tanh(score / cap), cap > 0. One function per cap, so a cap traces
    once and names the same kernels."""
    if not isinstance(cap, (int, float)) or not cap > 0 or cap == float("inf"):
        raise FaError(1, "fa.mods.softcap: cap must be a finite number > 0, got %r" % (cap,))
    cap = float(cap)

    def softcap_mod(score, b, h, q_idx, kv_idx):
        return cap * tanh(score / cap)
    return softcap_mod


def _tensor_type(tensor, kind="score_mod"):
    """tensor<?x?xf32> for a captured torch tensor, or an FaError."""
    dtype = str(getattr(tensor, "dtype", "")).replace("torch.", "")
    element = _ELEMENT_TYPES.get(dtype)
    rank = tensor.dim() if hasattr(tensor, "dim") else -1
    if element is None or not 1 <= rank <= 4:
        raise FaError(1, "fa.mods: a %s read a tensor of dtype %s and rank %d; mod_args "
                         "are float32, float16, bfloat16, int32 or int64 tensors of rank 1 to 4"
                         % (kind, dtype or type(tensor).__name__, rank))
    return "tensor<%s%s>" % ("?x" * rank, element), element, rank


def _read(tensor, index):
    """tensor[index] in a trace: a tensor.extract of the tensor's mod_arg at
    index expressions, one per dimension (out-of-range positions are
    clamped by the kernels), as f32 (float elements) or index (integers)."""
    items = index if isinstance(index, tuple) else (index,)
    t = _trace_of(*items)
    type_, element, rank = _tensor_type(tensor, t.kind)
    if len(items) != rank or any(x is Ellipsis or isinstance(x, slice) or x is None
                                 for x in items):
        raise FaError(1, "fa.mods: a %s indexed a rank-%d tensor with %r; index every "
                         "dimension at once with positions, e.g. t[h, kv]"
                         % (t.kind, rank, index))
    positions = []
    for x in items:
        if isinstance(x, Sym) and x._type != _INDEX:
            raise FaError(1, "fa.mods: a tensor index is a %s value; positions are index "
                             "expressions of b, h, q_idx, kv_idx and integers" % x._type)
        positions.append(_lift(t, x, _INDEX)._name)
    name = t.mod_arg(tensor)
    value = t.emit("tensor.extract %s[%s] : %s" % (name, ", ".join(positions), type_), element)
    if element in ("f16", "bf16"):
        return t.emit("arith.extf %s : %s to f32" % (value._name, element), _F32)
    if element in ("i32", "i64"):
        return t.emit("arith.index_cast %s : %s to index" % (value._name, element), _INDEX)
    return value


_TORCH = {"tanh": tanh, "exp": exp, "exp2": exp2, "log": log, "sqrt": sqrt,
          "abs": abs_, "where": where, "maximum": maximum, "minimum": minimum,
          "clamp": clamp, "clip": clamp}


class _Traced:
    """A traced mod: its name in the kernels' tags, its MLIR (a function of
    fa's mod library) and the captured tensors it reads (its mod_args, in
    parameter order)."""

    kind = None

    def __init__(self, name, mlir, tensors=()):
        self.name, self.mlir, self.tensors = name, mlir, tuple(tensors)

    def __str__(self):
        return self.name

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self.name)


class ScoreMod(_Traced):
    """A traced score_mod (fa.mods.trace)."""
    kind = "score_mod"


class MaskMod(_Traced):
    """A traced mask_mod (fa.mods.trace_mask)."""
    kind = "mask_mod"


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_traced = {}  # name -> ScoreMod or MaskMod
_by_function = {}  # (function, captured values, kind) -> the traced mod: calls skip the trace
_MAX_TRACES = 256


def _function_key(fn, name, kind):
    """A key that changes when what `fn` computes can: its code, the values
    its closure and defaults hold and the numbers and tensors among the
    globals it names (a global rebound to new doc ids is traced anew; None
    when they are not hashable, which disables the cache)."""
    code = getattr(fn, "__code__", None)
    cells = tuple(c.cell_contents for c in getattr(fn, "__closure__", None) or ())
    scope = getattr(fn, "__globals__", {})
    numbers = tuple((n, scope[n]) for n in getattr(code, "co_names", ())
                    if isinstance(scope.get(n), (int, float)) or
                    hasattr(scope.get(n), "data_ptr"))
    key = (fn, code, cells, numbers, getattr(fn, "__defaults__", None), name, kind)
    try:
        hash(key)
    except TypeError:
        return None
    return key


# What each kind of mod is: its class, the signature its errors describe,
# its leading parameters and the type it returns.
_KINDS = {
    "score_mod": (ScoreMod, "(score, b, h, q_idx, kv_idx) -> score",
                  (("score", _F32), ("b", _INDEX), ("h", _INDEX), ("q", _INDEX),
                   ("kv", _INDEX)), _F32, "py_"),
    "mask_mod": (MaskMod, "(b, h, q_idx, kv_idx) -> bool",
                 (("b", _INDEX), ("h", _INDEX), ("q", _INDEX), ("kv", _INDEX)), _I1,
                 "py_mask_"),
}


def trace(fn, name=None):
    """The score_mod `fn` as fa's IR. `name` (a C identifier, at most 64
    characters) names its kernels; by default `py_` and a hash of the IR, so
    equal programs share kernels and a changed one never reuses stale ones."""
    return _traced_mod(fn, name, "score_mod")


def trace_mask(fn, name=None):
    """The mask_mod `fn` (FlexAttention's mask_mod(b, h, q_idx, kv_idx) ->
    bool: whether query q_idx sees key kv_idx) as fa's IR: comparisons of
    the indices, & | ~ of conditions, where, + - * // % on indices, reads of
    captured int and float tensors (document ids [B, N], prefix lengths [B])
    that become mod_args. `name` as for trace; by default `py_mask_` and a
    hash of the IR."""
    return _traced_mod(fn, name, "mask_mod")


def _traced_mod(fn, name, kind):
    cls, signature = _KINDS[kind][:2]
    if isinstance(fn, cls):
        return fn
    if isinstance(fn, _Traced):
        raise FaError(1, "fa.mods: %r is a traced %s, given as a %s" % (fn, fn.kind, kind))
    if not callable(fn):
        raise FaError(1, "fa.mods.%s: expected a function %s, got %r"
                         % ("trace" if kind == "score_mod" else "trace_mask", signature, fn))
    key = _function_key(fn, name, kind)
    if key is not None and key in _by_function:
        return _by_function[key]
    mod = _trace(fn, name, kind)
    if key is not None:
        # Bounded: a key holds the tensors the function captures, and a new
        # closure over new tensors per call must not keep them all alive.
        if len(_by_function) >= _MAX_TRACES:
            _by_function.clear()
        _by_function[key] = mod
    return mod


def _trace(fn, name, kind):
    cls, signature, params, result_type, prefix = _KINDS[kind]
    t = _Trace(kind)
    try:
        result = fn(*[Sym(t, "%" + n, type_) for n, type_ in params])
    except FaError as e:
        raise FaError(e.status, "%s (tracing %s %s)" % (e, kind, _describe(fn))) from None
    except Exception as e:  # the user's code failed on traced values
        raise FaError(1, "fa.mods: tracing %s %s failed: %s: %s; a %s %s is built from "
                         "arithmetic, comparisons and fa.mods functions"
                         % (kind, _describe(fn), type(e).__name__, e, kind, signature)) from None
    result = _result(t, result, result_type, fn)
    body = "\n".join(t.lines)
    args = "".join(", %%m%d: %s" % (i, _tensor_type(x, kind)[0])
                   for i, x in enumerate(t.tensors))
    # The prefix keeps the kinds apart (and score_mod names as they were).
    digest = hashlib.sha256(body.encode() + result._name.encode() +
                            args.encode()).hexdigest()[:16]
    name = name or prefix + digest
    if not _NAME.match(name):
        raise FaError(1, "fa.mods.trace: name %r is not a C identifier of at most 64 characters"
                         % (name,))
    params_text = ", ".join("%%%s: %s" % p for p in params)
    mlir = ("func.func @%s(%s%s) -> %s {\n%s%sreturn %s : %s\n}\n"
            % (name, params_text, args, result_type, body, "\n  " if body else "  ",
               result._name, result_type))
    mod = cls(name, mlir, t.tensors)
    _traced[name] = mod
    return mod


def _result(t, result, result_type, fn):
    """The traced function's result as a Sym of `result_type`."""
    if result_type == _F32:
        return _lift(t, result, _F32) if not isinstance(result, Sym) else _as(result, _F32)
    if _is_condition(result):
        return _lift_bool(t, result)
    what = ("%s value" % {_F32: "a float32", _INDEX: "an integer index"}[result._type]
            if isinstance(result, Sym) else "%r (%s)" % (result, type(result).__name__))
    raise FaError(1, "fa.mods: mask_mod %s returned %s; a mask_mod returns a condition: a "
                     "comparison, & | ~ of comparisons, fa.mods.where of conditions, or "
                     "True/False" % (_describe(fn), what))


def write_library(path, *fns):
    """Writes the traced functions (ScoreMods, MaskMods, or functions, traced
    as score_mods) as one library for `fa-aot --score-mods PATH` (configs
    name them with mod=NAME and maskmod=NAME); returns their names."""
    traced = [fn if isinstance(fn, _Traced) else trace(fn) for fn in fns]
    with open(path, "w") as f:
        f.write("\n".join(m.mlir for m in traced))
    return [m.name for m in traced]


def _describe(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)


def resolve(score_mod, mask_mod, mod_args):
    """(score_mod name, mask_mod name, the tensors the kernel reads) of a
    call: a Python function is traced and passes the tensors it captures, a
    name takes them from `mod_args` (the score_mod's, then the mask_mod's,
    as the kernel's parameters come: docs/ABI.md "mod_args"). Names are
    returned as given, for the caller to check."""
    score_fn = callable(score_mod) or isinstance(score_mod, _Traced)
    mask_fn = callable(mask_mod) or isinstance(mask_mod, _Traced)
    score = trace(score_mod) if score_fn else None
    mask = trace_mask(mask_mod) if mask_fn else None
    mod_args = tuple(mod_args or ())
    if mod_args and (score_mod is None or score_fn) and (mask_mod is None or mask_fn):
        if score_mod is None and mask_mod is None:
            raise FaError(1, "fa: mod_args given without a score_mod or mask_mod to read them")
        raise FaError(1, "fa: mod_args is for a score_mod or mask_mod given by name; a Python "
                         "%s passes the tensors it reads itself"
                         % ("score_mod" if score_fn else "mask_mod"))
    # Named mods read mod_args; a traced one's tensors go in its place.
    tensors = (score.tensors if score else ()) + mod_args + (mask.tensors if mask else ())
    return (score.name if score else score_mod, mask.name if mask else mask_mod, tensors)


def library_for(*names, library=None):
    """The path of the mod library a JIT config naming `names` (score_mod and
    mask_mod names, None for absent ones) compiles against: the traced ones'
    functions, written once into the JIT cache, with the text of `library`
    (a user's .mlir library) in front where a name is not traced. `library`
    itself where none is traced; None where a name is not traced and there
    is no `library`."""
    traced = [_traced[n] for n in names if n in _traced]
    named = [n for n in names if n and n not in _traced]
    if not traced or (named and not library):
        return library
    text = "\n".join(m.mlir for m in traced)
    base = "+".join(m.name for m in traced)
    if named:
        with open(library) as f:
            user = f.read()
        # A library written by write_library may hold the traced ones already.
        text = _with_functions(user, "\n".join(m.mlir for m in traced
                                               if "@%s(" % m.name not in user))
        base = "lib_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    from . import jit
    directory = os.path.join(jit.cache_root(), "mods")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, base + ".mlir")
    if not os.path.exists(path):
        jit._write_atomically(path, text)
    return path


def _with_functions(library_text, functions):
    """A user's library with traced functions added: inside its module where
    it is one `module { ... }`, else after its functions."""
    stripped = library_text.rstrip()
    if re.match(r"\s*(//[^\n]*\n\s*)*module\b", library_text) and stripped.endswith("}"):
        return stripped[:-1] + "\n" + functions + "}\n"
    return library_text + "\n" + functions
