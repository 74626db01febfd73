"""The typed rules of model building: shrink_rules.yaml, input_recipes.yaml, train_mode.yaml.

Why typed: the shrinker and the input maker read these files in many places, and a misspelled
key must fail when the file loads, naming the file, the entry and the key, not be a rule that
silently never applies. Each file is loaded once (`contracts.rulefiles.cached_rules`) into the
models below, which forbid unknown keys; every formula is checked against the formula language
(`harness.build.formula`) as it loads. Sections that map config field names, model types or
class names to values are open by nature (a dict); their values are typed.

    >>> shrink_rules().targets.test_sequence_length
    16
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, JsonValue, model_validator

from contracts.rulefiles import Regex, Rules, cached_rules, resource
from harness.build import formula

SHRINK_RULES = "data/shrink_rules.yaml"
INPUT_RECIPES = "data/input_recipes.yaml"
TRAIN_MODE = "data/train_mode.yaml"


def _as_list(value: Any) -> Any:
    """One item or a list of them: a list."""
    return value if isinstance(value, list) else [value]


def _formula_text(value: Any) -> Any:
    """A number or boolean written where a formula goes is the formula of that constant."""
    return str(value) if isinstance(value, (bool, int, float)) else value


#: A formula of the formula language, checked as the file loads.
Formula = Annotated[str, BeforeValidator(_formula_text), AfterValidator(formula.check)]
#: One formula or a list of them (the first whose names the config has wins).
Formulas = Annotated[list[Formula], BeforeValidator(_as_list)]
#: Names written as one name or a list of them.
NameList = Annotated[list[str], BeforeValidator(_as_list)]
Modality = Literal["image", "video", "audio"]
LabelKind = Literal[
    "qa", "choice", "tokens", "ctc", "sequence", "detection", "detection_masks", "universal",
    "semantic", "spectrogram", "lm",
]  # fmt: skip


# ------------------------------------------------------------------------------ shrink_rules.yaml
class Targets(Rules):
    """Sizes of the shrunk model."""

    min_layers: int
    base_heads: int
    head_dim: int
    head_dim_many_heads: int
    min_hidden: int
    intermediate_multiplier: int
    vocab: int
    test_sequence_length: int
    image_patches_per_side: int
    max_position_embeddings: int
    audio_source_positions: int
    conv_channels: int
    state_size: int
    experts_min: int
    max_parameters: int


class LayerTies(Rules):
    """Layer counts and indices that must agree with the selected layers (shrink/layer_ties.py)."""

    partitions: list[list[str]]
    suffix_counts: list[str]
    tail_counts: list[str]
    multiples: list[str]
    foreign_indices: dict[str, str]  # index field -> the sub-config whose stack it indexes


class ExpertGroups(Rules):
    groups: str
    groups_per_token: str


class GenericHeads(Rules):
    count: str
    dim: str


class Ssm(Rules):
    """State-space (Mamba) fields and sizes."""

    state_fields: list[str]
    ssm_head_count_fields: list[str]
    ssm_head_dim_fields: list[str]
    expand_fields: list[str]
    ssm_inner_fields: list[str]
    group_fields: list[str]
    chunk_fields: list[str]
    dt_rank_fields: list[str]
    ssm_head_dim: int
    generic_head_fields: GenericHeads


class AudioShrink(Rules):
    source_position_fields: list[str]
    conv_channel_list_fields: list[str]
    conv_pos_embedding_fields: list[str]
    small_fields: dict[str, int]  # field -> its largest shrunk value


class DerivedWidths(Rules):
    """Widths the unshrunk config derives from a hidden width times a factor (shrink/derived.py)."""

    factor_fields: list[str]
    count_lists: list[str]
    suffixes: list[str]
    exclude_words: list[str]
    formulas: dict[str, dict[str, Formula]]  # model type -> field -> formula over its level


class ShrinkRules(Rules):
    """harness/data/shrink_rules.yaml: which config fields are which knob, and how small they get."""

    targets: Targets
    layer_count_fields: list[str]
    extra_layer_count_fields: list[str]
    prefix_fields: list[str]
    period_fields: list[str]
    offset_fields: list[str]  # kept as they are: listed so no rule takes them for a size
    index_list_suffixes: list[str]
    index_list_exclude: list[str]
    feature_taps: dict[str, int]  # field -> index of the first layer
    layer_ties: LayerTies
    head_pairs: list[tuple[str, str | None]]  # (query heads, key/value heads or none)
    hidden_fields: list[str]
    head_dim_fields: list[str]
    intermediate_fields: list[str]
    expert_intermediate_fields: list[str]
    expert_count_fields: list[str]
    experts_per_token_fields: list[str]
    fill_none_experts_per_token: int
    expert_group_fields: ExpertGroups
    mla: dict[str, int]  # field -> its largest shrunk value
    ssm: Ssm
    vocab_fields: list[str]
    token_id_suffixes: list[str]
    context_length_fields: list[str]
    context_patch_fields: list[str]
    context_patches: int
    window_fields: list[str]
    image_size_fields: list[str]
    patch_size_fields: list[str]
    output_stride_fields: list[str]
    image_grid_fields: list[str]
    image_token_count_fields: list[str]
    patch_count_keyed_fields: list[str]
    audio: AudioShrink
    stage_width_list_fields: list[str]
    stage_width_first: int
    stage_width_tie_suffixes: list[str]
    stage_depth_list_fields: list[str]
    stage_depth_max: int
    block_repeat_list_fields: list[str]
    depth_scale_fields: dict[str, float]  # field -> its largest value
    stage_head_list_fields: list[str]
    ties: list[tuple[str, str]]  # (field, the field, or "a+b" fields, it equalled)
    hidden_tie_suffixes: list[str]
    stage_width_scalar_tie_suffixes: list[str]
    width_list_tie_suffixes: list[str]
    derived_widths: DerivedWidths
    drop_fields: list[str]
    force_fields: dict[str, JsonValue]
    overrides: dict[str, dict[str, JsonValue]]  # model type -> field -> value
    references: dict[str, dict[str, str]]  # model type -> dotted path -> the path it equals
    drop_when_layers_change: list[str]
    fill_none_head_dim: list[str]
    fill_none_vocab: list[str]
    implicit_mrope_sections: dict[str, list[int]]  # model type prefix -> sections
    required_fields: dict[str, dict[str, JsonValue]]  # model type -> field -> value
    # sub-config model type -> name prefix -> the replacement sub-config
    replace_subconfigs: dict[str, dict[str, dict[str, JsonValue]]]


# ----------------------------------------------------------------------------- input_recipes.yaml
class ImageProcessorRules(Rules):
    """How an image processor is sized to the shrunk config."""

    attributes: dict[str, Formulas]  # processor attribute -> formula(s)
    size_attributes: list[str]
    size_keys: list[str]
    dynamic_resolution_attributes: list[str]
    layout_outputs: list[str]
    disable: list[str]
    by_class: dict[str, dict[str, Formulas]]  # class name -> attribute -> formula(s)
    call_by_class: dict[str, dict[str, Formulas]]  # class name -> call argument -> formula(s)


class ExtractorRules(Rules):
    """One feature extractor class's own settings (over the common ones)."""

    init: dict[str, Formulas] = Field(default_factory=dict)
    set: dict[str, Formulas] = Field(
        default_factory=dict
    )  # attributes set on the built extractor (may name `fe`)
    samples: Formulas | None = None
    frame_multiple: Formula | None = None


class AudioProcessorRules(Rules):
    """How a feature extractor is built and fed."""

    init: dict[str, Formulas]
    samples: Formulas
    second_sample_fraction: float
    multichannel_waveform: list[str]
    call: dict[str, JsonValue]
    by_class: dict[str, ExtractorRules]


class ProcessorClasses(Rules):
    """model type -> the class to use instead of the mapping's (null: none fits)."""

    image: dict[str, str | None] = Field(default_factory=dict)
    audio: dict[str, str | None] = Field(default_factory=dict)


class Processors(Rules):
    classes: ProcessorClasses
    layouts: dict[str, Literal["per_image_padded_patches", "target_grid_per_sample"]]
    image: ImageProcessorRules
    audio: AudioProcessorRules


class PairPrompts(Rules):
    kinds: list[LabelKind]
    token_fields: list[str]
    positions: Formula


class PlaceholderRule(Rules):
    """One modality's placeholder tokens in a multimodal prompt."""

    token_fields: list[str]
    feature_methods: list[str]
    token_methods: list[str] = Field(default_factory=list)
    count_fields: list[str] = Field(default_factory=list)
    pixel_input: NameList  # the first one present
    boundary_fields: list[tuple[str, str]] = Field(default_factory=list)
    pass_through: list[str]
    token_fields_by_type: dict[str, list[str]] = Field(default_factory=dict)
    count_messages: list[Regex] = Field(default_factory=list)


class SyntheticAudio(Rules):
    channel_fields: list[str]
    width_fields: list[str]
    mel_fields: list[str]
    feature_multipliers: list[str]
    frames: int
    hop_fields: list[str]


class VideoRules(Rules):
    inputs: list[str]
    frame_fields: list[str]
    default_frames: int
    pixel_values_is_video_when: Formula


class PointPrompt(Rules):
    method: str
    new_inputs: str


class TextPrompt(Rules):
    method: str
    ids: str
    mask: str
    length: int


class Sessions(Rules):
    annotation_suffix: str
    frames: int
    frame_index: int
    object_id: int
    point_prompt: PointPrompt
    text_prompt: TextPrompt
    call: dict[str, JsonValue]


class Alias(Rules):
    """Inputs the forward names differently from the processor's output."""

    when: Formula
    needs: list[str]
    map: dict[str, str]  # forward's name -> processor output


Fill = Literal["randn", "rand", "positive", "ids", "int", "ones", "zeros", "bool_mask", "tokens", "box"]


class Recipe(Rules):
    """One variant of a hand recipe for an input: it applies when `when` holds (without `when`:
    when every name its formulas use exists)."""

    when: Formula | None = None
    shape: Formula
    fill: Fill = "randn"
    high: Formula | None = None
    scale: Formula | None = None
    ratio: float = 0.5
    tokens: Formula | None = None
    dtype: Literal["long"] | None = None
    label: bool = False
    required_only: bool = False
    replaces_synthetic: bool = False
    through_kwargs: bool = False

    @model_validator(mode="after")
    def _tokens_for_a_tokens_fill(self) -> Recipe:
        if self.fill == "tokens" and self.tokens is None:
            raise ValueError("fill 'tokens' needs a `tokens` formula")
        return self


#: An input's recipe: one variant or a list of them (the first that applies wins).
Variants = Annotated[list[Recipe], BeforeValidator(_as_list)]


class DocstringShapes(Rules):
    dimensions: dict[str, str]  # docstring dimension name -> formula name
    integer_types: list[str]
    bool_types: list[str]
    token_id_names: Regex
    mask_names: Regex
    companions: list[str]


class LabelRule(Rules):
    suffix: NameList
    kind: LabelKind


class SpectrogramLabels(Rules):
    frames: Formula
    bins: Formula


class InputRecipes(Rules):
    """harness/data/input_recipes.yaml: how the inputs a model's forward takes are made."""

    processors: Processors
    image_size_by_type: dict[str, Formula]
    prompt_tokens: list[str]
    pair_prompts: PairPrompts
    min_backbone_image_size: int
    placeholders: dict[Modality, PlaceholderRule]
    modality_configs: dict[Modality, list[str]]
    synthetic_audio: SyntheticAudio
    video: VideoRules
    grid_patch_layouts: dict[str, Literal["merged_channels_last", "patches_channels_first"]]
    sessions: Sessions
    aliases: list[Alias]
    inputs: dict[str, Variants]  # input name -> its recipe
    by_model_type: dict[str, dict[str, Variants]]  # model type -> input name -> its recipe
    by_image_processor: dict[str, dict[str, Variants]]  # processor class -> input name -> recipe
    docstring_shapes: DocstringShapes
    labels: list[LabelRule]
    objects_per_image: int
    spectrogram_labels: SpectrogramLabels


# -------------------------------------------------------------------------------- train_mode.yaml
class PlaceholderFill(Rules):
    fields: list[str]
    needs_any: list[str]


class TrainModeRules(Rules):
    """harness/data/train_mode.yaml: what makes a shrunk config ready for a deterministic step."""

    zero_fields: list[Regex]
    fill_pad_token_id: bool
    fill_placeholder_token_ids: dict[Modality, PlaceholderFill]


# ---------------------------------------------------------------------------------------- loaders
def shrink_rules() -> ShrinkRules:
    return cached_rules(ShrinkRules, str(resource("harness", SHRINK_RULES)))


def input_recipes() -> InputRecipes:
    return cached_rules(InputRecipes, str(resource("harness", INPUT_RECIPES)))


def train_mode_rules() -> TrainModeRules:
    return cached_rules(TrainModeRules, str(resource("harness", TRAIN_MODE)))
