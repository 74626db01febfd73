"""Blame the stages of one model check: re-run what failed on the reference, probe transformers.

`check_model(spec, backend, judge=judge_run)` calls `judge_run(run, wanted)` after its stages.
For every stage that failed:

* on a device backend, the stage is re-run on the reference backend (cpu) in the same process
  with the same shrunk config, the same inputs and the same seed (the very CPU model and input
  tensors the device copy was made from, when load got that far). The reference passes: the
  row is `backend`. It fails too: its failure is judged as below.
* on the reference (the run itself, or the re-run): `environment` when the error names an
  optional package that is not importable here; `upstream` when transformers itself fails
  whatever the harness chose: the spec's unshrunk config (for a catalog pair: the type's default)
  does not build its class, or the unshrunk model fails the same way under FakeTensorMode with
  inputs made by the model's own processor; else `harness`.

Each verdict keeps its evidence (`StageResult.blame_evidence`): the reference's status and
error, the probes' outcomes. The rules are data (harness/data/blame_rules.yaml); docs/blame.md.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import torch

from agents.quiet import quiet_transformers
from contracts.backends import get_backend
from contracts.errors import classify
from contracts.records import ModelCheck, ModelSpec, StageResult
from contracts.status import FAILING, MODEL_STAGES, Blame, Status
from contracts.timing import phase
from harness.blame import rules as rules_mod
from harness.blame.attributes import (
    deadline as _deadline,
)
from harness.blame.attributes import (
    probe_config_attribute,
    probe_config_overflow,
    probe_config_unset,
    probe_module_attribute,
    probe_output_attribute,
)
from harness.blame.compile import compile_reference, device_graph_evidence, judge_compile_pipeline, same_way
from harness.blame.layers import interior_width_mismatch, watch_layers
from harness.blame.selection import selection_ties_evidence
from harness.build.models import config_for, model_class
from harness.stages.check import COMPARED_WITH, PREREQUISITES, _Run, _run_stage, check_model
from harness.stages.torch_state import restored_torch_state

# ------------------------------------------------------------------------------- entry points


def check_with_blame(
    spec: ModelSpec, backend: str = "neuron", stages: list[str] | None = None, seed: int = 0
) -> ModelCheck:
    """check_model with every stage that does not pass blamed (what tiers and `harness check` run)."""
    return check_model(spec, backend, stages, seed, judge=judge_run)


def judge_run(run: _Run, wanted: list[str]) -> None:
    """Blame every failing stage of `run.result` (check_model's judge hook), then the rest."""
    result = run.result
    failing = [s for s in wanted if s in result.stages and result.stages[s].status in FAILING]
    for name in list(failing):  # the harness' own machinery failed: no reference re-run can say otherwise
        own = rules_mod.harness_reason(result.stages[name].to_dict())
        if own is not None:
            result.stages[name].blame, result.stages[name].blame_evidence = own
            failing.remove(name)
    on_reference = rules_mod.is_reference(run.adapter.name)
    reference: dict[str, StageResult] = {}
    if failing and not on_reference:
        reference = reference_stages(run, failing)
    for name in failing:
        row = result.stages[name]
        if on_reference:
            row.blame, row.blame_evidence = judge_reference_failure(run.spec, name, row, run.seed)
            row.blame_evidence = {
                "reference_backend": run.adapter.name,
                "on_reference": True,
                **row.blame_evidence,
            }
            continue
        ref = reference.get(name)
        ref_dict = ref.to_dict() if ref is not None else None
        if ref is not None and ref.status in FAILING:
            compiled = judge_compile_pipeline(row, ref, reference) if name == "compile" else None
            ref.blame, ref.blame_evidence = compiled or judge_reference_failure(run.spec, name, ref, run.seed)
            ref_dict = ref.to_dict()
        blame, evidence = rules_mod.by_reference(
            name, ref_dict, rules_mod.reference_backend(), row.status.value
        )
        if ref is not None and ref.status == Status.PASS:
            evidence["same_model_and_inputs"] = bool(ref.metrics.get("reused_model_and_inputs", True))
        if name == "compile" and ref is not None:
            evidence["reference_compile_backend"] = ref.metrics.get("compile_backend", "")
        if blame == Blame.BACKEND.value:  # a comparison among near-ties: said, the verdict kept
            ties = selection_ties_evidence(run, name)
            if ties is not None:
                evidence["selection_ties"] = ties
                evidence["why"] = f"{evidence.get('why', '')}; but {ties['note']}"
            graph = device_graph_evidence(run, _run_stage) if name == "compile" else None
            if graph is not None:  # the compiler's own difference, or the graph's
                evidence["device_graph"] = graph
                evidence["why"] = f"{evidence.get('why', '')}; {graph['note']}"
        row.blame, row.blame_evidence = blame, evidence
    dicts = [result.stages[s].to_dict() for s in MODEL_STAGES if s in result.stages]
    rules_mod.complete_stages(dicts, tier="", backend=run.adapter.name)
    for d in dicts:
        r = result.stages[d["stage"]]
        r.blame, r.blame_evidence = d["blame"], d["blame_evidence"]


# ------------------------------------------------------------------------- the reference re-run


@phase("reference")  # the nightly's time shares (contracts.timing)
def reference_stages(run: _Run, failing: list[str]) -> dict[str, StageResult]:
    """The failing stages (and their prerequisites) of `run` on the reference backend.

    When the device run got as far as building the CPU model and its inputs, the reference uses
    those very objects (a copy of the CPU model, the same input tensors); else it loads afresh
    from the same spec and seed (the shrinker and the inputs are deterministic)."""
    adapter = compile_reference(get_backend(rules_mod.reference_backend()), run.adapter)
    ref = _Run(
        spec=run.spec,
        adapter=adapter,
        seed=run.seed,
        result=ModelCheck(
            model_id=run.spec.model_id,
            backend=adapter.name,
            model_type=run.spec.model_type,
            architecture=run.result.architecture,
        ),
    )
    needed: set[str] = set()
    # compile compares with the eager step: the reference's compile has its own eager step to compare with
    stack = list(failing) + [c for s in failing for c in COMPARED_WITH.get(s, ())]
    while stack:
        s = stack.pop()
        if s not in needed:
            needed.add(s)
            stack.extend(PREREQUISITES[s])
    out: dict[str, StageResult] = {}
    for name in [s for s in MODEL_STAGES if s in needed]:
        blocked = [p for p in PREREQUISITES[name] if p in out and out[p].status != Status.PASS]
        if blocked:
            out[name] = StageResult(
                name, Status.NOT_ATTEMPTED, reason=f"{blocked[0]} {out[blocked[0]].status.value}"
            )
        elif name == "load" and run.inputs is not None and run.cpu_model is not None:
            ref.config, ref.cpu_model, ref.inputs, ref.cpu_kwargs = (
                run.config,
                run.cpu_model,
                run.inputs,
                run.cpu_kwargs,
            )
            ref.model, ref.kwargs = copy.deepcopy(run.cpu_model), run.cpu_kwargs
            out[name] = StageResult("load", Status.PASS, metrics={"reused_model_and_inputs": True})
        else:
            out[name] = _run_stage(ref, name)  # which puts PyTorch's modes back after it
        # a stage reads the outcomes of those before it (compile: the eager backward's gradients
        # to compare with; without them it would compare outputs only and pass where the device
        # fails on a gradient)
        ref.result.stages[name] = out[name]
        if name == "compile":
            out[name].metrics["compile_backend"] = adapter.compile_backend
    return out


# ------------------------------------------------------------------- judging a reference failure

#: Probes of a failure's message that decide `upstream` by themselves: (probe(text, spec),
#: evidence key, the probe status that decides, rule, why). A field or attribute the modeling code
#: reads that transformers' own classes never define, or leave unset, is transformers' defect
#: whatever the harness chose.
_ATTRIBUTE_PROBES = (
    (
        lambda text, spec: probe_config_attribute(text),
        "config_attribute",
        "missing_in_default",
        "upstream.config_attribute",
        "the modeling code reads {config_class}.{attribute}, which the config "
        "class does not define even with its own defaults",
    ),
    (
        lambda text, spec: probe_output_attribute(text),
        "output_attribute",
        "not_a_field",
        "upstream.output_attribute",
        "the modeling code reads {output_class}.{attribute}, which that output "
        "class does not define, whatever the inputs",
    ),
    (
        lambda text, spec: probe_config_unset(text, lambda: _raw_config(spec)),
        "config_unset",
        "unset_in_default",
        "upstream.config_unset",
        "the modeling code needs `{attribute}`, which the unshrunk config leaves unset "
        "({unset_at}) and the harness kept so: the default cannot run it, whatever the inputs",
    ),
    (
        lambda text, spec: probe_config_overflow(text, lambda: _raw_config(spec)),
        "config_overflow",
        "beyond_range_in_default",
        "upstream.config_overflow",
        "the modeling code converts {fields} of the unshrunk config, beyond the range "
        "of {dtype}, to that type: the default cannot run it, whatever the inputs",
    ),
    (
        lambda text, spec: probe_module_attribute(text, lambda: _default_meta_model(spec)),
        "module_attribute",
        "missing_in_default",
        "upstream.module_attribute",
        "the forward reads {module_class}.{attribute}, which none of the "
        "{instances} {module_class} modules the unshrunk config builds has: the default cannot run it, "
        "whatever the inputs",
    ),
)


def _default_meta_model(spec: ModelSpec) -> Any:
    """The model built from the unshrunk config, on the meta device (no memory, no weights)."""
    with quiet_transformers(), _deadline():
        cls = model_class(spec.architecture or run_architecture(spec))
        with torch.device("meta"):
            return cls(config_for(cls, _raw_config(spec)))


def _message_probes(
    text: str, spec: ModelSpec, evidence: dict[str, Any]
) -> tuple[str, dict[str, Any]] | None:
    """The `_ATTRIBUTE_PROBES` in order: the first decisive one's upstream verdict, else None (what
    each found is added to `evidence`)."""
    for probe, key, decisive, rule, why in _ATTRIBUTE_PROBES:
        found = probe(text, spec)
        if found:
            evidence[key] = found
            if found.get("status") == decisive:
                return Blame.UPSTREAM.value, {"rule": rule, **evidence, "why": why.format(**found)}
    return None


@phase("blame")  # upstream/environment probes (contracts.timing)
def judge_reference_failure(
    spec: ModelSpec, stage: str, row: StageResult, seed: int = 0
) -> tuple[str, dict[str, Any]]:
    """environment / upstream / harness for a stage that failed on the reference backend."""
    evidence: dict[str, Any] = {}
    package = missing_package(f"{row.reason} {row.message}")
    if package:
        return Blame.ENVIRONMENT.value, {"rule": "missing_package", "package": package}
    if row.status not in (Status.ERROR, Status.FAIL) or stage not in ("load", "forward", "backward"):
        return Blame.HARNESS.value, {
            "rule": "default",
            "why": f"{row.status.value} on the reference in {stage}",
        }
    said = harness_message(f"{row.reason} {row.message}")
    if said:
        return Blame.HARNESS.value, {
            "rule": "harness_message",
            "pattern": said,
            "why": "the model was not given inputs it can take: the harness chose them",
        }
    arch = spec.architecture or run_architecture(spec)
    build = probe_default_build(spec, arch)
    evidence["default_build"] = build
    if build.get("status") != "pass":
        package = missing_package(build.get("message", ""))
        if package:
            return Blame.ENVIRONMENT.value, {"rule": "missing_package", "package": package, **evidence}
        if stage == "load":
            evidence["why"] = "the unshrunk config does not build its class in transformers"
            return Blame.UPSTREAM.value, {"rule": "upstream.default_build", **evidence}
        # the shrunk model built: what failed after that is not explained by the default's
        # defect, unless the failure's message shows another defect of the default's
        said_upstream = _message_probes(f"{row.reason} {row.message}", spec, evidence)
        if said_upstream:
            return said_upstream
        evidence["why"] = (
            f"the unshrunk config does not build its class, so {stage} cannot be probed; the "
            "harness' shrunk model did build"
        )
        return Blame.HARNESS.value, {"rule": "default", **evidence}
    said_upstream = _message_probes(f"{row.reason} {row.message}", spec, evidence)
    if said_upstream:
        return said_upstream
    fake = probe_fake(spec, arch, stage, seed)
    evidence["fake_run"] = fake
    if fake.get("status") == "error" and fake.get("step") == "inputs":
        # make_inputs notes a processor that fails and goes on: what escapes it is the harness' code
        evidence["why"] = "the harness' input maker raised for the unshrunk config too: its own failure"
        return Blame.HARNESS.value, {"rule": "default", **evidence}
    if fake.get("status") != "pass" and same_way(row, fake) and fake.get("layer_width"):
        lw = fake["layer_width"]
        evidence["why"] = (
            f"the unshrunk model fails {stage} the same way under FakeTensorMode, inside the "
            f"model: layer {lw['layer']} takes {lw['weights_take']} but the layer before gives "
            f"{lw['input_has']}, whatever the inputs"
        )
        return Blame.UPSTREAM.value, {"rule": "upstream.layer_width", **evidence}
    if fake.get("status") != "pass" and same_way(row, fake):
        evidence["why"] = f"the unshrunk model fails {stage} the same way under FakeTensorMode"
        return Blame.UPSTREAM.value, {"rule": "upstream.fake_run", **evidence}
    if fake.get("status") == "not_run":
        evidence["why"] = f"no independent probe: {fake.get('why', '')}"
    elif fake.get("status") == "pass":
        evidence["why"] = f"the unshrunk model passes {stage} under FakeTensorMode"
    else:
        evidence["why"] = f"the unshrunk model does not fail {stage} the same way under FakeTensorMode"
    return Blame.HARNESS.value, {"rule": "default", **evidence}


def run_architecture(spec: ModelSpec) -> str:
    from harness.build.models import architecture_of

    try:
        return architecture_of(spec)
    except Exception:  # noqa: BLE001 - no class: the build probe reports it
        return ""


def missing_package(text: str) -> str:
    """The optional package an error message says is missing, when it is indeed not importable."""
    r = rules_mod.rules()
    names = r.package_import_names
    for pattern in r.missing_package_patterns:
        for m in re.finditer(pattern, text or ""):
            name = m.group(1).strip("`'\".,")
            module = names.get(name, name).split(".")[0]
            if module and module.isidentifier() and not _importable(module):
                return module
    for pattern in r.optional_import_patterns:
        for m in re.finditer(pattern, text or ""):
            if _optional_in_transformers(m.group(1)) and not _importable(m.group(1)):
                return m.group(1)
    return ""


@functools.cache
def _optional_in_transformers(module: str) -> bool:
    """transformers guards imports of this module with `is_<module>_available()`."""
    from transformers.utils import import_utils

    return callable(getattr(import_utils, f"is_{module}_available", None))


def harness_message(text: str) -> str:
    """The harness_messages pattern a failure's text matches ("" if none)."""
    return next((p for p in rules_mod.rules().harness_messages if re.search(p, text or "")), "")


@functools.cache
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------------- the probes


def _raw_config(spec: ModelSpec):
    """The spec's config as transformers builds it: unshrunk, none of the harness' changes."""
    from harness.build.shrink import config_class

    fields = {k: v for k, v in (spec.config or {}).items() if k != "model_type"}
    return config_class(spec.model_type)(**fields)


def _key(spec: ModelSpec, arch: str) -> str:
    blob = json.dumps([spec.model_type, arch, spec.config], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()


def _error(step: str, exc: BaseException) -> dict[str, Any]:
    info = classify(exc)
    return {"status": "error", "step": step, "error_class": info.error_class, "message": info.message}


_BUILD_CACHE: dict[str, dict[str, Any]] = {}


def probe_default_build(spec: ModelSpec, arch: str) -> dict[str, Any]:
    """Does the unshrunk config build its class (on the meta device: no memory)?"""
    key = _key(spec, arch)
    if key not in _BUILD_CACHE:
        _BUILD_CACHE[key] = _build_probe(spec, arch)
    return dict(_BUILD_CACHE[key])


def _build_probe(spec: ModelSpec, arch: str) -> dict[str, Any]:
    step = "config"
    try:
        with quiet_transformers(), _deadline():
            config = _raw_config(spec)
            step = "class"
            cls = model_class(arch)
            step = "build"
            with torch.device("meta"):
                cls(config_for(cls, config))
    except Exception as exc:  # noqa: BLE001 - the probe's finding
        return _error(step, exc)
    return {"status": "pass", "config": "unshrunk"}


def probe_fake(spec: ModelSpec, arch: str, stage: str, seed: int = 0) -> dict[str, Any]:
    """Build the unshrunk model, make its inputs (its own processor) and run up to `stage`
    (load: inputs; forward; backward: train-mode forward and loss.backward) under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from harness.build.inputs import make_inputs
    from harness.stages.compare import float_tensors, named_tensors

    step = "config"
    try:
        with quiet_transformers(), _deadline(), restored_torch_state(), _quiet_fake_tensor():
            config = _raw_config(spec)
            cls = model_class(arch)
            step = "build"
            with torch.device("meta"):
                model = cls(config_for(cls, config))
            model.eval()
            with FakeTensorMode(allow_non_fake_inputs=True):
                model = model.to_empty(device="cpu")
                step = "inputs"
                torch.manual_seed(seed)
                batch = make_inputs(model, config, arch, seed=seed)
                harness_made = not_independent(batch)
                if harness_made:
                    return _layer_width_probe(model, batch.kwargs, stage, harness_made)
                if stage == "load":
                    return {"status": "pass", "step": step}
                step = "forward"
                if stage == "backward":
                    model.train()
                out = model(**batch.kwargs)
                if not named_tensors(out):
                    return {"status": "fail", "step": step, "reason": "the model returned no tensor output"}
                if stage == "forward":
                    return {"status": "pass", "step": step}
                step = "backward"
                if not float_tensors(out):  # integer codes only (check._backward)
                    return {
                        "status": "skipped",
                        "step": step,
                        "reason": "integer outputs only: nothing to differentiate",
                    }
                loss = getattr(out, "loss", None)
                if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
                    parts = [t.float().pow(2).mean() for t in float_tensors(out) if t.requires_grad]
                    if not parts:
                        return {
                            "status": "skipped",
                            "step": step,
                            "reason": "no output depends on a trainable parameter",
                        }
                    loss = torch.stack(parts).sum()
                loss.float().sum().backward()
                if not any(p.grad is not None for p in model.parameters() if p.requires_grad):
                    return {"status": "fail", "step": step, "reason": "no parameter received a gradient"}
                return {"status": "pass", "step": step}
    except Exception as exc:  # noqa: BLE001 - the probe's finding
        return _error(step, exc)


def _layer_width_probe(model, kwargs: dict, stage: str, harness_made: list[str]) -> dict[str, Any]:
    """The unshrunk model's forward on the harness' inputs counts only for what they cannot cause:
    a layer inside the model whose weights disagree with the width the layer before gave it
    (harness/blame/layers.py). Anything else is `not_run` (no independent probe)."""
    not_run = {
        "status": "not_run",
        "step": "inputs",
        "harness_inputs": harness_made,
        "why": "inputs made by the harness' recipes or synthesizer, not the model's processor",
    }
    if stage not in ("forward", "backward"):
        return not_run
    if stage == "backward":
        model.train()
    with watch_layers(model) as found:
        try:
            model(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the probe's finding
            layer = interior_width_mismatch(found, kwargs)
            if layer:
                return {**_error("forward", exc), "harness_inputs": harness_made, "layer_width": layer}
    return not_run


def not_independent(batch: Any) -> list[str]:
    """Inputs of a batch the model's own processor did not make (synthesized token ids, hand
    recipes, placeholders): a probe fed those is not independent of the harness' choices. Labels
    are the head's loss contract and always the harness'."""
    own = rules_mod.rules().probe.own_input_sources
    sources = getattr(batch, "sources", None) or {}
    labels = set(getattr(batch, "labels", None) or ())
    out = []
    for name, value in batch.kwargs.items():
        if name in labels or not isinstance(value, torch.Tensor):
            continue
        source = str(sources.get(name, ""))
        if source.startswith(own):
            continue
        out.append(f"{name}={source or 'synthetic'}")
    return sorted(out)


@contextlib.contextmanager
def _quiet_fake_tensor() -> Iterator[None]:
    """FakeTensorMode logs every op that raises under it; the probe reports the error itself."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)
