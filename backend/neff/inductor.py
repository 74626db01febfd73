"""A NEFF partition compiled by Inductor on the CPU (``NEURON_COMPILER=inductor``).

The interpreter executable runs a partition's aten calls one by one and rounds every fp32
matmul input to bf16 per call; it cannot beat eager, since it does the same work. Inductor
compiles the same graph (rebuilt from the artifact's JSON, with the device's precision rule as
ordinary ``.bfloat16().float()`` calls on the same arguments) into fused C++ kernels, so the
rounding is fused into the kernels that produce the rounded values.
``emulate_precision_casts`` keeps those bf16 round trips: without it Inductor's CPU code
elides a ``float -> bf16 -> float`` pair inside a fused kernel, which would drop the rule.

The artifact stays the JSON graph: Inductor's output (generated C++ and shared objects, in its
own cache, ``TORCHINDUCTOR_CACHE_DIR``, default ``/tmp/torchinductor_<user>``) is never part of a
NEFF, so a shared cache still only carries aten graphs. Loading an artifact compiles it again,
which Inductor's FX graph cache answers without gcc on a machine that compiled it before.
Results are not bit-identical to eager (fused pointwise code, reduction order): within the
tolerances of docs/compile.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from backend import settings
from backend.neff.format import TensorSpec, parse_dtype

ENV_VAR = settings.Settings.compiler.name
COMPILERS = settings.COMPILERS
#: Inductor options every partition is compiled with (what makes its code honour the device rule)
OPTIONS = {"emulate_precision_casts": True}

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own
_pool_lock = threading.Lock()


def compiler_name() -> str:
    """The compiler `NEURON_COMPILER` selects (``interpreter`` when unset), read on every call."""
    return settings.current().compiler


def _example(spec: TensorSpec) -> torch.Tensor:
    dtype = parse_dtype(spec.dtype)
    extent = 1 + sum((n - 1) * s for n, s in zip(spec.shape, spec.stride) if n > 0)
    if any(n == 0 for n in spec.shape):
        extent = 0
    return torch.zeros(extent, dtype=dtype).as_strided(spec.shape, spec.stride)


def _compile(module: torch.fx.GraphModule, example: list[torch.Tensor]) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(module, example, config_patches=dict(OPTIONS))


def compile_module(module: torch.fx.GraphModule, inputs: list[TensorSpec]) -> Callable[..., Any]:
    """Inductor's callable for the rebuilt partition module (host tensors in, host tensors out).

    It compiles on a thread of its own: the caller may be inside Dynamo/AOTAutograd's tracing
    (fake tensor mode, tracing context), which are thread-local and must not leak into a
    separate compile of concrete CPU inputs."""
    global _pool
    example = [_example(s) for s in inputs]
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():  # a pool's thread does not survive fork()
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuron-inductor"))
        pool = _pool[1]
    return pool.submit(_compile, module, example).result()
