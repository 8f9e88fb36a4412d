"""The whitelisted expression evaluator for launch rules, shapes and formulas."""

import pytest

from warpsmith.agent.spec.expr import Expr, ExprError


@pytest.mark.parametrize("text,env,value", [
    ("ceil_div(N, 16)", {"N": 100}, 7),
    ("ceil_div(N, 16)", {"N": 96}, 6),
    ("(BM / TM) * (BN / TN)", {"BM": 64, "TM": 8, "BN": 128, "TN": 4}, 256),
    ("round_up(K, 32) - K", {"K": 61}, 3),
    ("min(M, 1024) + max(1, N // 2) % 7", {"M": 5000, "N": 30}, 1025),
    ("-N + 2 * N", {"N": 9}, 9),
    ("max(N) + min(K)", {"N": 9, "K": 2}, 11),  # one value: itself (a KernelBench import writes max(N))
    (128, {}, 128),
])
def test_evaluates_whitelisted_arithmetic(text, env, value):
    """Numbers, names, + - * / // %, ceil_div, round_up, min, max evaluate exactly."""
    assert Expr.parse(text).evaluate(env) == value


def test_integer_division_stays_integer():
    """128 / 8 is the int 16, so launch dimensions stay exact."""
    v = Expr.parse("BM / TM").evaluate({"BM": 128, "TM": 8})
    assert v == 16 and isinstance(v, int)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "N.bit_length()", "N ** 2", "[N]", "N if N else 1",
    "lambda: 1", "open('x')", "'text'", "N < 2", "True", "f(N)", "ceil_div(N, d=2)",
])
def test_rejects_everything_else(text):
    """Calls, attributes, powers, comparisons, strings and literals other than numbers are refused at parse time."""
    with pytest.raises(ExprError):
        Expr.parse(text)


def test_unknown_name_says_what_is_known():
    """A missing size names itself and lists the names that are defined."""
    with pytest.raises(ExprError, match="uses 'Q'.*known: M, N"):
        Expr.parse("ceil_div(Q, 16)").evaluate({"M": 1, "N": 2})


def test_non_integer_launch_dimension_is_an_error():
    """A launch dimension of 6.25 is refused with a hint to use // or ceil_div."""
    with pytest.raises(ExprError, match="not a whole number"):
        Expr.parse("N / 16").evaluate_int({"N": 100})


def test_division_by_zero_is_an_expr_error():
    """Division by zero is an ExprError, not a ZeroDivisionError escaping to the user."""
    with pytest.raises(ExprError):
        Expr.parse("ceil_div(N, T)").evaluate({"N": 1, "T": 0})


def test_names_lists_free_variables():
    """names() lists the sizes and knobs an expression needs, not function names."""
    assert Expr.parse("ceil_div(N, BN) * min(M, 2)").names() == {"N", "BN", "M"}


def _as_python(expr: Expr):
    """The generated Python of `expr` as a function of the env (test-written expressions only)."""
    from warpsmith.agent.spec.expr import PYTHON_HELPERS
    namespace: dict = {}
    exec(PYTHON_HELPERS + f"\ndef f(v):\n    return {expr.python(lambda n: f'v[{n!r}]')}\n", namespace)
    return namespace["f"]


@pytest.mark.parametrize("text,env", [
    ("ceil_div(N, 16)", {"N": 100}), ("(BM / TM) * (BN / TN)", {"BM": 64, "TM": 8, "BN": 128, "TN": 4}),
    ("round_up(K, 32) - K", {"K": 61}), ("min(M, 1024) + max(1, N // 2) % 7", {"M": 5000, "N": 30}),
    ("-N + 2 * N", {"N": 9}), ("N / 16", {"N": 100}), ("+N - -3 // 2", {"N": 4}), ("2.5 * N", {"N": 3}),
    ("ceil_div(rows, 1 + WARP_ROW * (BLOCK / 32 - 1))", {"rows": 1000, "WARP_ROW": 1, "BLOCK": 256}),
    (128, {}),
])
def test_python_translation_computes_what_the_evaluator_does(text, env):
    """Expr.python() gives the same value and type as evaluate(), exact integer division included."""
    e = Expr.parse(text)
    got, want = _as_python(e)(env), e.evaluate(env)
    assert got == want and type(got) is type(want)


def test_python_translation_is_built_from_the_tree_not_the_text():
    """A comment in an expression's text reaches neither the generated code nor the shown form."""
    e = Expr.parse("ceil_div(N, 16)  # '''; import os")
    assert e.python(lambda n: f"v[{n!r}]") == "_ceil_div(v['N'], 16)"
    assert e.shown() == "ceil_div(N, 16)"


def test_python_translation_keeps_zero_divisor_errors():
    """A zero divisor in generated code is a one-line ValueError, like the evaluator's ExprError."""
    with pytest.raises(ValueError, match="ceil_div by zero"):
        _as_python(Expr.parse("ceil_div(N, T)"))({"N": 1, "T": 0})


def test_python_translation_refuses_infinity():
    """1e999 parses to inf, which Python source cannot write back: refused, not written as a name."""
    with pytest.raises(ExprError, match="cannot be written"):
        Expr.parse("N * 1e999").python(lambda n: n)


def test_an_overflow_is_an_expression_error_in_one_line():
    """A 400-digit constant divided into a float overflows; as an OverflowError it would escape the launch
    checks (which catch ValueError), so it is an ExprError, a ValueError."""
    with pytest.raises(ExprError, match="too large"):
        Expr.parse("9" * 400 + " / 7").evaluate({})


def test_one_value_min_and_max_in_generated_python():
    """The exported Python form of max(N) is N itself, as the evaluator computes it."""
    from warpsmith.agent.spec.expr import PYTHON_HELPERS
    e = Expr.parse("max(N) * min(K, 3)")
    scope: dict = {}
    exec(PYTHON_HELPERS, scope)
    assert eval(e.python(lambda n: f"env[{n!r}]"), {**scope, "env": {"N": 5, "K": 7}}) == 15 == e.evaluate({"N": 5, "K": 7})
