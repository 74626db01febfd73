"""The formula language of the rule files (harness.build.formula): what it evaluates, what it
refuses, and that its errors name the formula."""

from __future__ import annotations

import pytest

from harness.build.formula import check, defined, evaluate
from harness.errors import FormulaError, MissingName


def test_recipe_formulas_are_safe():
    assert (
        evaluate("context_length + max(lags_sequence)", {"context_length": 8, "lags_sequence": [1, 7]}) == 15
    )
    with pytest.raises(FormulaError):
        evaluate("__import__('os')", {})
    with pytest.raises(FormulaError):
        evaluate("config.__class__", {"config": object()})
    with pytest.raises(NameError):
        evaluate("missing_field + 1", {})


class Level:
    """A config-like object: formulas read its attributes."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


SCOPE = {
    "batch": 2,
    "seq": 16,
    "arch": "BertForMaskedLM",
    "sizes": [3, 6, 12],
    "table": {"a": 5},
    "vision": Level(image_size=[64, 32], patch_size=16),
    "sub_config": {"hidden_size": 32},
    "unset": None,
}


@pytest.mark.parametrize(
    "text, value",
    [
        ("batch * seq // 4 + 1", 9),
        ("seq / batch - 2 ** 3 % 5", 5.0),
        ("-batch", -2),
        ("[batch, seq // 2] + ([1] if seq > 8 else [])", [2, 8, 1]),
        ("1 < batch <= seq", True),
        ("batch in sizes or not seq", False),
        ("batch == 2 and arch != 'X'", True),
        ("sizes[-1] + table['a']", 17),
        ("vision.image_size[0] // vision.patch_size", 4),
        ("sub_config.hidden_size * 2", 64),
        ("max(sizes) + min(sizes) + len(sizes) + sum(sizes) + prod(sizes)", 15 + 3 + 21 + 216),
        ("ceil(seq / 3) + int(2.5) + abs(-1) + bool(0)", 6 + 2 + 1),
        ("endswith(arch, 'ForMaskedLM') and not endswith(arch, 'Model')", True),
        ("list(sizes)", [3, 6, 12]),
        ("(batch, seq)", [2, 16]),
        ("1000", 1000),
    ],
)
def test_accepted_formulas_evaluate_over_the_scope(text, value):
    assert evaluate(text, SCOPE) == value


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "open('/etc/passwd')",
        "vision.__class__",
        "vision._private",
        "arch.upper()",
        "max(sizes, key=abs)",
        "max(*sizes)",
        "[x for x in sizes]",
        "lambda: 1",
        "sizes[0:2]",
        "(n := 3)",
        "f'{batch}'",
        "{'a': 1}",
        "batch if",
    ],
)
def test_refused_formulas_raise_an_error_naming_the_formula(text):
    with pytest.raises(FormulaError) as info:
        evaluate(text, SCOPE)
    assert repr(text) in str(info.value)
    with pytest.raises(FormulaError):
        check(text)  # the same refusal when a rule file loads


def test_a_missing_or_unset_name_means_the_formula_does_not_apply():
    for text, name in (
        ("missing_field + 1", "missing_field"),
        ("unset * 2", "unset"),
        ("vision.depth", "depth"),
    ):
        with pytest.raises(MissingName) as info:
            evaluate(text, SCOPE)
        assert isinstance(info.value, NameError) and info.value.name == name
        assert repr(text) in str(info.value)
        assert not defined(text, SCOPE)


def test_a_formula_failing_on_its_values_names_the_formula():
    for text in ("seq // (batch - 2)", "arch + seq", "sizes[7]", "table['b']", "arch[0]"):
        with pytest.raises(FormulaError) as info:
            evaluate(text, SCOPE)
        assert repr(text) in str(info.value)
        assert not defined(text, SCOPE)


def test_defined_is_whether_a_formula_holds():
    assert defined("seq > batch", SCOPE) and not defined("seq < batch", SCOPE)
    assert defined("True", {}) and not defined("sizes[0] > 3", SCOPE)


def test_a_value_that_is_no_formula_is_returned_as_it_is():
    assert evaluate(7, {}) == 7 and evaluate(None, {}) is None


def test_shrink_rules_and_input_recipes_use_the_one_evaluator():
    from harness.build import formula
    from harness.build.inputs import labels, media, processors, recipes
    from harness.build.shrink import derived

    for module in (derived, recipes, media, processors, labels):
        assert module.evaluate is formula.evaluate
