"""Forward inputs that are a session object, not tensors: a video tracker's `inference_session`.

Its processor's `init_video_session` builds it from a video (its video processor needs
torchvision, which is absent here). The session class the forward's annotation names is built the
same way: seeded frames at the model's image size (what the video processor stores), then the
prompts the session's own API takes (data: `sessions` in input_recipes.yaml): a point on one
object in the first frame, in the model's input pixels (what the processor's coordinate
normalization gives for a video of that size), or a text prompt of synthetic token ids (what the
tokenizer would give). The forward then runs on that frame.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import torch

from harness.build.inputs.base import Maker, ModelInputs
from harness.build.inputs.media import image_shape
from harness.build.rules import Sessions, input_recipes


def session_classes(model) -> dict[str, type]:
    """{forward parameter: session class} for the parameters annotated with a session class."""
    suffix = input_recipes().sessions.annotation_suffix
    forward = type(model).forward
    try:
        hints = typing.get_type_hints(forward)
    except Exception:  # noqa: BLE001 - unresolvable annotations: read them as written
        hints = {n: p.annotation for n, p in inspect.signature(forward).parameters.items()}
    return {
        name: cls for name, cls in hints.items() if isinstance(cls, type) and cls.__name__.endswith(suffix)
    }


def _build(cls: type, config, m: Maker, rules: Sessions) -> Any:
    channels, height, width = image_shape(config)
    video = m.randn(rules.frames, channels, height, width)
    session = cls(
        video=video, video_height=height, video_width=width, dtype=video.dtype
    )  # (its default is a string)
    frame = rules.frame_index
    points = rules.point_prompt
    if hasattr(session, points.method):
        obj = rules.object_id
        coords = (m.rand(1, 1, 1, 2) * torch.tensor([width, height])).float()
        labels = torch.ones(1, 1, 1, dtype=torch.int32)
        getattr(session, points.method)(
            session.obj_id_to_idx(obj), frame, {"point_coords": coords, "point_labels": labels}
        )
        setattr(session, points.new_inputs, [obj])
    text = rules.text_prompt
    if hasattr(session, text.method):
        prompt = getattr(session, text.method)("object")
        length = text.length
        getattr(session, text.ids)[prompt] = m.ids(1, length)
        getattr(session, text.mask)[prompt] = torch.ones(1, length, dtype=torch.long)
    return session


def add_sessions(out: ModelInputs, model, config, m: Maker) -> None:
    rules = input_recipes().sessions
    for name, cls in session_classes(model).items():
        if name in out.kwargs:
            continue
        try:
            out.kwargs[name] = _build(cls, config, m, rules)
        except Exception as exc:  # noqa: BLE001 - left out and noted: the forward reports the rest
            out.notes.append(f"{name}: {cls.__name__} failed: {type(exc).__name__}: {exc}"[:300])
            continue
        out.sources[name] = f"session:{cls.__name__}"
        params = inspect.signature(type(model).forward).parameters
        for param, value in rules.call.items():
            if param in params and param not in out.kwargs:
                out.kwargs[param] = value
                out.sources[param] = f"session:{cls.__name__}"
