"""An array dimension as an expression of the sizes, from the values it took as the sizes moved."""

from __future__ import annotations

import pytest

from warpsmith.agent.spec.expr import Expr
from warpsmith.agent.spec.shape_fit import fit_dim, fit_one


def _sweep(f, values):
    return [(x, f(x)) for x in values]


@pytest.mark.parametrize("f,expected", [
    (lambda h: h, "H"),
    (lambda h: h - 2, "H - 2"),  # a 3-wide convolution, no padding
    (lambda h: (h + 2 * 1 - 3) // 2 + 1, "(H + 1) // 2"),  # stride 2, padding 1
    (lambda h: (h - 1) * 2 - 2 * 1 + 3 + 1, "2 * H"),  # a transposed convolution
    (lambda h: (h - 1) * 3 + 5, "3 * H + 2"),
    (lambda h: h // 4, "H // 4"),  # pooling by 4
])
def test_one_size_forms(f, expected):
    """Convolution, pooling and transposed-convolution lengths come back as the expressions they are."""
    fit = fit_one("H", _sweep(f, range(9, 30)))
    assert fit is not None and fit.text() == expected


def test_too_few_points_or_a_contradiction_is_no_fit():
    """Two points are not enough, and one x with two values fits nothing."""
    assert fit_one("H", [(3, 3), (4, 4)]) is None
    assert fit_one("H", [(3, 3), (4, 4), (5, 5), (5, 6)]) is None


def test_a_dimension_moved_by_several_sizes_is_their_product():
    """A flattened C * (H // 2) * (W // 2) is found from one-size sweeps and met at points where all moved."""
    f = lambda s: s["C"] * (s["H"] // 2) * (s["W"] // 2)
    base = {"C": 3, "H": 11, "W": 13}
    sweeps = {n: [(x, f({**base, n: x})) for x in range(base[n], base[n] + 9)] for n in base}
    joint = [({"C": 5, "H": 17, "W": 9}, f({"C": 5, "H": 17, "W": 9}))]
    found = fit_dim(base, f(base), sweeps, joint)
    assert found is not None and all(Expr.parse(found).evaluate_int(s) == f(s) for s in [base, *[j for j, _ in joint]])


def test_a_sum_of_sizes():
    """torch.cat along a dimension: M + N."""
    base = {"M": 5, "N": 7}
    sweeps = {"M": [(x, x + 7) for x in range(5, 14)], "N": [(x, 5 + x) for x in range(7, 16)]}
    assert fit_dim(base, 12, sweeps, [({"M": 20, "N": 30}, 50)]) == "M + N"


def test_a_dimension_no_size_moves_is_its_number_and_an_unwritable_one_is_none():
    """A constant dimension is its value; one that fits no form (a square) is None, for the caller to fix."""
    assert fit_dim({"N": 5}, 3, {"N": [(5, 3), (6, 3), (7, 3)]}, []) == "3"
    assert fit_dim({"N": 5}, 25, {"N": [(x, x * x) for x in range(5, 14)]}, []) is None


def test_a_fit_the_joint_points_contradict_is_refused():
    """The problem's own sizes must meet the expression too: a fit that holds only near the base is None."""
    base = {"N": 5}
    sweeps = {"N": [(x, x) for x in range(5, 14)]}
    assert fit_dim(base, 5, sweeps, [({"N": 4096}, 4000)]) is None


def test_a_multiple_of_a_floor():
    """Pooling by 2 then upsampling by 2: 2 * (D // 2), which no (a*D + b) // c writes."""
    f = lambda d: 2 * (d // 2)
    sweep = [(x, f(x)) for x in range(5, 29)]
    found = fit_dim({"D": 5}, f(5), {"D": sweep}, [({"D": 32}, 32)])
    assert found is not None and all(Expr.parse(found).evaluate_int({"D": x}) == f(x) for x in range(2, 200))
