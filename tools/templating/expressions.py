"""A small, safe expression language for templates: launch geometry, constraints, derived values.

Templates come from people and, later, from a chat model, so their expressions are parsed with
Python's `ast`, checked against a whitelist of node types (integer and float arithmetic,
comparisons, `and`/`or`/`not`, `a if c else b`, names and a few named functions) and turned once
into nested Python closures over those nodes alone. Nothing is ever passed to eval(); an attribute, a subscript or an unknown function is an error that names it.
Nor may an expression hang or exhaust the process that evaluates it: exponents and shifts are
bounded (2 ** 10 ** 10 would compute for hours), nesting too deep to parse or walk is an error,
and arithmetic that fails (inf to int, a negative shift, a function given the wrong arguments)
is an ExpressionError like any other.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

from astra_kernels.tools.errors import AstraError


class ExpressionError(AstraError):
    """An expression that does not parse, uses something not allowed, or names an unknown symbol."""


MAX_EXPONENT = 64  # of ** and <<: no launch geometry or constraint needs a number beyond 2 ** 64


def _power(base, exponent):
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {exponent} is beyond {MAX_EXPONENT}")
    return operator.pow(base, exponent)


def _shift(value, by):
    if by > MAX_EXPONENT:
        raise ExpressionError(f"shift by {by} is beyond {MAX_EXPONENT}")
    return operator.lshift(value, by)


def _ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two that divides n and is at most cap (the widest whole vector)."""
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


FUNCTIONS = {
    "min": min, "max": max, "abs": abs, "ceil_div": _ceil_div, "gcd": math.gcd,
    "pow2_divisor": _pow2_divisor, "is_pow2": _is_pow2, "next_pow2": _next_pow2,
    "log2": lambda n: int(n).bit_length() - 1, "int": int,
}

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
    ast.Pow: _power, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.LShift: _shift, ast.RShift: operator.rshift,
}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}


class Expression:
    """A parsed expression; `names` are the symbols it reads, checked before it is ever evaluated."""

    def __init__(self, text: str):
        self.text = text.strip()
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"cannot parse {self.text!r}: {exc.msg}") from None
        except (RecursionError, MemoryError):
            raise ExpressionError(f"cannot parse {self.text[:80]!r}...: nested too deeply") from None
        self.tree = tree.body
        self.names: set[str] = set()
        try:
            self._validate(self.tree)
            # The validated tree as nested closures, built once: a search evaluates a template's
            # few expressions for every configuration at every shape (millions of calls for one
            # space), and walking the tree on each call cost about 10 us an expression.
            self._evaluate = _closure(self.tree)
        except RecursionError:
            raise ExpressionError(f"{self.text[:80]!r}...: nested too deeply") from None

    def _validate(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, bool)):
                raise ExpressionError(f"{self.text!r}: only numbers are allowed, not {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id not in FUNCTIONS:
                self.names.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            self._validate(node.left)
            self._validate(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            self._validate(node.operand)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self._validate(value)
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            self._validate(node.left)
            for comparator in node.comparators:
                self._validate(comparator)
        elif isinstance(node, ast.IfExp):
            for part in (node.test, node.body, node.orelse):
                self._validate(part)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                called = ast.unparse(node.func)
                raise ExpressionError(
                    f"{self.text!r}: {called}() is not an allowed function; allowed: {', '.join(FUNCTIONS)}"
                )
            for arg in node.args:
                self._validate(arg)
        else:
            raise ExpressionError(f"{self.text!r}: {ast.unparse(node)!r} is not allowed in a template expression")

    def __call__(self, env: Mapping[str, int | float]):
        missing = self.names - env.keys()
        if missing:
            raise ExpressionError(f"{self.text!r}: unknown name(s) {', '.join(sorted(missing))}")
        try:
            return self._evaluate(env)
        except ZeroDivisionError:
            raise ExpressionError(f"{self.text!r}: division by zero") from None
        except ExpressionError as exc:
            raise ExpressionError(f"{self.text!r}: {exc}") from None
        except (ArithmeticError, ValueError, TypeError, RecursionError) as exc:  # overflow, negative shift, min()
            raise ExpressionError(f"{self.text!r}: {type(exc).__name__}: {exc}") from None

    def __getstate__(self) -> dict:  # closures do not pickle: a request carries the text and tree
        return {k: v for k, v in self.__dict__.items() if k != "_evaluate"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._evaluate = _closure(self.tree)

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


def _closure(node: ast.AST) -> Callable[[Mapping], object]:
    """One validated node as a function of the environment (the node types `_validate` admits)."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        return operator.itemgetter(node.id)
    if isinstance(node, ast.BinOp):
        function, left, right = _BINARY[type(node.op)], _closure(node.left), _closure(node.right)
        return lambda env: function(left(env), right(env))
    if isinstance(node, ast.UnaryOp):
        operand = _closure(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.UAdd):
            return lambda env: +operand(env)
        return lambda env: not operand(env)
    if isinstance(node, ast.BoolOp):  # True or False, as all() and any() give, never an operand
        values = tuple(_closure(v) for v in node.values)
        if isinstance(node.op, ast.And):
            def every(env):
                for value in values:
                    if not value(env):
                        return False
                return True
            return every

        def some(env):
            for value in values:
                if value(env):
                    return True
            return False
        return some
    if isinstance(node, ast.Compare):
        left = _closure(node.left)
        pairs = tuple((_COMPARE[type(op)], _closure(c)) for op, c in zip(node.ops, node.comparators))
        if len(pairs) == 1:
            (compare, right), = pairs
            return lambda env: bool(compare(left(env), right(env)))

        def chain(env):
            before = left(env)
            for compare, right in pairs:
                after = right(env)
                if not compare(before, after):
                    return False
                before = after
            return True
        return chain
    if isinstance(node, ast.IfExp):
        test, body, orelse = _closure(node.test), _closure(node.body), _closure(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Call):
        function, args = FUNCTIONS[node.func.id], tuple(_closure(a) for a in node.args)
        if len(args) == 1:
            only, = args
            return lambda env: function(only(env))
        if len(args) == 2:
            first, second = args
            return lambda env: function(first(env), second(env))
        return lambda env: function(*(a(env) for a in args))
    raise ExpressionError(f"cannot evaluate {ast.unparse(node)!r}")  # pragma: no cover: _validate admits no other
