"""Arithmetic over a case's sizes and a kernel's knobs, e.g. ``ceil_div(N, BN)``.

Launch configurations, shapes, scalar arguments and FLOP/byte formulas are written
as such expressions. They are parsed with :mod:`ast` and walked by a whitelist:
numbers, names, ``+ - * / // %``, unary minus, parentheses and the calls
``ceil_div``, ``round_up``, ``min``, ``max``. Nothing is ever handed to ``eval``,
so a workload file or a model's answer cannot run Python. :meth:`Expr.python`
writes the same arithmetic as Python source for the exported launch module, from
the checked tree (never from the text), over :data:`PYTHON_HELPERS`.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping, Optional, Union

Number = Union[int, float]


class ExprError(ValueError):
    """An expression that does not parse, uses something not whitelisted, or
    names a value that is not defined."""


def _ceil_div(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("ceil_div by zero")
    return -(-a // b)


def _round_up(a: Number, b: Number) -> Number:
    return _ceil_div(a, b) * b


def _true_div(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("division by zero")
    q = a / b
    # Keep integer arithmetic exact: 128 / 8 stays the int 16.
    return int(q) if isinstance(a, int) and isinstance(b, int) and a % b == 0 else q


def _floor_div(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def _mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("modulo by zero")
    return a % b


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _true_div,
    ast.FloorDiv: _floor_div,
    ast.Mod: _mod,
}
# min and max of one value are that value (Python's would iterate over it).
_FUNCTIONS: dict[str, tuple[Callable[..., Number], Optional[int]]] = {
    "ceil_div": (_ceil_div, 2), "round_up": (_round_up, 2),
    "min": (lambda *a: min(a), None), "max": (lambda *a: max(a), None)}


@dataclass(frozen=True)
class Expr:
    """A parsed expression; ``Expr.parse("ceil_div(N, 16)").evaluate({"N": 100}) == 7``."""

    text: str
    tree: ast.expr = field(compare=False, repr=False)  # equal texts are equal expressions (ast nodes compare by identity)

    @staticmethod
    def parse(value: Union[str, int, float]) -> "Expr":
        if isinstance(value, bool):
            raise ExprError(f"expected a number or an expression, got {value!r}")
        if isinstance(value, (int, float)):
            return Expr(str(value), ast.Constant(value))
        if not isinstance(value, str):
            raise ExprError(f"expected a number or an expression, got {value!r}")
        return Expr(value, _parse(value))

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)} - set(_FUNCTIONS)

    def evaluate(self, env: Mapping[str, Number]) -> Number:
        try:
            return _walk(self.tree, env, self.text)
        except (OverflowError, ZeroDivisionError) as e:  # e.g. a 400-digit integer divided into a float
            raise ExprError(f"'{self.text[:80]}': {e}") from None

    def evaluate_int(self, env: Mapping[str, Number]) -> int:
        value = self.evaluate(env)
        if isinstance(value, float):
            if not value.is_integer():
                raise ExprError(f"'{self.text}' gives {value}, not a whole number (use // or ceil_div)")
            value = int(value)
        return value

    def shown(self) -> str:
        """The expression as people read it, rebuilt from the tree (no comments, no stray text)."""
        return ast.unparse(self.tree)

    def python(self, name: Callable[[str], str]) -> str:
        """Python source computing this expression with :data:`PYTHON_HELPERS`; `name(id)`
        is the source of a name's value (e.g. ``v['N']``). Raises ExprError for a
        constant Python cannot write back (inf)."""
        return _python(self.tree, name, self.text)

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.expr:
    if len(text) > 500:
        raise ExprError("expression longer than 500 characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"'{text}' does not parse: {e.msg}") from None
    except RecursionError:
        raise ExprError(f"'{text[:60]}...' nests too deeply") from None
    for node in ast.walk(tree):
        _check_node(node, text)
    if _depth(tree) > MAX_DEPTH:
        raise ExprError(f"'{text[:60]}...' nests more than {MAX_DEPTH} levels deep")
    return tree


# Nesting a launch rule may have: ast.unparse and the evaluator recurse once per level, and
# 400 unary pluses (within the length limit) overflowed Python's stack in `export`.
MAX_DEPTH = 64


def _depth(node: ast.AST) -> int:
    """Levels of the tree, counted without recursion."""
    deepest, todo = 0, [(node, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((child, d + 1) for child in ast.iter_child_nodes(n) if isinstance(child, ast.expr))
    return deepest


def _check_node(node: ast.AST, text: str) -> None:
    allowed = (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load,
               ast.USub, ast.UAdd, *_BINARY)
    if not isinstance(node, allowed):
        raise ExprError(f"'{text}': {type(node).__name__} is not allowed (only numbers, names, "
                        "+ - * / // %, ceil_div, round_up, min, max)")
    if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
        raise ExprError(f"'{text}': only numeric constants are allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords:
            raise ExprError(f"'{text}': only ceil_div, round_up, min and max can be called")


def _walk(node: ast.expr, env: Mapping[str, Number], text: str) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):  # _check_node let only numbers in
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"'{text}' uses '{node.id}', which is not defined here "
                            f"(known: {', '.join(sorted(env)) or 'nothing'})")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _walk(node.operand, env, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_walk(node.left, env, text), _walk(node.right, env, text))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn, arity = _FUNCTIONS[node.func.id]
        args = [_walk(a, env, text) for a in node.args]
        if (arity is not None and len(args) != arity) or not args:
            raise ExprError(f"'{text}': {node.func.id} takes {arity or 'one or more'} arguments")
        return fn(*args)
    raise ExprError(f"'{text}': unsupported expression")  # unreachable after _check_node


# The evaluator's semantics as Python source, for generated code that must not import
# warpsmith: exact integer division, and one-line errors for a zero divisor.
PYTHON_HELPERS = '''
def _ceil_div(a, b):
    if b == 0:
        raise ValueError("ceil_div by zero")
    return -(-a // b)


def _round_up(a, b):
    return _ceil_div(a, b) * b


def _div(a, b):
    if b == 0:
        raise ValueError("division by zero")
    q = a / b
    return int(q) if isinstance(a, int) and isinstance(b, int) and a % b == 0 else q


def _floordiv(a, b):
    if b == 0:
        raise ValueError("division by zero")
    return a // b


def _mod(a, b):
    if b == 0:
        raise ValueError("modulo by zero")
    return a % b


def _whole(value, text):
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"'{text}' gives {value}, not a whole number")
        value = int(value)
    return value
'''
_PY_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_PY_CALLS = {ast.Div: "_div", ast.FloorDiv: "_floordiv", ast.Mod: "_mod"}
_PY_FUNCTIONS = {"ceil_div": "_ceil_div", "round_up": "_round_up", "min": "min", "max": "max"}


def _python(node: ast.expr, name: Callable[[str], str], text: str) -> str:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise ExprError(f"'{text}': {node.value} cannot be written as a Python number")
        return repr(node.value)
    if isinstance(node, ast.Name):
        return name(node.id)
    if isinstance(node, ast.UnaryOp):
        return f"({'-' if isinstance(node.op, ast.USub) else '+'}{_python(node.operand, name, text)})"
    if isinstance(node, ast.BinOp):
        left, right = _python(node.left, name, text), _python(node.right, name, text)
        op = type(node.op)
        return f"({left} {_PY_BINARY[op]} {right})" if op in _PY_BINARY else f"{_PY_CALLS[op]}({left}, {right})"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn, arity = _FUNCTIONS[node.func.id]
        if (arity is not None and len(node.args) != arity) or not node.args:
            raise ExprError(f"'{text}': {node.func.id} takes {arity or 'one or more'} arguments")
        args = [_python(a, name, text) for a in node.args]
        return args[0] if len(args) == 1 and node.func.id in ("min", "max") else \
            f"{_PY_FUNCTIONS[node.func.id]}({', '.join(args)})"
    raise ExprError(f"'{text}': unsupported expression")  # unreachable after _check_node
