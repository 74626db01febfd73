"""The typed rules of model building (harness.build.rules): the bundled shrink rules, input
recipes and train-mode rules load into their models, once; a copy of a bundled file with a
misspelled key, a formula outside the language or a value of the wrong kind is a RuleFileError
naming the file, the entry and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.errors import RuleFileError
from contracts.rulefiles import load_rules, resource
from harness.build.rules import (
    INPUT_RECIPES,
    SHRINK_RULES,
    TRAIN_MODE,
    InputRecipes,
    ShrinkRules,
    TrainModeRules,
    input_recipes,
    shrink_rules,
    train_mode_rules,
)

FILES = {ShrinkRules: SHRINK_RULES, InputRecipes: INPUT_RECIPES, TrainModeRules: TRAIN_MODE}


def test_the_bundled_files_load_into_their_models_once():
    shrink, recipes, train = shrink_rules(), input_recipes(), train_mode_rules()
    assert isinstance(shrink, ShrinkRules) and isinstance(recipes, InputRecipes)
    assert isinstance(train, TrainModeRules)
    assert shrink_rules() is shrink and input_recipes() is recipes and train_mode_rules() is train
    # one item or a list of them reads as a list: a recipe's variants, a label rule's suffixes
    assert all(isinstance(v, list) for entry in recipes.by_model_type.values() for v in entry.values())
    assert all(isinstance(rule.suffix, list) for rule in recipes.labels)


def edited_copy(tmp_path: Path, model, old: str, new: str) -> Path:
    """A copy of the bundled rule file of `model` with one line edited."""
    text = resource("harness", FILES[model]).read_text()
    assert text.count(old) == 1, old
    path = tmp_path / Path(FILES[model]).name
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    "model, old, new, expected",
    [
        # a misspelled key, at the top level and in an entry
        (ShrinkRules, "\nvocab_fields:", "\nvocab_field:", ["entry (top level): unknown key 'vocab_field'"]),
        (ShrinkRules, "  min_layers: 2", "  min_layer: 2", ["entry targets: unknown key 'min_layer'"]),
        (
            ShrinkRules,
            "  generic_head_fields: {count: num_heads, dim: head_dim}",
            "  generic_head_fields: {count: num_heads, dims: head_dim}",
            ["entry ssm.generic_head_fields: unknown key 'dims'"],
        ),
        (
            InputRecipes,
            'input_ids: {shape: "[batch, seq]", fill: ids, high: "config.encoder_config.vocab_size"}',
            'input_ids: {shape: "[batch, seq]", fill: ids, hihg: "config.encoder_config.vocab_size"}',
            ["entry by_model_type.dia.input_ids.0: unknown key 'hihg'"],
        ),
        (
            InputRecipes,
            '    when: "endswith(arch, \'ForMaskedLM\')"\n      shape: "[batch, max_position_embeddings]"',
            '    wen: "endswith(arch, \'ForMaskedLM\')"\n      shape: "[batch, max_position_embeddings]"',
            ["entry by_model_type.perceiver.input_ids.0: unknown key 'wen'"],
        ),
        (
            InputRecipes,
            "  token_fields: [sep_token_id]",
            "  token_field: [sep_token_id]",
            [
                "entry pair_prompts: unknown key 'token_field'",
                "entry pair_prompts: missing key 'token_fields'",
            ],
        ),
        (
            TrainModeRules,
            "fill_pad_token_id: true",
            "fill_pad_token: true",
            ["unknown key 'fill_pad_token'", "missing key 'fill_pad_token_id'"],
        ),
        (
            TrainModeRules,
            "  image: {fields: [image_token_id, image_token_index], needs_any:",
            "  image: {field: [image_token_id, image_token_index], needs_any:",
            ["entry fill_placeholder_token_ids.image: unknown key 'field'"],
        ),
        # a formula outside the language, named with its key
        (
            InputRecipes,
            'positions: "[seq // 4, seq // 4 + 1, seq - 4]"',
            "positions: \"__import__('os').getcwd()\"",
            ["entry pair_prompts: key 'positions'", "__import__"],
        ),
        (
            ShrinkRules,
            'neucodec: {quantization_dim: "hidden_size + semantic_model_config.hidden_size"}',
            'neucodec: {quantization_dim: "hidden_size + semantic_model_config._hidden"}',
            ["entry derived_widths.formulas.neucodec: key 'quantization_dim'", "private attribute '_hidden'"],
        ),
        # values of the wrong kind: a fill no recipe knows, a modality, a regular expression
        (
            InputRecipes,
            '    - shape: "[batch, context_length]"\n      fill: zeros',
            '    - shape: "[batch, context_length]"\n      fill: zeroes',
            ["entry inputs.past_values_padding.0: key 'fill'"],
        ),
        (
            InputRecipes,
            "modality_configs:\n  image:",
            "modality_configs:\n  imgae:",
            ["entry modality_configs.imgae"],
        ),
        (TrainModeRules, '  - "^drop_rate$"', '  - "^drop_rate($"', ["entry zero_fields: key '5'"]),
    ],
    ids=[
        "shrink-top-level",
        "shrink-targets",
        "shrink-ssm-heads",
        "recipe-variant",
        "recipe-when",
        "pair-prompts",
        "train-top-level",
        "train-placeholder",
        "refused-formula",
        "private-attribute",
        "unknown-fill",
        "unknown-modality",
        "bad-regex",
    ],
)
def test_a_bad_rule_file_names_the_file_the_entry_and_the_key(tmp_path, model, old, new, expected):
    path = edited_copy(tmp_path, model, old, new)
    with pytest.raises(RuleFileError) as info:
        load_rules(model, path)
    text = str(info.value)
    assert text.startswith(f"{path}: ")
    for part in expected:
        assert part in text


def test_a_tokens_fill_without_its_tokens_is_refused(tmp_path):
    path = edited_copy(
        tmp_path,
        InputRecipes,
        '      tokens: "[1]"\n',
        "",
    )
    with pytest.raises(RuleFileError) as info:
        load_rules(InputRecipes, path)
    assert "entry inputs.question_positions: key '0'" in str(info.value)
    assert "fill 'tokens' needs a `tokens` formula" in str(info.value)
