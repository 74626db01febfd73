"""What a model tier's worker loads in its start-up (tier.setup), checked in a fresh interpreter:
the transformers modules every first model build imports; a tier that compiles also imports
torch.compile's stack there, so its first compile stage does not; a tier without a compile stage
does not pay for it."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.tiers.model_check import MODEL_PRELOAD

COMPILE_STACK = (
    "torch._functorch.aot_autograd",
    "torch._functorch.partitioners",
    "torch._inductor.codecache",
)


def _loaded_after_setup(tier: str, modules: tuple[str, ...] = COMPILE_STACK) -> dict[str, bool]:
    code = (
        "import json, sys\n"
        "from contracts.tiers import load_tier\n"
        f"load_tier({tier!r}).setup('cpu')\n"
        f"print(json.dumps({{m: m in sys.modules for m in {modules!r}}}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_representative_tier_imports_the_compile_stack_in_its_start_up():
    assert all(_loaded_after_setup("representative").values())


def test_the_full_tier_has_no_compile_stage_and_does_not_import_its_stack():
    assert not any(_loaded_after_setup("full").values())


def test_model_tiers_import_what_every_first_model_build_imports():
    assert all(_loaded_after_setup("full", MODEL_PRELOAD).values())
