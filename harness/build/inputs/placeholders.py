"""Multimodal prompts: exactly as many image/video placeholder tokens as the model has features.

The count is asked from the model's own ``get_image_features`` / ``get_video_features`` with the
pixel inputs it will get, so a processor's tiling (llava-next patches, qwen-vl grids) and the
projector's merging are accounted for without knowing them.
"""

from __future__ import annotations

import re

import torch

from harness.build.inputs.base import (
    BATCH,
    ModelInputs,
    get,
    required_inputs,
    signature_parameters,
    text_config,
    wrapped_configs,
)
from harness.build.rules import PlaceholderRule


def _owners(model) -> list:
    """Where a feature method may live: the model, its inner `model`, and their encoders
    (encoder-decoder multimodal models such as t5gemma2 encode the images in the encoder)."""
    out = [model, getattr(model, "model", None)]
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix and prefix != "model" else None
    out.append(
        inner if isinstance(inner, torch.nn.Module) and inner is not model else None
    )  # ColPali: model.vlm
    for owner in list(out):
        get_encoder = getattr(owner, "get_encoder", None)
        try:
            enc = get_encoder() if callable(get_encoder) else None
        except Exception:  # noqa: BLE001 - no encoder
            enc = None
        out.append(enc if enc is not owner else None)
    return out


def _feature_method(model, names: list[str]):
    for owner in _owners(model):
        for n in names:
            fn = getattr(owner, n, None) if owner is not None else None
            if fn is not None:
                return fn
    return None


def _count(out) -> int | None:
    if hasattr(out, "pooler_output") and out.pooler_output is not None:
        out = out.pooler_output
    elif hasattr(out, "last_hidden_state"):
        out = out.last_hidden_state
    if isinstance(out, (list, tuple)):
        tensors = [o for o in out if isinstance(o, torch.Tensor)]
        return sum(int(o.reshape(-1, o.shape[-1]).shape[0]) for o in tensors) // BATCH if tensors else None
    if isinstance(out, torch.Tensor):
        return int(out.reshape(-1, out.shape[-1]).shape[0]) // BATCH
    return None


def pixel_input(rule: PlaceholderRule, kwargs: dict) -> str | None:
    """The modality's input present in `kwargs` (the first of `pixel_input`)."""
    return next((n for n in rule.pixel_input if n in kwargs), None)


def feature_count(model, kwargs: dict, rule: PlaceholderRule) -> int | None:
    """Features per sample from the model's own feature method, called with the modality's
    input, the `pass_through` inputs and every other input the method requires (masks, ids)."""
    fn = _feature_method(model, rule.feature_methods)
    name = pixel_input(rule, kwargs)
    if fn is None or name is None:
        return None
    wanted = set(rule.pass_through) | required_inputs(signature_parameters(fn))
    extra = {k: kwargs[k] for k in wanted if k in kwargs and k != name}
    with torch.no_grad():
        out = fn(**{name: kwargs[name]}, **extra)
        codes = _codes(model, rule, out)
        return codes if codes is not None else _count(out)


def _codes(model, rule: PlaceholderRule, out) -> int | None:
    """Codes per sample when the model turns its features into discrete prompt tokens with a
    method taking the features (`token_methods` whose first parameter is `hidden_states`:
    GLM-Image's VQ-VAE gives one code per merged patch); None otherwise."""
    fn = _feature_method(model, rule.token_methods)
    feats = getattr(out, "pooler_output", None)
    if fn is None or feats is None or next(iter(signature_parameters(fn)), None) != "hidden_states":
        return None
    codes = fn(feats)
    return int(codes.numel()) // BATCH if isinstance(codes, torch.Tensor) else None


def _count_the_model_asks_for(
    model, kwargs: dict, rule: PlaceholderRule, token: int, exc: Exception
) -> int | None:
    """A feature method that needs the prompt's placeholders itself (MusicFlamingo builds audio
    timestamps from them) fails on a prompt without any, saying how many features it has
    (transformers' "tokens: 0, features: 32"): that count, per sample, once the method accepts a
    prompt holding it."""
    found = [int(g) for pattern in rule.count_messages for g in re.findall(pattern, str(exc))]
    if not found or found[0] % BATCH or "input_ids" not in kwargs:
        return None
    n = found[0] // BATCH
    trial = dict(kwargs, input_ids=torch.cat([torch.full((BATCH, n), token), kwargs["input_ids"]], dim=1))
    try:
        return n if feature_count(model, trial, rule) is not None else None
    except Exception:  # noqa: BLE001 - the count did not satisfy the method
        return None


def _count_the_forward_says(model, kwargs: dict, rule: PlaceholderRule, token: int) -> int | None:
    """A model with no feature method (Qwen2-Audio merges audio inside its forward) says its count
    in its own mismatch error when its prompt holds a wrong number of placeholders (two per
    sample: consecutive placeholders mark a prompt its processor expanded): that count, per sample."""
    if not rule.count_messages or "input_ids" not in kwargs:
        return None
    ids = kwargs["input_ids"]
    trial = dict(kwargs, input_ids=torch.cat([torch.full((BATCH, 2), token), ids], dim=1))
    if "attention_mask" in kwargs and kwargs["attention_mask"].shape == ids.shape:
        trial["attention_mask"] = torch.cat(
            [torch.ones(BATCH, 2, dtype=ids.dtype), kwargs["attention_mask"]], 1
        )
    trial.pop("labels", None)
    try:
        with torch.no_grad():
            model(**trial)
    except Exception as exc:  # noqa: BLE001 - the error is the answer
        found = [int(g) for pattern in rule.count_messages for g in re.findall(pattern, str(exc))]
        return found[0] // BATCH if found and found[0] % BATCH == 0 and found[0] else None
    return None


def _rejected(model, config, ids: torch.Tensor, counts: dict[str, int]) -> str:
    """The model's own placeholder check (`get_placeholder_mask`) on a prompt holding `counts`
    placeholders per sample of each modality: '' when it accepts (or has no such check), else why."""
    fn = _feature_method(model, ["get_placeholder_mask"])
    params = signature_parameters(fn) if fn is not None else {}
    kinds = [k for k in counts if f"{k}_features" in params]
    if not kinds:
        return ""
    text = text_config(config)
    hidden = int(get(text, "hidden_size", default=0) or 0)
    if hidden <= 0:
        return ""
    # NeoMME's check takes the ids and features only
    embeds_kw = {"inputs_embeds": torch.zeros(*ids.shape, hidden)} if "inputs_embeds" in params else {}
    for kind in kinds:
        # features packed (images x tokens, hidden), else per image (VideoLLaVA flattens them)
        for shape in [(counts[kind] * BATCH, hidden), (BATCH, counts[kind], hidden)]:
            try:
                with torch.no_grad():
                    fn(ids, **embeds_kw, **{f"{kind}_features": torch.zeros(shape)})
                break
            except IndexError:  # a layout the check cannot take: try the next
                continue
            except (ValueError, RuntimeError) as exc:
                return f"{type(exc).__name__}: {str(exc)[:120]}"
    return ""


def add_placeholders(
    out: ModelInputs, model, config, sig: set[str], rules: dict[str, PlaceholderRule]
) -> None:
    """Prefix every prompt with the placeholders of each modality present (images, then videos)."""
    kw = out.kwargs
    added: dict[str, int] = {}
    failed: dict[str, str] = {}
    for kind, rule in rules.items():
        # a type whose processor writes this modality with another one's token (its model reads that one)
        fields = rule.token_fields_by_type.get(getattr(config, "model_type", None), rule.token_fields)
        token = get(config, *fields)
        text = text_config(config)
        token = token if token is not None else get(text, *fields)
        for wrapped in wrapped_configs(config) if token is None else []:  # ColPali: config.vlm_config
            token = get(wrapped, *fields) if token is None else token
        if token is None or pixel_input(rule, kw) is None or "input_ids" not in kw:
            continue
        fixed = get(config, *rule.count_fields)
        try:
            n = int(fixed) if isinstance(fixed, int) and fixed > 0 else feature_count(model, kw, rule)
        except Exception as exc:  # noqa: BLE001 - the forward stage will show the real error
            n = _count_the_model_asks_for(model, kw, rule, int(token), exc)
            if n is None:
                failed[kind] = f"{type(exc).__name__}: {str(exc)[:120]}"
                out.notes.append(f"{kind} feature count unknown: {failed[kind]}")
                continue
        if n is None and _feature_method(model, rule.feature_methods) is None:
            n = _count_the_forward_says(model, kw, rule, int(token))
        if not n:
            continue
        run = _boundaries(config, rule, [int(token)] * n)
        ids = torch.cat([torch.tensor(run).expand(BATCH, -1), kw["input_ids"]], dim=1)
        rejected = _rejected(model, config, ids, {**added, kind: n})
        if rejected:
            # the model cannot tell this modality's placeholders from an earlier one's (GLM-4.1V
            # counts video frames by the image token): the prompt keeps the earlier modalities only
            _drop(out, kind, rules, added, rejected)
            continue
        added[kind] = n
        kw["input_ids"] = ids
        for mask in ("attention_mask",):
            if mask in kw and kw[mask].dim() == 2:
                kw[mask] = torch.cat([torch.ones(BATCH, len(run), dtype=kw[mask].dtype), kw[mask]], 1)
        if "token_type_ids" in kw:
            kw["token_type_ids"] = torch.zeros_like(ids)
        if "mm_token_type_ids" in sig:  # 1 marks image positions, 2 video positions (qwen-vl)
            prev = kw.get("mm_token_type_ids")
            prev = (
                torch.cat([torch.zeros(BATCH, len(run), dtype=torch.long), prev], 1)
                if prev is not None
                else torch.zeros_like(ids)
            )
            kw["mm_token_type_ids"] = torch.where(ids == int(token), 1 if kind == "image" else 2, prev)
        out.sources["input_ids"] = out.sources.get("input_ids", "synthetic") + f"+{kind}_placeholders"
        out.notes.append(f"{n} {kind} placeholder tokens")
    if added:
        # a modality whose own feature method cannot take the inputs made for it (a layout only
        # its missing video processor makes) would fail the forward in the same call: the prompt
        # keeps the modalities that work, and the note says which one was left out
        for kind, why in failed.items():
            _drop(out, kind, rules, added, why)


def _boundaries(config, rule: PlaceholderRule, run: list[int]) -> list[int]:
    """The placeholder run between the modality's start and end tokens, when the config names
    both (`boundary_fields`): Ovis2.5 puts its visual indicator embeddings there and counts them,
    GLM-5-Next tells video placeholders from image ones by the video span."""
    text = text_config(config)
    for start_field, end_field in rule.boundary_fields:
        start = get(config, start_field, default=get(text, start_field))
        end = get(config, end_field, default=get(text, end_field))
        if isinstance(start, int) and isinstance(end, int):
            return [start, *run, end]
    return run


def _drop(
    out: ModelInputs, kind: str, rules: dict[str, PlaceholderRule], added: dict[str, int], why: str
) -> None:
    """Remove one modality's inputs (not those a kept modality shares) and say so in the notes."""
    kept = {name for k, r in rules.items() if k in added for name in r.pass_through}
    rule = rules[kind]
    for name in [pixel_input(rule, out.kwargs), *rule.pass_through]:
        if name and name in out.kwargs and name not in kept:
            out.kwargs.pop(name)
            out.sources.pop(name, None)
    out.notes.append(f"no {kind} input: {why}")
