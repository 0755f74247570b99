"""Shared test helpers and settings.

Compiling: off (torch.compile is a no-op; see below). Threads: one. The tests work on small
tensors, where a second intra-op thread mostly spins
(measured: the covariant-head tests took 84 s with two threads on a loaded 2-core machine and 7 s
with one). Never torch.set_num_threads(k >= 2): with this torch it silently breaks batched LU
(PyTorch issue 142815).
"""

from __future__ import annotations

import os
from pathlib import Path

# The tests run every step eagerly: torch.compile is a no-op here and in the CLIs they start
# (its graphs take minutes to build; tests/world_model/test_compiled_steps.py re-enables it).
os.environ["TORCH_COMPILE_DISABLE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

torch.set_num_threads(1)

# Property tests draw the same examples on every machine (a suite green on one CPU must be green
# on another); HYPOTHESIS_PROFILE=explore draws new ones, to search for counter-examples.
settings.register_profile("same_everywhere", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "same_everywhere"))

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child Python (a CLI, torchrun) that imports the package
    from the checkout: the repository first on PYTHONPATH, what was there kept after it."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


# Tolerances per dtype for comparisons against an independent reference.
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def ball_points(
    n: int, d: int, max_norm: float, dtype=torch.float64, seed: int = 0, min_norm: float = 0.0
):
    """n points in the d-ball with norms uniform in [min_norm, max_norm] (float64 construction)."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(n, d, generator=g, dtype=torch.float64)
    direction = direction / direction.norm(dim=-1, keepdim=True)
    radius = min_norm + (max_norm - min_norm) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return (radius * direction).to(dtype)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["f32", "f64"])
def dtype(request):
    return request.param
