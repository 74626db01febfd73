"""Valid, deterministic inputs for a tiny model, in the layout it gets in production.

The forward signature says which inputs exist; the model type's own image processor / feature
extractor (built from its defaults, sized to the shrunk config, fed seeded synthetic images,
frames or waveforms) makes the pixel and audio inputs; hand recipes (data:
``harness/data/input_recipes.yaml``) make what no processor makes (time series, task prompts,
SAM prompts); the generic synthesizer makes token ids (no tokenizer files exist offline: ids
avoid every special/placeholder id, the second sample is right-padded with the pad id), masks and
whatever else is left. Multimodal prompts carry exactly as many placeholders as the model's own
``get_image_features`` / ``get_video_features`` return. The class name says which labels the
head's loss needs. ``ModelInputs.sources`` records who produced each input.

    >>> batch = make_inputs(model, config, "BertForMaskedLM", seed=0)
    >>> model(**batch.kwargs).loss
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.build.formula import defined, evaluate
from harness.build.inputs.base import (
    BATCH,
    CHOICES,
    ConfigScope,
    Maker,
    ModelInputs,
    forward_parameters,
    get,
    required_inputs,
)
from harness.build.inputs.docshapes import docstring_input, documented_unused
from harness.build.inputs.labels import (
    add_labels,
    label_kind,
    loss_missing_arguments,
    refused_labels,
    returns_no_loss,
)
from harness.build.inputs.media import add_audio, add_images, add_videos, image_shape, takes_clips
from harness.build.inputs.placeholders import add_placeholders
from harness.build.inputs.recipes import recipe_input, through_kwargs_names, type_recipe_names
from harness.build.inputs.sessions import add_sessions
from harness.build.rules import input_recipes, shrink_rules

__all__ = [
    "BATCH",
    "CHOICES",
    "STEPS",
    "Build",
    "ModelInputs",
    "Step",
    "image_shape",
    "make_inputs",
    "special_token_ids",
]


def special_token_ids(config) -> set[int]:
    ids: set[int] = set()
    suffixes = tuple(shrink_rules().token_id_suffixes) + ("pad_token_id", "bos_token_id", "eos_token_id")

    def walk(d: dict) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            elif isinstance(k, str) and k.endswith(suffixes):
                if isinstance(v, int) and not isinstance(v, bool):
                    ids.add(v)
                elif isinstance(v, list):
                    ids.update(x for x in v if isinstance(x, int))

    walk(config.to_dict())
    return ids


@dataclass
class Build:
    """What the steps of `make_inputs` share: the model and its config, the forward's parameters,
    the seeded maker, and the inputs made so far (`out`)."""

    model: Any
    config: Any
    architecture: str
    params: dict[str, inspect.Parameter]
    maker: Maker
    scope: ConfigScope
    out: ModelInputs
    sig: set[str]  # the forward's parameter names
    labels_wanted: set[str]  # the names labels may take (the label checks narrow it)
    recipe_labels: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, model, config, architecture: str, seed: int, seq: int) -> Build:
        params = forward_parameters(model)
        sig = set(params) - {"self", "kwargs", "args"}
        m = Maker(config, seed, seq, special_token_ids(config))
        scope = ConfigScope(config, batch=BATCH, seq=seq, vocab=m.vocab, arch=architecture)
        return cls(model, config, architecture, params, m, scope, ModelInputs(kwargs={}), sig, set(sig))

    @property
    def model_type(self) -> str:
        return str(getattr(self.config, "model_type", "") or "")

    @functools.cached_property
    def required(self) -> set[str]:
        return required_inputs(self.params)

    @functools.cached_property
    def with_aliases(self) -> set[str]:
        """The forward's names and the processor outputs an alias renames into them
        (image_grid_thw -> grid_thw): the media builders keep those so the rename finds them."""
        return self.sig | _alias_sources(self.sig, self.scope)


@dataclass(frozen=True)
class Step:
    """One named step of `make_inputs`, and why it runs where it does."""

    name: str
    run: Callable[[Build], None]
    why: str


def _text(b: Build) -> None:
    out, m, config, sig, architecture = b.out, b.maker, b.config, b.sig, b.architecture
    if "input_ids" not in sig:
        return
    kw = out.kwargs
    shape = (BATCH, CHOICES, m.seq) if label_kind(architecture) == "choice" else (BATCH, m.seq)
    ids = m.ids(*shape)
    mask = m.mask(*shape)
    eos = get(m.text, "eos_token_id", default=get(config, "eos_token_id"))
    eos = eos[0] if isinstance(eos, list) and eos else eos
    if getattr(config, "is_encoder_decoder", False) and isinstance(eos, int) and 0 <= eos < m.vocab:
        # a seq2seq tokenizer ends every sample with eos (BART-style classification pools it)
        last = mask.sum(-1, keepdim=True) - 1
        ids = ids.scatter(-1, last, eos)
    ids = _prompt_tokens(ids, config, m)
    ids = _pair_separators(ids, config, m, architecture)
    kw["input_ids"] = m.pad_ids(ids, mask) if "attention_mask" in sig else ids
    out.sources["input_ids"] = "synthetic"
    if "attention_mask" in sig:
        kw["attention_mask"] = mask
        out.sources["attention_mask"] = "synthetic"
    if "token_type_ids" in sig:
        kw["token_type_ids"] = torch.zeros(*shape, dtype=torch.long)
        out.sources["token_type_ids"] = "synthetic"


def _prompt_tokens(ids: torch.Tensor, config, m: Maker) -> torch.Tensor:
    """Marker tokens a prompt holds once per sample (the config names the id; the synthetic ids
    avoid it): Splinter's span selection reads at its `[QUESTION]` token and refuses a sample
    without one. Put at position 1, inside every sample's unpadded part."""
    for name in input_recipes().prompt_tokens:
        token = get(m.text, name, default=get(config, name))
        if (
            isinstance(token, int)
            and not isinstance(token, bool)
            and 0 <= token < m.vocab
            and ids.shape[-1] > 2
        ):
            ids = ids.clone()
            ids[..., 1] = token
    return ids


def _pair_separators(ids: torch.Tensor, config, m: Maker, architecture: str) -> torch.Tensor:
    """A question/context pair for the heads that read one (`pair_prompts`): the separator token
    at the same positions of every sample (and choice)."""
    rule = input_recipes().pair_prompts
    if label_kind(architecture) not in rule.kinds:
        return ids
    token = next(
        (
            t
            for name in rule.token_fields
            for t in [get(m.text, name, default=get(config, name))]
            if t is not None
        ),
        None,
    )
    if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < m.vocab:
        return ids
    positions = [int(p) for p in evaluate(rule.positions, ConfigScope(config, seq=ids.shape[-1]))]
    if (
        not positions
        or len(set(positions)) != len(positions)
        or not all(0 < p < ids.shape[-1] for p in positions)
    ):
        return ids
    ids = ids.clone()
    ids[..., positions] = token
    return ids


def _alias_sources(sig: set[str], scope: ConfigScope) -> set[str]:
    """Processor outputs an alias renames into the forward's names (image_grid_thw -> grid_thw):
    the builders keep them so the rename finds them."""
    return {
        source
        for rule in input_recipes().aliases
        if set(rule.needs) <= sig and defined(rule.when, scope)
        for target, source in rule.map.items()
        if target in sig
    }


def _images(b: Build) -> None:
    add_images(b.out, b.maker, b.config, b.scope, b.with_aliases, b.model_type, clips=takes_clips(b.model))


def _videos(b: Build) -> None:
    add_videos(b.out, b.maker, b.config, b.scope, b.sig, b.model_type)


def _audio(b: Build) -> None:
    add_audio(b.out, b.maker, b.config, b.scope, b.with_aliases, b.model_type)


def _sessions(b: Build) -> None:
    add_sessions(b.out, b.model, b.config, b.maker)


def _aliases(b: Build) -> None:
    out, sig, scope = b.out, b.sig, b.scope
    for rule in input_recipes().aliases:
        if not set(rule.needs) <= sig or not defined(rule.when, scope):
            continue
        for target, source in rule.map.items():
            if target in sig and target not in out.kwargs and source in out.kwargs:
                out.kwargs[target] = out.kwargs.pop(source)
                out.sources[target] = out.sources.pop(source, "synthetic")


def _recipes(b: Build) -> None:
    out, m, model_type, scope, required = b.out, b.maker, b.model_type, b.scope, b.required
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in b.params.values())
    sig = b.sig | (through_kwargs_names(model_type) if takes_kwargs else set())
    labels = b.recipe_labels
    own = {n for n in type_recipe_names(model_type) if n in sig}
    for name in sorted((sig - set(out.kwargs)) | own):
        made = recipe_input(name, model_type, m, scope, required=name in required)
        if made is None:
            continue
        tensor, key, is_label = made
        if name == "input_ids" and "attention_mask" in out.kwargs:  # keep the padding consistent
            out.kwargs["attention_mask"] = m.mask(*tensor.shape[:2])  # (batch, seq[, codebooks])
            if (
                tensor.dim() == 2 and m.pad is not None and m.pad <= int(tensor.max())
            ):  # else another vocab's pad (Dia's
                tensor = m.pad_ids(tensor, out.kwargs["attention_mask"])  # decoder's, not its encoder's)
        out.kwargs[name] = tensor
        out.sources[name] = f"recipe:{key}"
        if is_label:
            labels.append(name)


_EXCLUSIVE = (
    re.compile(r"if (\w+) is not None and (\w+) is not None:\s*\n\s*raise "),
    re.compile(r"`(\w+)` and `(\w+)` are mutually exclusive"),
)
# an input the forward takes as the embeddings (Pop2Piano: `inputs_embeds = input_features`)
# excludes the token ids, as embeddings do
_EMBEDS_ALIAS = re.compile(r"^\s*inputs_embeds = (\w+)\s*$", re.M)


def _exclusive(b: Build) -> None:
    """Inputs the forward refuses together (Molmo2: images or videos, not both) or says are
    mutually exclusive (SeamlessM4T: speech or text, one attention mask), token ids next to an
    input it takes as the embeddings (Pop2Piano's features): the later one is left out. Read from
    the forward's own `if a is not None and b is not None: raise` or its warning. Token ids left
    out take their mask along; the audio's own mask, set aside while the text's held the name,
    becomes the attention mask."""
    out, model = b.out, b.model
    for owner in (model, getattr(model, "model", None)):
        try:
            source = inspect.getsource(type(owner).forward) if owner is not None else ""
        except (OSError, TypeError):
            continue
        pairs = [pair for pattern in _EXCLUSIVE for pair in pattern.findall(source)]
        pairs += [(name, "input_ids") for name in _EMBEDS_ALIAS.findall(source)]
        for first, second in pairs:
            if first in out.kwargs and second in out.kwargs:
                out.kwargs.pop(second)
                out.sources.pop(second, None)
                out.notes.append(f"no {second}: the forward refuses it together with {first}")
                if second == "input_ids" and "attention_mask" in out.kwargs:
                    mask = out.set_aside.pop("audio_attention_mask", None)
                    if mask is None:
                        out.kwargs.pop("attention_mask")
                        out.sources.pop("attention_mask", None)
                    else:
                        out.kwargs["attention_mask"] = mask
                        out.sources["attention_mask"] = out.sources.get(first, "processor")


def _documented(b: Build) -> None:
    """Required inputs still missing, in the shape the forward's docstring gives them; once one
    is made that way, the forward's documented mask too (its length may differ from the
    embeddings': a drafter attends over context + block)."""
    out, model, m, scope, required = b.out, b.model, b.maker, b.scope, b.required
    rules = input_recipes().docstring_shapes
    made = False
    for name in sorted(required - set(out.kwargs)) + list(rules.companions):
        if name in out.kwargs or (name not in required and not made):
            continue
        tensor = docstring_input(model.forward, name, m, scope, rules)
        if tensor is not None:
            out.kwargs[name] = tensor
            out.sources[name] = "docstring"
            made = True


def _decoder(b: Build) -> None:
    out, m, config, sig, architecture = b.out, b.maker, b.config, b.sig, b.architecture
    kw = out.kwargs
    if "decoder_input_ids" not in sig or "decoder_input_ids" in kw:  # a recipe made them (Dia's codes)
        return
    if (
        getattr(config, "is_encoder_decoder", False)
        and "input_ids" in kw
        and label_kind(architecture) in ("sequence", "qa", "tokens")
    ):
        # classification heads pool decoder states at the input's eos positions, and token
        # classification labels each input position from the decoder's: the decoder sees the
        # input shifted right, as the model would build it itself
        start = get(config, "decoder_start_token_id", "pad_token_id", default=0)
        ids = kw["input_ids"]
        kw["decoder_input_ids"] = torch.cat([torch.full_like(ids[:, :1], int(start)), ids[:, :-1]], dim=1)
        out.sources["decoder_input_ids"] = "synthetic:shifted_input_ids"
        return
    from_media = any(str(out.sources.get(k, "")).startswith("processor:") for k in kw)
    if (getattr(config, "is_encoder_decoder", False) and "input_ids" in kw) or (
        "input_features" in kw
        or "input_values" in kw
        or (("pixel_values" in kw or from_media) and "input_ids" not in kw)
    ):
        kw["decoder_input_ids"] = m.ids(BATCH, m.seq // 2)
        out.sources["decoder_input_ids"] = "synthetic"


def _unused(b: Build) -> None:
    """Inputs the forward's docstring says it does not use (it may still hand them on)."""
    for name in sorted(documented_unused(b.model.forward) & set(b.out.kwargs)):
        b.out.kwargs.pop(name)
        b.out.sources.pop(name, None)
        b.out.notes.append(f"no {name}: the forward's docstring says it is not used")


def _placeholders(b: Build) -> None:
    add_placeholders(b.out, b.model, b.config, b.sig, input_recipes().placeholders)


def _flags(b: Build) -> None:
    if "use_cache" in b.sig:
        b.out.kwargs["use_cache"] = False
    if "return_dict" in b.sig:
        b.out.kwargs["return_dict"] = True


def _label_checks(b: Build) -> None:
    """Labels a head cannot take: its forward refuses them, returns no loss, or calls a loss that
    needs an argument it never passes. The head then gets none (the surrogate loss runs)."""
    model, out = b.model, b.out
    refused = refused_labels(model)
    if refused:
        b.labels_wanted -= refused
        out.notes.append(f"no labels: the forward refuses {', '.join(sorted(refused))} (no training loss)")
    elif "labels" in b.labels_wanted and returns_no_loss(model):
        b.labels_wanted -= {"labels"}
        out.notes.append("no labels: the forward's output has no loss")
    elif "labels" in b.labels_wanted and (missing := loss_missing_arguments(model)):
        b.labels_wanted -= {"labels"}
        out.notes.append(
            f"no labels: the head's loss function needs {missing}, which its forward never passes"
        )


def _labels(b: Build) -> None:
    out = b.out
    wanted = b.labels_wanted - set(b.recipe_labels)
    out.labels = add_labels(b.maker, b.architecture, b.config, out.kwargs, wanted) + b.recipe_labels
    for name in out.labels:
        out.sources.setdefault(name, "synthetic")


#: The steps of `make_inputs`, run in this order; each adds to or changes `Build.out`.
STEPS: tuple[Step, ...] = (
    Step("text", _text, "token ids, mask and token types first: later steps extend or replace this prompt"),
    Step(
        "images", _images, "pixels from the image processor, else seeded, before the prompt gets placeholders"
    ),
    Step("videos", _videos, "after images: a video's patches are as wide as the image processor's"),
    Step(
        "audio", _audio, "features from the feature extractor, else synthetic, before recipes fill the rest"
    ),
    Step(
        "aliases", _aliases, "processor outputs renamed to the forward's names before anything looks for them"
    ),
    Step("sessions", _sessions, "session objects (video trackers) before recipes, which skip what is made"),
    Step(
        "recipes", _recipes, "hand recipes for inputs nothing made, and a type's own over the synthetic ones"
    ),
    Step("docstring", _documented, "required inputs still missing, shaped as the forward's docstring says"),
    Step("exclusive", _exclusive, "inputs the forward refuses together: the later one out before counting"),
    Step("unused", _unused, "inputs the docstring calls unused out before a feature method sees them"),
    Step("placeholders", _placeholders, "one placeholder per feature, counted on the final pixel inputs"),
    Step("decoder", _decoder, "decoder ids once the prompt is final (shifted input ids for classifiers)"),
    Step("flags", _flags, "no cache and a dict output, where the forward takes them"),
    Step("label_checks", _label_checks, "labels a head refuses or cannot get a loss from are not made"),
    Step("labels", _labels, "labels last: their shapes follow the final inputs"),
)


def make_inputs(model, config, architecture: str, seed: int = 0, seq: int | None = None) -> ModelInputs:
    """Inputs for `model.forward`, deterministic for a seed: `STEPS` in order. Never raises for a
    missing recipe: what it cannot build is left out and noted (the forward stage then reports
    the model's error)."""
    build = Build.start(model, config, architecture, seed, seq or shrink_rules().targets.test_sequence_length)
    for step in STEPS:
        step.run(build)
    return build.out
