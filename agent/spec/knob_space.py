"""A kernel's knob space and the configurations its source refuses.

The knobs are the source's ``// knob NAME: v1 v2 ...`` comments; a ``#if CONDITION``
directly followed by ``#error MESSAGE`` is a restriction: CONDITION true means NVRTC
would refuse the configuration. Reading them lets the tuner skip such points without
compiling them (agent/proposers/tune.py) and lets benchmarks/kernel_tuner_compare.py give
Kernel Tuner the same space.

Only what can be read exactly is read: object-like macros defined once (a name
#defined twice, say in two #if branches, makes the restrictions that use it
unreadable), integers, + - * / % with C's truncation, comparisons, && and ||.
Anything else raises RestrictionError, and the tuner then compiles as before.
"""

from __future__ import annotations

import ast
import itertools
import operator
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

from .kernel_source import parse_knobs

# Each pattern stays on its line and strips in Python, and no two quantifiers in a row
# can take the same characters: a model-written source of long blank runs cannot make them
# backtrack quadratically (`#if` + 100 000 blanks take 50 s where `[ \t]+([^\n]+)` shares
# them). A comment left open runs to the end (one match, not a
# rescan from every later '/*': a string of 40 000 "/* " took 27 s).
_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^ \t\n][^\n]*)$", re.MULTILINE)  # object-like only
_IF_ERROR = re.compile(r"^[ \t]*#[ \t]*if[ \t]+([^ \t\n][^\n]*)\n[ \t]*#[ \t]*error([^\n]*)$", re.MULTILINE)
# String literals are matched first and kept: a "/*" in one opens no comment. One left open
# ends with its line (a match, not a rescan from every later quote: `"\"\"...` was quadratic).
_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\Z)|/\*.*?(?:\*/|\Z)|//[^\n]*', re.DOTALL)  # what NVRTC never sees
_NAME = re.compile(r"[A-Za-z_]\w*")
MAX_LINE = 4000  # a directive longer than this is not read
MAX_RESTRICTIONS = 64  # read per source; the rest are left to NVRTC
# The preprocessor computes in intmax_t: a value outside 64 bits is not read (and Python's
# big integers would let a crafted source spend seconds on one multiplication).
LOW, HIGH = -(1 << 63), 1 << 64


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)  # C truncates toward zero, in integers (a float would overflow or round)
    return q if (a >= 0) == (b >= 0) else -q


_BIN: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: _c_div, ast.Mod: lambda a, b: a - b * _c_div(a, b)}
_CMP: dict[type, Callable[[int, int], bool]] = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}


class RestrictionError(ValueError):
    """A #if condition this translator does not read (say which, so it can be extended)."""


def _c_to_python(condition: str) -> str:
    if re.search(r"!(?!=)|[&|^~?]|<<|>>|\bdefined\b", condition.replace("&&", " ").replace("||", " ")):
        raise RestrictionError(f"#if {condition}: only + - * / %, comparisons, && and || are read here")
    return condition.replace("&&", " and ").replace("||", " or ")


def _walk(node: ast.AST, env: Mapping[str, int], text: str) -> int:
    value = _walk_unbounded(node, env, text)
    if not LOW <= value < HIGH:
        raise RestrictionError(f"#if {text[:80]}: a value past 64 bits")
    return value


def _walk_unbounded(node: ast.AST, env: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Expression):
        return _walk(node.body, env, text)
    if isinstance(node, ast.Constant) and type(node.value) is int:  # not True / False
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise RestrictionError(f"#if {text}: '{node.id}' is neither a knob nor a macro of the source")
        return env[node.id]
    if isinstance(node, ast.BoolOp):
        operands = (_walk(v, env, text) for v in node.values)  # lazily: C's && and || short-circuit
        return int(all(operands) if isinstance(node.op, ast.And) else any(operands))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, env, text)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _walk(node.left, env, text), _walk(node.right, env, text)
        if right == 0 and isinstance(node.op, (ast.Div, ast.Mod)):
            raise ZeroDivisionError(f"#if {text}: division by zero")
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        result = _walk(node.left, env, text)  # C: a < b < c is (a < b) < c, not Python's chain
        for op, operand in zip(node.ops, node.comparators):
            result = int(_CMP[type(op)](result, _walk(operand, env, text)))
        return result
    raise RestrictionError(f"#if {text}: {type(node).__name__} is not read here")


@dataclass(frozen=True)
class Restriction:
    """One `#if CONDITION` / `#error MESSAGE` pair: CONDITION true means the config is refused."""

    condition: str  # as written in the source
    message: str
    expanded: str  # macros expanded, in Python's syntax

    def refuses(self, knobs: Mapping[str, int]) -> bool:
        try:
            return bool(_walk(ast.parse(self.expanded, mode="eval"), knobs, self.condition))
        except ZeroDivisionError:
            return True  # the preprocessor refuses it too
        except (RecursionError, MemoryError):  # nested past what is worth reading: leave it to NVRTC
            raise RestrictionError(f"#if {self.condition}: nested too deeply to read here") from None


_TWICE = "\0"  # the text of a macro defined more than once: which one applies is not read here
# A model writes the sources the tuner reads: macros that double at each level would
# expand to gigabytes, so an expansion past this many characters is not read.
MAX_EXPANDED = 4000


def _expand(text: str, macros: Mapping[str, str]) -> str:
    if any(macros.get(name) == _TWICE for name in _NAME.findall(text)):
        raise RestrictionError(f"#if {text}: a macro it uses is #defined more than once")
    for _ in range(32):  # macros defined through macros: expand until nothing changes
        expanded = _NAME.sub(lambda m: f"({macros[m.group()]})" if m.group() in macros else m.group(), text)
        if _TWICE in expanded:
            raise RestrictionError(f"#if {text}: a macro it uses is #defined more than once")
        if len(expanded) > MAX_EXPANDED:
            raise RestrictionError(f"#if {text[:80]}...: expands past {MAX_EXPANDED} characters")
        if expanded == text:
            return text
        text = expanded
    raise RestrictionError(f"#if {text}: macros nest deeper than 32")


@dataclass(frozen=True)
class KnobSpace:
    """The knobs a kernel declares and the configurations its source refuses."""

    knobs: dict[str, tuple[int, ...]]
    restrictions: tuple[Restriction, ...]

    @staticmethod
    def from_source(source: str, lenient: bool = False) -> "KnobSpace":
        """The source's space; `lenient`: a restriction that cannot be read is left out
        (the compiler still refuses what it forbids) instead of raising RestrictionError."""
        try:
            knobs = {k.name: k.values for k in parse_knobs(source).values()}
        except ValueError:  # a malformed // knob line: the launch rule refuses the kernel anyway
            if lenient:
                return KnobSpace({}, ())
            raise
        source = _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", source)
        found = [(m.group(1), m.group(2).strip()) for m in _MACRO.finditer(source)
                 if m.group(1) not in knobs and len(m.group(2)) <= MAX_LINE]
        twice = {name for name, n in Counter(name for name, _ in found).items() if n > 1}
        macros = {name: (_TWICE if name in twice else text) for name, text in found}
        restrictions: list[Restriction] = []
        for m in _IF_ERROR.finditer(source):
            condition = m.group(1).strip()
            if len(restrictions) >= MAX_RESTRICTIONS or len(condition) > MAX_LINE:
                if lenient:
                    continue
                raise RestrictionError(f"#if {condition[:80]}: past {MAX_RESTRICTIONS} restrictions or "
                                       f"{MAX_LINE} characters")
            try:
                expanded = _c_to_python(_expand(condition, macros))
                ast.parse(expanded, mode="eval")  # a syntax error names the source line here, not mid-tuning
                restriction = Restriction(condition, m.group(2).strip().strip('"'), expanded)
                if lenient:
                    restriction.refuses({k: v[0] for k, v in knobs.items()})  # names it cannot resolve: unreadable
            except Exception:  # noqa: BLE001 - lenient: whatever cannot be read is left to NVRTC
                if lenient:
                    continue
                raise
            restrictions.append(restriction)
        return KnobSpace(knobs, tuple(restrictions))

    def allows(self, values: Mapping[str, int]) -> bool:
        return not any(r.refuses(values) for r in self.restrictions)

    def configurations(self) -> list[dict[str, int]]:
        """Every combination of knob values the source accepts, in declaration order."""
        combos = (dict(zip(self.knobs, vs)) for vs in itertools.product(*self.knobs.values()))
        return [c for c in combos if self.allows(c)]
