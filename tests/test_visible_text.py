"""Model-written text on its way to a terminal, a widget or a report: terminal escapes shown,
not obeyed; launch rules nested past the stack refused in one line; knob names that fit an
MLflow key."""

from __future__ import annotations

import pytest

from warpsmith.agent.spec.expr import MAX_DEPTH, Expr, ExprError
from warpsmith.agent.spec.kernel_source import KNOB_NAME_MAX, parse_knobs
from warpsmith.agent.spec.visible_text import visible
from warpsmith.agent.tracking.best_kernel import _one_line


def test_terminal_escapes_are_shown_not_obeyed():
    hostile = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]52;c;aGk=\x07\r\x9b1m ok\tkept\nnext"
    shown = visible(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown and "\x9b" not in shown
    assert shown.startswith("\\x1b[2J") and shown.endswith(" ok\tkept\nnext")


def test_a_rationale_stays_on_one_line_of_the_report():
    assert _one_line("fast\n\n# FAKE 99x faster\n[click](https://attacker.example/x)\x1b[2J") == \
        "fast # FAKE 99x faster [click](https://attacker.example/x)\\x1b[2J"
    assert _one_line("") == "-"


@pytest.mark.parametrize("text", ["+" * 400 + "ceil_div(N, BN)", "-" * 200 + "N",
                                  "min(" * 66 + "N" + ",1)" * 66])
def test_a_launch_rule_nested_past_the_limit_is_one_expr_error(text):
    with pytest.raises(ExprError, match="nests"):
        Expr.parse(text)


def test_a_launch_rule_within_the_limit_parses():
    assert Expr.parse("+" * (MAX_DEPTH - 2) + "N").evaluate({"N": 3}) == 3


def test_a_knob_name_longer_than_an_mlflow_key_allows_is_refused():
    with pytest.raises(ValueError, match="at most"):
        parse_knobs(f"// knob {'K' * (KNOB_NAME_MAX + 1)}: 1 2\n")
    assert list(parse_knobs(f"// knob {'K' * KNOB_NAME_MAX}: 1 2\n")) == ["K" * KNOB_NAME_MAX]
