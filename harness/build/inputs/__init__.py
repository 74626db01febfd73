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

import inspect
import re

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

__all__ = ["BATCH", "CHOICES", "ModelInputs", "image_shape", "make_inputs", "special_token_ids"]


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


def _text(out: ModelInputs, m: Maker, config, sig: set[str], architecture: str) -> None:
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


def _aliases(out: ModelInputs, sig: set[str], scope: ConfigScope) -> None:
    for rule in input_recipes().aliases:
        if not set(rule.needs) <= sig or not defined(rule.when, scope):
            continue
        for target, source in rule.map.items():
            if target in sig and target not in out.kwargs and source in out.kwargs:
                out.kwargs[target] = out.kwargs.pop(source)
                out.sources[target] = out.sources.pop(source, "synthetic")


def _recipes(
    out: ModelInputs, m: Maker, sig: set[str], model_type: str, scope: ConfigScope, required: set[str]
) -> list[str]:
    labels = []
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
    return labels


_EXCLUSIVE = (
    re.compile(r"if (\w+) is not None and (\w+) is not None:\s*\n\s*raise "),
    re.compile(r"`(\w+)` and `(\w+)` are mutually exclusive"),
)
# an input the forward takes as the embeddings (Pop2Piano: `inputs_embeds = input_features`)
# excludes the token ids, as embeddings do
_EMBEDS_ALIAS = re.compile(r"^\s*inputs_embeds = (\w+)\s*$", re.M)


def _exclusive(out: ModelInputs, model) -> None:
    """Inputs the forward refuses together (Molmo2: images or videos, not both) or says are
    mutually exclusive (SeamlessM4T: speech or text, one attention mask), token ids next to an
    input it takes as the embeddings (Pop2Piano's features): the later one is left out. Read from
    the forward's own `if a is not None and b is not None: raise` or its warning. Token ids left
    out take their mask along; the audio's own mask, set aside while the text's held the name,
    becomes the attention mask."""
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


def _documented(out: ModelInputs, model, m: Maker, scope: ConfigScope, required: set[str]) -> None:
    """Required inputs still missing, in the shape the forward's docstring gives them; once one
    is made that way, the forward's documented mask too (its length may differ from the
    embeddings': a drafter attends over context + block)."""
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


def _decoder(out: ModelInputs, m: Maker, config, sig: set[str], architecture: str) -> None:
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
    if (
        (getattr(config, "is_encoder_decoder", False)
        and "input_ids" in kw)
        or (
            "input_features" in kw
            or "input_values" in kw
            or (("pixel_values" in kw or from_media)
            and "input_ids" not in kw)
        )
    ):
        kw["decoder_input_ids"] = m.ids(BATCH, m.seq // 2)
        out.sources["decoder_input_ids"] = "synthetic"


def make_inputs(model, config, architecture: str, seed: int = 0, seq: int | None = None) -> ModelInputs:
    """Inputs for `model.forward`, deterministic for a seed. Never raises for a missing recipe:
    what it cannot build is left out and noted (the forward stage then reports the model's error)."""
    seq = seq or shrink_rules().targets.test_sequence_length
    params = forward_parameters(model)
    sig = set(params) - {"self", "kwargs", "args"}
    model_type = str(getattr(config, "model_type", "") or "")
    m = Maker(config, seed, seq, special_token_ids(config))
    scope = ConfigScope(config, batch=BATCH, seq=seq, vocab=m.vocab, arch=architecture)
    out = ModelInputs(kwargs={})
    _text(out, m, config, sig, architecture)
    with_aliases = sig | _alias_sources(sig, scope)
    add_images(out, m, config, scope, with_aliases, model_type, clips=takes_clips(model))
    add_videos(out, m, config, scope, sig, model_type)
    add_audio(out, m, config, scope, with_aliases, model_type)
    _aliases(out, sig, scope)
    add_sessions(out, model, config, m)
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    passed_on = through_kwargs_names(model_type) if takes_kwargs else set()
    recipe_labels = _recipes(out, m, sig | passed_on, model_type, scope, required_inputs(params))
    _documented(out, model, m, scope, required_inputs(params))
    _exclusive(out, model)
    for name in sorted(documented_unused(model.forward) & set(out.kwargs)):
        out.kwargs.pop(name)
        out.sources.pop(name, None)
        out.notes.append(f"no {name}: the forward's docstring says it is not used")
    add_placeholders(out, model, config, sig, input_recipes().placeholders)
    _decoder(out, m, config, sig, architecture)
    if "use_cache" in sig:
        out.kwargs["use_cache"] = False
    if "return_dict" in sig:
        out.kwargs["return_dict"] = True
    refused = refused_labels(model)
    if refused:
        sig = sig - refused
        out.notes.append(f"no labels: the forward refuses {', '.join(sorted(refused))} (no training loss)")
    elif "labels" in sig and returns_no_loss(model):
        sig = sig - {"labels"}
        out.notes.append("no labels: the forward's output has no loss")
    elif "labels" in sig and (missing := loss_missing_arguments(model)):
        sig = sig - {"labels"}
        out.notes.append(
            f"no labels: the head's loss function needs {missing}, which its forward never passes"
        )
    out.labels = add_labels(m, architecture, config, out.kwargs, sig - set(recipe_labels)) + recipe_labels
    for name in out.labels:
        out.sources.setdefault(name, "synthetic")
    return out
