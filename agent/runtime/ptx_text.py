"""PTX as ptxas reads it, for the audits (agent/runtime/ptx_audit.py, ptx_parameters.py):
strings and comments out, the debug-line directives out, blanks collapsed, and blanks
around a modifier's dot closed up (`add .rn .bf16` is add.rn.bf16 to ptxas)."""

from __future__ import annotations

import re

# Strings and comments in one left-to-right pass: a '/*' inside a '//' comment opens nothing.
# A string ends at the next quote: ptxas reads a backslash in one as itself, so `"a\"` is a
# whole string to it (reading `\"` as an escaped quote would hide `.pragma "x\"; add.bf16 ...;
# .pragma "x";`'s add inside one long string).
# Nor does a newline end one: ptxas reads a string across lines (else an add between
# `.pragma "a` and `b"` on the next line would hide).
_LEX = re.compile(r'"[^"]*"|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
# The debug-line directives end at the line's end, not at a `;`: with the lines joined, `.loc 1 1 0` would
# take the next instruction into a "directive" the parameter audit skips (as with -lineinfo).
# Their exact forms are removed while the lines still stand; any other spelling is refused (parameter_reach).
_LINE_DIRECTIVES = re.compile(r"\.loc[ \t]+\d+[ \t]+\d+[ \t]+\d+"
                              r"(?:[ \t]*,[ \t]*function_name[ \t]+[\w$]+(?:[ \t]*\+[ \t]*\d+)?)?"
                              r"(?:[ \t]*,[ \t]*inlined_at[ \t]+\d+[ \t]+\d+[ \t]+\d+)?[ \t]*(?=\n|$)"
                              r"|\.file[ \t]+\d+[ \t]+\"\"(?:[ \t]*,[ \t]*\d+[ \t]*,[ \t]*\d+)?[ \t]*(?=\n|$)")


def normalised(ptx: str) -> str:
    code = _LEX.sub(lambda t: '""' if t.group(0).startswith('"') else " ", ptx)
    code = _LINE_DIRECTIVES.sub(" ", code)
    # Blanks collapsed first: the dot rule over a long run of them is quadratic (a hostile
    # source's macros can double a blank to 262 144 of them: 150 s).
    code = re.sub(r"\s+", " ", code)
    return re.sub(r" ?\. ?(?=[A-Za-z_])", ".", code)  # 'add .rn .bf16' is add.rn.bf16 to ptxas
