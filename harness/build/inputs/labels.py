"""Labels for the head's own loss, by the kind of head (the suffix table in input_recipes.yaml).

Detection heads get per-image ``class_labels`` and normalized (cx, cy, w, h) ``boxes`` (plus
``masks`` for panoptic DETR), universal segmentation heads lists of ``mask_labels`` and
``class_labels``, semantic segmentation a class map, as their image processors produce them for
training, so the matcher and the head's real loss run instead of a surrogate.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import torch

from harness.build.formula import evaluate
from harness.build.inputs.base import BATCH, CHOICES, ConfigScope, Maker
from harness.build.rules import input_recipes


def label_kind(architecture: str) -> str | None:
    for entry in input_recipes().labels:
        if architecture.endswith(tuple(entry.suffix)):
            return entry.kind
    return None


def _pixels_hw(kw: dict) -> tuple[int, int]:
    pv = kw.get("pixel_values")
    if isinstance(pv, torch.Tensor) and pv.dim() >= 4:
        return int(pv.shape[-2]), int(pv.shape[-1])
    return 32, 32


def _boxes(m: Maker, n: int) -> torch.Tensor:
    centre = m.rand(n, 2) * 0.5 + 0.25
    size = m.rand(n, 2) * 0.3 + 0.1
    return torch.cat([centre, size], dim=1)


def _num_classes(config) -> int:
    return int(getattr(config, "num_labels", 2) or 2)


_REFUSES_LABELS = re.compile(
    r"if ((?:\w*labels is not None(?: or )?)+):\s*\n\s*raise (?:NotImplementedError|ValueError)\("
)


def refused_labels(model) -> set[str]:
    """The label inputs whose mere presence makes the head's forward raise: NotImplementedError
    (OmDet-Turbo, depth and matting heads: "Training is not implemented yet") or ValueError
    (inference-only heads: PP-DocLayout "does not support training", SuperGlue "is not
    trainable", Videomt's `mask_labels`/`class_labels` on video). Such a head has no loss to run:
    it gets none of them, and backward runs the surrogate loss."""
    try:
        source = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        return set()
    return {
        name
        for m in _REFUSES_LABELS.finditer(source)
        for name in re.findall(r"(\w*labels) is not None", m.group(1))
    }


def returns_no_loss(model) -> bool:
    """The forward builds its own output and never names a loss (ShieldGemma-2's classifier returns
    the yes/no logits and hands `labels` on to the causal LM inside, whose loss it drops): labels
    could give no loss here, only a shape error. Read from the forward's code (its docstring
    aside): no identifier, attribute or keyword with `loss` in it, and a `return Output(...)`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(type(model).forward)))
    except (OSError, TypeError, SyntaxError):
        return False
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    names += [n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg]
    builds = any(
        isinstance(n, ast.Return)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id[:1].isupper()
        for n in ast.walk(tree)
    )  # not `super().forward(...)`
    return builds and not any("loss" in name for name in names)


def _call_arguments(source: str, callee: str) -> str | None:
    """The argument text of the first `callee(...)` call in `source` (balanced parentheses)."""
    start = source.find(callee + "(")
    if start < 0:
        return None
    depth, i = 0, start + len(callee)
    for j in range(i, len(source)):
        depth += source[j] in "([{"
        depth -= source[j] in ")]}"
        if depth == 0:
            return source[i + 1 : j]
    return None


def loss_missing_arguments(model) -> list[str]:
    """Arguments the head's own loss function requires that its forward never passes (a class
    transformers' LOSS_MAPPING does not know falls back to `ForCausalLMLoss`, which needs
    `vocab_size`: NemotronAsrStreamingForRNNT): labels could not give a loss, whatever they are.
    Empty when the call forwards `*args`/`**kwargs` or cannot be read."""
    try:
        source = inspect.getsource(type(model).forward)
        args = _call_arguments(source, "self.loss_function")
        if args is None or "*" in args:  # `*args`/`**kwargs`: anything may arrive
            return []
        params = inspect.signature(model.loss_function).parameters
    except (OSError, TypeError, ValueError, AttributeError):
        return []
    parts = [a.strip() for a in re.split(r",(?![^(\[{]*[)\]}])", args) if a.strip()]
    positional = sum(1 for a in parts if not re.match(r"\w+\s*=", a))
    passed = {re.match(r"(\w+)\s*=", a)[1] for a in parts if re.match(r"\w+\s*=", a)}
    required = [
        n
        for n, p in params.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return [n for n in required[positional:] if n not in passed]


def add_labels(m: Maker, arch: str, config, kw: dict, sig: set[str]) -> list[str]:
    """Adds label kwargs for the head; returns their names (empty: no labels, surrogate loss)."""
    b, num_labels = BATCH, _num_classes(config)
    kind = label_kind(arch)
    per_image = input_recipes().objects_per_image
    if "start_positions" in sig and (kind == "qa" or ("end_positions" in sig and "labels" not in sig)):
        # span positions, also for a head trained on spans that is no QA head (Splinter's
        # question-aware pretraining)
        kw["start_positions"] = m.labels_of(m.seq, b)
        kw["end_positions"] = m.labels_of(m.seq, b)
        return ["start_positions", "end_positions"]
    if kind == "universal" and {"mask_labels", "class_labels"} <= sig:
        h, w = _pixels_hw(kw)
        kw["mask_labels"] = [(m.rand(per_image, h, w) > 0.5).float() for _ in range(b)]
        kw["class_labels"] = [m.labels_of(num_labels, per_image) for _ in range(b)]
        return ["mask_labels", "class_labels"]
    if "labels" not in sig:
        return []
    if kind == "sequence":
        kw["labels"] = m.labels_of(num_labels, b)
    elif kind == "choice":
        kw["labels"] = m.labels_of(CHOICES, b)
    elif kind == "tokens":
        length = kw["input_ids"].shape[-1] if "input_ids" in kw else m.seq
        kw["labels"] = m.labels_of(num_labels, b, length)
    elif kind == "ctc":
        kw["labels"] = torch.randint(1, max(2, m.vocab), (b, 4), generator=m.gen)
    elif kind in ("detection", "detection_masks"):
        h, w = _pixels_hw(kw)
        targets = []
        for _ in range(b):
            t = {"class_labels": m.labels_of(num_labels, per_image), "boxes": _boxes(m, per_image)}
            if kind == "detection_masks":
                t["masks"] = (m.rand(per_image, h, w) > 0.5).float()
            targets.append(t)
        kw["labels"] = targets
    elif kind == "spectrogram":
        spec = input_recipes().spectrogram_labels
        try:
            scope = ConfigScope(config)
            frames, bins = int(evaluate(spec.frames, scope)), int(evaluate(spec.bins, scope))
        except (NameError, TypeError, KeyError, ValueError):
            return []
        kw["labels"] = m.randn(b, frames, bins)
    elif kind == "semantic":
        h, w = _pixels_hw(kw)
        kw["labels"] = m.labels_of(num_labels, b, h, w)
    elif "decoder_input_ids" in kw:
        kw["labels"] = m.ids(*kw["decoder_input_ids"].shape)
    elif kind == "lm" and "input_ids" in kw:
        labels = kw["input_ids"].clone()
        if "attention_mask" in kw and kw["attention_mask"].shape == labels.shape:
            labels[kw["attention_mask"] == 0] = -100
        labels[labels >= m.vocab] = -100
        for special in m.special:
            labels[labels == special] = -100
        kw["labels"] = labels
        if arch.endswith("ForPreTraining") and "next_sentence_label" in sig:
            kw["next_sentence_label"] = m.labels_of(2, b)
            return ["labels", "next_sentence_label"]
    elif kind == "qa" and "decoder_input_ids" in sig:
        # a generative QA head (BLIP's VQA) has no span positions: its forward decodes the answer,
        # so its labels are answer tokens; extractive/table QA heads (TAPAS) get none of these
        kw["labels"] = m.ids(b, max(2, m.seq // 2))
    else:
        return []
    return ["labels"]
