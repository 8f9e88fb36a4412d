"""A kernel's knob space as its source declares it: `// knob` values and `#if ... #error`
restrictions read exactly, or not at all."""

from __future__ import annotations

import pytest

from warpsmith.agent.spec.knob_space import KnobSpace, RestrictionError

GUARDED = ("// knob A: 1 2 4\n#define A 1\n// knob B: 1 2 4\n#define B 1\n#define PRODUCT (A * B)\n"
           "#if PRODUCT > 4 || (B % A) != 0\n#error \"too big, or A does not divide B\"\n#endif\n")


def test_restrictions_refuse_what_the_preprocessor_would():
    space = KnobSpace.from_source(GUARDED)
    assert space.configurations() == [{"A": 1, "B": 1}, {"A": 1, "B": 2}, {"A": 1, "B": 4}, {"A": 2, "B": 2}]


def test_a_macro_defined_twice_is_not_guessed():
    """Which of two #defines applies depends on #if branches this reader does not follow:
    strict reading refuses to go on; lenient reading (the tuner's) leaves that restriction to NVRTC."""
    source = GUARDED.replace("#define PRODUCT (A * B)\n", "#if A > 1\n#define PRODUCT (A * B)\n#else\n#define PRODUCT 0\n#endif\n")
    with pytest.raises(RestrictionError, match="more than once"):
        KnobSpace.from_source(source)
    assert KnobSpace.from_source(source, lenient=True).restrictions == ()


def test_lenient_reading_keeps_the_readable_ones():
    source = GUARDED + "#if defined(FOO)\n#error \"foo\"\n#endif\n#if A == 4\n#error \"no 4\"\n#endif\n"
    space = KnobSpace.from_source(source, lenient=True)
    assert [r.condition for r in space.restrictions] == ["PRODUCT > 4 || (B % A) != 0", "A == 4"]
    assert not space.allows({"A": 4, "B": 4}) and space.allows({"A": 2, "B": 2})


def test_a_hostile_source_cannot_stall_the_reader():
    """Model-written sources reach this reader (the tuner tunes a model's kernel with knobs):
    macros that double at every level, and conditions nested thousands deep, are left
    unread at once instead of expanding to gigabytes or overflowing the stack."""
    doubling = "".join(f"#define M{i} (M{i + 1} + M{i + 1})\n" for i in range(40)) + "#define M40 A\n"
    source = "// knob A: 1 2\n#define A 1\n" + doubling + "#if M0 > 3\n#error \"boom\"\n#endif\n"
    with pytest.raises(RestrictionError, match="expands past"):
        KnobSpace.from_source(source)
    assert KnobSpace.from_source(source, lenient=True).restrictions == ()
    deep = "// knob A: 1 2\n#define A 1\n#if " + "(" * 3000 + "A" + ")" * 3000 + " > 1\n#error \"deep\"\n#endif\n"
    assert KnobSpace.from_source(deep, lenient=True).restrictions == ()
    chain = "// knob A: 1 2\n#define A 1\n#if " + " + ".join(["A"] * 1900) + " > 1\n#error \"long\"\n#endif\n"
    assert KnobSpace.from_source(chain, lenient=True).restrictions == ()  # 1900 operators deep once parsed
    short = "// knob A: 1 2\n#define A 1\n#if " + " + ".join(["A"] * 50) + " > 60\n#error \"long\"\n#endif\n"
    space = KnobSpace.from_source(short, lenient=True)  # an ordinary length is read and judged
    assert len(space.restrictions) == 1 and space.allows({"A": 1}) and not space.allows({"A": 2})


def test_long_blank_runs_and_open_comments_are_read_in_one_pass():
    """Inputs NVRTC compiles that could stall a backtracking reader: `#if` and 100 000 blanks (50 s where two
    quantifiers share the blanks) and a string of 40 000 "/* " (27 s where each open comment rescans the
    rest). Both read at once, and the restriction after them is still read."""
    blanks = "// knob A: 1 2\n#define A 1\n#if" + " " * 100_000 + "1\n#endif\n#if A == 2\n#error \"no 2\"\n#endif\n"
    space = KnobSpace.from_source(blanks, lenient=True)
    assert [r.condition for r in space.restrictions] == ["A == 2"]
    opened = ("// knob A: 1 2\n#define A 1\n#if A == 2\n#error \"no 2\"\n#endif\n__device__ const char s[] =\n"
              + "\n".join('"' + "/* " * 20 + '"' for _ in range(2000)) + ";\n")
    assert [r.condition for r in KnobSpace.from_source(opened, lenient=True).restrictions] == ["A == 2"]
    in_string = '// knob A: 1 2\n#define A 1\n__device__ const char g[] = "glob/*";\n#if A == 2\n#error "no 2"\n#endif\n'
    assert [r.condition for r in KnobSpace.from_source(in_string, lenient=True).restrictions] == ["A == 2"]
    quotes = '// knob A: 1 2\n#define A 1\n"' + '\\"' * 80_000 + '\n#if A == 2\n#error "no 2"\n#endif\n'  # one open string
    assert [r.condition for r in KnobSpace.from_source(quotes, lenient=True).restrictions] == ["A == 2"]


def test_values_are_read_as_the_preprocessor_reads_them():
    """intmax_t arithmetic with C's truncation, C's comparisons, comments unseen; a value
    past 64 bits (a float division would overflow, a big integer would take seconds) is
    not read, and the lenient reader leaves it to NVRTC instead of raising."""
    def refused(condition: str, a: int = 1, extra: str = "") -> bool:
        space = KnobSpace.from_source(f"// knob A: 1 2 4\n#define A 1\n{extra}#if {condition}\n#error \"no\"\n#endif\n")
        return not space.allows({"A": a})
    assert refused("1 < 3 < 2")  # C: (1 < 3) < 2 is true
    assert refused("9007199254740993 / 1 == 9007199254740993")  # exact, not via a float
    assert refused("-7 / 2 == -3 && -7 % 2 == -1")  # truncation toward zero
    assert not refused("A > 1", 1) and refused("A > 1", 2)
    commented = "// knob A: 1 2\n#define A 1\n/*\n#if A == 1\n#error \"in a comment\"\n#endif\n*/\n"
    assert KnobSpace.from_source(commented).restrictions == ()
    huge = "// knob A: 1 2\n#define A 1\n#if (" + "9" * 400 + " / 3) > A\n#error \"big\"\n#endif\n"
    with pytest.raises(RestrictionError, match="64 bits"):
        KnobSpace.from_source(huge).allows({"A": 1})
    assert KnobSpace.from_source(huge, lenient=True).restrictions == ()
    assert KnobSpace.from_source("// knob A: 1 " + "9" * 40 + "\n", lenient=True).knobs == {}
