"""Template expressions as C++: the same values, computed by host code that has no Python.

An exported kernel (astra_kernels/jobs/exporting/cuda_file.py) must pick configurations and compute launch shapes
exactly as the Python tuner does, from a plain C++ program. So every expression is translated
node by node from the same parsed tree that tools/templating/expressions.py evaluates, keeping Python's
integer semantics where C++ differs: floor division and modulo round toward negative infinity,
`and`/`or`/comparisons give 0 or 1 (the evaluator returns booleans there), and what raises in
Python (division by zero, a negative shift) or has no 64-bit integer value (a negative power,
which Python makes a float; a result past 64 bits) sets an error flag that the caller checks,
instead of undefined behaviour. True division and float constants have no exact integer meaning
and are refused at translation time.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from astra_kernels.tools.errors import AstraError
from .expressions import Expression


class TranslationError(AstraError):
    """An expression the C++ translation cannot reproduce exactly."""


# Host-only helpers; the generated code passes `err` (an int) to every call that can fail.
HELPERS = r"""typedef long long ax_int;

inline ax_int ax_add(int& err, ax_int a, ax_int b) {
    ax_int r;
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_add_overflow(a, b, &r)) { err = 1; return 0; }
#else
    r = a + b;
#endif
    return r;
}
inline ax_int ax_sub(int& err, ax_int a, ax_int b) {
    ax_int r;
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_sub_overflow(a, b, &r)) { err = 1; return 0; }
#else
    r = a - b;
#endif
    return r;
}
inline ax_int ax_mul(int& err, ax_int a, ax_int b) {
    ax_int r;
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_mul_overflow(a, b, &r)) { err = 1; return 0; }
#else
    r = a * b;
#endif
    return r;
}
inline ax_int ax_floordiv(int& err, ax_int a, ax_int b) {
    if (b == 0 || (a == (-0x7fffffffffffffffLL - 1) && b == -1)) { err = 1; return 0; }
    ax_int q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}
inline ax_int ax_mod(int& err, ax_int a, ax_int b) {
    if (b == 0) { err = 1; return 0; }
    if (b == -1) return 0;
    ax_int r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
inline ax_int ax_pow(int& err, ax_int a, ax_int b) {
    if (b < 0 || b > 64) { err = 1; return 0; }  // tools/templating/expressions.py bounds exponents at 64
    ax_int r = 1;
    for (ax_int i = 0; i < b && !err; ++i) r = ax_mul(err, r, a);
    return r;
}
inline ax_int ax_shl(int& err, ax_int a, ax_int b) {
    if (b < 0 || b > 64) { err = 1; return 0; }
    if (a == 0) return 0;
    if (b >= 63) { err = 1; return 0; }
    ax_int r = (ax_int)((unsigned long long)a << b);
    if ((r >> b) != a) { err = 1; return 0; }
    return r;
}
inline ax_int ax_shr(int& err, ax_int a, ax_int b) {
    if (b < 0) { err = 1; return 0; }
    if (b >= 63) return a < 0 ? -1 : 0;
    return a >= 0 ? (a >> b) : ~((~a) >> b);
}
inline ax_int ax_neg(int& err, ax_int a) { return ax_sub(err, 0, a); }
inline ax_int ax_abs(int& err, ax_int a) { return a < 0 ? ax_neg(err, a) : a; }
inline ax_int ax_min(ax_int a, ax_int b) { return b < a ? b : a; }
inline ax_int ax_max(ax_int a, ax_int b) { return b > a ? b : a; }
inline ax_int ax_ceil_div(int& err, ax_int a, ax_int b) { return ax_neg(err, ax_floordiv(err, ax_neg(err, a), b)); }
inline ax_int ax_gcd(int& err, ax_int a, ax_int b) {
    a = ax_abs(err, a);
    b = ax_abs(err, b);
    while (b != 0) { ax_int t = a % b; a = b; b = t; }
    return a;
}
inline ax_int ax_bit_length(ax_int n) {
    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    ax_int bits = 0;
    while (u) { ++bits; u >>= 1; }
    return bits;
}
inline ax_int ax_pow2_divisor(int& err, ax_int n, ax_int cap) {
    ax_int v = 1;
    while (!err && v <= cap / 2 && ax_mod(err, n, v * 2) == 0) v *= 2;
    return v;
}
inline ax_int ax_is_pow2(ax_int n) { return n > 0 && (n & (n - 1)) == 0; }
inline ax_int ax_next_pow2(int& err, ax_int n) { return n <= 1 ? 1 : ax_shl(err, 1, ax_bit_length(n - 1)); }
inline ax_int ax_log2(ax_int n) { return ax_bit_length(n) - 1; }
"""

_BINARY = {
    ast.Add: "ax_add(err, {}, {})", ast.Sub: "ax_sub(err, {}, {})", ast.Mult: "ax_mul(err, {}, {})",
    ast.FloorDiv: "ax_floordiv(err, {}, {})", ast.Mod: "ax_mod(err, {}, {})", ast.Pow: "ax_pow(err, {}, {})",
    ast.LShift: "ax_shl(err, {}, {})", ast.RShift: "ax_shr(err, {}, {})",
    ast.BitAnd: "({} & {})", ast.BitOr: "({} | {})",
}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_FOLDED = {"min": "ax_min({}, {})", "max": "ax_max({}, {})", "gcd": "ax_gcd(err, {}, {})"}
_FIXED = {"abs": (1, "ax_abs(err, {})"), "ceil_div": (2, "ax_ceil_div(err, {}, {})"),
          "pow2_divisor": (2, "ax_pow2_divisor(err, {}, {})"), "is_pow2": (1, "ax_is_pow2({})"),
          "next_pow2": (1, "ax_next_pow2(err, {})"), "log2": (1, "ax_log2({})"), "int": (1, "({})")}


def to_cpp(expression: Expression, name: Callable[[str], str]) -> str:
    """A C++ expression of type ax_int with the value `expression` has in Python; `name` maps a
    symbol to the C++ variable holding it. The code uses a local `int err` (see HELPERS)."""
    return _node(expression.tree, expression.text, name)


def _node(node: ast.AST, text: str, name: Callable[[str], str]) -> str:
    def sub(child: ast.AST) -> str:
        return _node(child, text, name)

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            return "1" if node.value else "0"
        if isinstance(node.value, int):
            if not -(2 ** 63) < node.value < 2 ** 63:
                raise TranslationError(f"{text!r}: {node.value} does not fit 64 bits")
            return f"{node.value}LL"
        raise TranslationError(f"{text!r}: the float {node.value!r} has no exact integer translation")
    if isinstance(node, ast.Name):
        return name(node.id)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            raise TranslationError(f"{text!r}: true division `/` gives a float; the C++ export takes `//`")
        return _BINARY[type(node.op)].format(sub(node.left), sub(node.right))
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            return f"ax_neg(err, {sub(node.operand)})"
        if isinstance(node.op, ast.UAdd):
            return f"({sub(node.operand)})"
        return f"((ax_int)!({sub(node.operand)}))"
    if isinstance(node, ast.BoolOp):
        joiner = " && " if isinstance(node.op, ast.And) else " || "
        return "((ax_int)(" + joiner.join(f"({sub(v)}) != 0" for v in node.values) + "))"
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        parts = [f"({sub(a)}) {_COMPARE[type(op)]} ({sub(b)})"
                 for a, op, b in zip(operands, node.ops, operands[1:])]
        return "((ax_int)(" + " && ".join(f"({p})" for p in parts) + "))"
    if isinstance(node, ast.IfExp):
        return f"(({sub(node.test)}) != 0 ? ({sub(node.body)}) : ({sub(node.orelse)}))"
    if isinstance(node, ast.Call):
        func, args = node.func.id, [sub(a) for a in node.args]
        if func in _FOLDED:
            if not args:
                if func == "gcd":
                    return "0LL"
                raise TranslationError(f"{text!r}: {func}() needs arguments")
            if len(args) == 1:
                if func == "gcd":
                    return f"ax_abs(err, {args[0]})"
                raise TranslationError(f"{text!r}: {func}() of one argument iterates it, which has no meaning here")
            result = args[0]
            for arg in args[1:]:
                result = _FOLDED[func].format(result, arg)
            return result
        arity, pattern = _FIXED[func]
        if len(args) != arity:
            raise TranslationError(f"{text!r}: {func}() takes {arity} argument(s), got {len(args)}")
        return pattern.format(*args)
    raise TranslationError(f"{text!r}: cannot translate {ast.unparse(node)!r}")  # pragma: no cover
