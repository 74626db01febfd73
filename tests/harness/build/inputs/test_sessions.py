"""Video trackers take an `inference_session` object, not tensors (harness.build.inputs.sessions):
the session class the forward names, with seeded frames and a prompt through the session's own
API (a point for the SAM-2 family, text ids for SAM-3 video). Their forward runs under
torch.inference_mode: the backward stage is skipped as not applicable, not failed."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs.sessions import session_classes
from tests.harness.build.helpers import (
    built,
    stages,
)


@pytest.mark.parametrize(
    "model_type,architecture",
    [
        ("sam2_video", "Sam2VideoModel"),  # point prompt
        ("edgetam_video", "EdgeTamVideoModel"),  # point prompt; its 2-D latents fit the shrunk feature map
        pytest.param("sam3_video", "Sam3VideoModel", marks=pytest.mark.slow),  # text prompt; detections kept
    ],
)
def test_a_video_tracker_gets_a_prompted_session_and_its_forward_passes(model_type, architecture):
    model, cfg, inputs = built(model_type, architecture)
    assert set(session_classes(model)) == {"inference_session"}
    assert inputs.sources["inference_session"].startswith("session:")
    assert inputs.kwargs["frame_idx"] == 0
    got = stages(model_type, architecture)
    assert got["load"][0] == got["forward"][0] == "pass", got
    assert got["backward"] == (
        "skipped",
        "the forward runs under torch.inference_mode: there is no backward",
    ), got


def test_a_model_without_a_session_parameter_gets_none():
    model, _, inputs = built("sam2", "Sam2Model")
    assert session_classes(model) == {}
    assert not any(str(s).startswith("session:") for s in inputs.sources.values())


def test_a_session_moves_to_the_device_as_a_copy_with_its_tensors_and_dtype():
    """The device copy of the inputs holds its own session: its frames and cached prompts in the
    target dtype, its device fields naming the target (the CPU one stays as the inputs made it)."""

    from harness.stages.run import fresh, to_device

    _, _, inputs = built("sam2_video", "Sam2VideoModel")
    session = inputs.kwargs["inference_session"]
    moved = to_device(inputs.kwargs, torch.device("cpu"), torch.float64)["inference_session"]
    assert moved is not session and moved.dtype == torch.float64
    assert (
        moved.processed_frames[0].dtype == torch.float64
        and session.processed_frames[0].dtype == torch.float32
    )
    assert moved.point_inputs_per_obj[0][0]["point_coords"].dtype == torch.float64
    assert moved.inference_device == torch.device("cpu") and moved.cache.inference_device == torch.device(
        "cpu"
    )
    assert fresh(inputs.kwargs)["inference_session"] is not session
    assert fresh(inputs.kwargs)["frame_idx"] == 0
