"""world_model/attention/triton_ida.py: the fused inverse-distance kernels, forward and
backward, run by Triton's interpreter on CPU tensors against the PyTorch reference
(world_model/attention/ida.py, float64, with autograd): values and gradients of queries, keys,
values and key masses to 1e-4 in float32, float64 gradchecks, ragged shapes, a query equal to
a key, key masks and fully masked rows, points at |x| = 1 - 1e-4; the accuracy of the three
distance forms at small distances; the dispatch rules. On a CUDA machine the last tests run
the compiled kernels.

The interpreter must be chosen before triton is imported (Triton's builtins are interpreted
or compiled from then on). This module sets TRITON_INTERPRET=1 while it imports the kernels
when nothing has imported triton yet and no GPU is present (the CPU CI), and again during
each of its tests (Triton imports modules lazily during a launch); otherwise (triton
already imported, or a GPU whose compiled kernels other code may want) the interpreter tests
run in a fresh process (test_interpreter_tests_in_a_fresh_process).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import ball_points, child_env
from world_model.attention import ida, triton_ida
from world_model.attention.hida import DenseHIDA, DenseHIDAConfig

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

_FRESH = os.environ.get("TRITON_INTERPRET") == "1"  # the whole process interprets
if _FRESH or ("triton" not in sys.modules and not torch.cuda.is_available()):
    _saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        IN_PROCESS = triton_ida.interpreter_active()  # imports triton and the kernels now
    finally:
        if _saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = _saved
else:
    IN_PROCESS = False


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    """Triton reads TRITON_INTERPRET again as it imports modules lazily during a launch."""
    if IN_PROCESS:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


interpreted = pytest.mark.skipif(not IN_PROCESS, reason="run by the fresh-process test")
on_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SMALL = triton_ida.KernelConfig(block_q=16, block_k=16)  # several blocks at n <= 64
EPS = 1e-3


def config(form="difference", contraction="difference"):
    return triton_ida.KernelConfig(form=form, contraction=contraction, block_q=16, block_k=16)


def inputs(metric, n_q=37, n_k=29, dim=5, dim_v=3, dtype=torch.float32, max_norm=0.95, seed=0):
    """q [2, n_q, d] (batched), k [n_k, d] and v [n_k, dv] (broadcast), positive masses [n_k];
    the first three keys equal the first three queries."""
    q = ball_points(2 * n_q, dim, max_norm, dtype=dtype, seed=seed).reshape(2, n_q, dim)
    k = ball_points(n_k, dim, max_norm, dtype=dtype, seed=seed + 1)
    k[:3] = q[0, :3]
    g = torch.Generator().manual_seed(seed + 2)
    v = torch.randn(n_k, dim_v, generator=g, dtype=torch.float64).to(dtype)
    mass = (0.2 + torch.rand(n_k, generator=g, dtype=torch.float64)).to(dtype)
    return q, k, v, mass


def outputs_and_grads(fn, tensors, seed=5):
    """fn(*tensors) and the gradients of <out, a fixed random cotangent> (float64 tensors)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out)
    grads = torch.autograd.grad(out, leaves, cot)
    return [out.detach().double()] + [g.double() for g in grads]


def assert_close_rel(got, want, rel=1e-4):
    """Each tensor within rel of the reference, relative to the reference's largest entry."""
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        scale = float(b.abs().max()) or 1.0
        err = float((a - b).abs().max())
        assert err <= rel * scale, (err, scale)


def reference(metric, eps, mask=None):
    def fn(q, k, v, mass=None):
        q, k, v = q.double(), k.double(), v.double()
        mass = None if mass is None else mass.double()
        return ida.inverse_distance_attention(q, k, v, eps, metric, mask, key_mass=mass)[0]

    return fn


def fused(metric, eps, mask=None, form="difference", contraction="difference"):
    def fn(q, k, v, mass=None):
        cfg = config(form, contraction)
        return triton_ida.fused_or_none(q, k, v, eps, metric, mask, mass, force=True, config=cfg)

    return fn


# --------------------------------------------------------------------------- values and gradients


@interpreted
@pytest.mark.parametrize(
    "form, contraction",
    [
        ("difference", "difference"),
        ("difference", "dot"),
        ("expanded", "dot"),
        ("corrected", "dot"),
    ],
)
@pytest.mark.parametrize("metric", triton_ida.FUSED_METRICS)
def test_values_and_gradients_match_the_reference(metric, form, contraction):
    """float32 kernels against the float64 reference, gradients of q, k, v and the masses
    included: a batch of queries over broadcast keys, sizes not multiples of the blocks (37
    queries, 29 keys, blocks of 16), queries equal to keys; each distance form, and both ways
    of contracting the backward."""
    tensors = inputs(metric)
    got = outputs_and_grads(fused(metric, EPS, form=form, contraction=contraction), tensors)
    want = outputs_and_grads(reference(metric, EPS), tensors)
    assert_close_rel(got, want)


@interpreted
def test_a_batch_carried_by_the_keys_or_by_the_mask_alone():
    """The batch may come from any one input under unbatched queries: the keys [2, Nk, d],
    the values [2, Nk, dv] (dv != Nk), or the key masses [3, Nk] (with a key mask); each
    against the reference."""
    q, k, v, mass = inputs("poincare", n_q=5, n_k=7, dim=3, dim_v=2)
    keys = torch.stack([k, k.flip(0)])  # [2, Nk, d]
    values = torch.stack([v, 2.0 * v])  # [2, Nk, dv]
    for kk, vv in ((keys, v), (k, values)):
        got = fused("poincare", EPS)(q[0], kk, vv, mass)
        assert got.shape == (2, 5, 2)
        assert_close_rel([got.double()], [reference("poincare", EPS)(q[0], kk, vv, mass)])
    masses = torch.stack([mass, mass.flip(0), 1.0 + mass])  # [3, Nk]
    mask = torch.ones(1, 7, dtype=torch.bool)
    mask[0, :2] = False
    got = fused("poincare", EPS, mask)(q[0], k, v, masses)
    assert got.shape == (3, 5, 2)
    assert_close_rel([got.double()], [reference("poincare", EPS, mask)(q[0], k, v, masses)])


@interpreted
@pytest.mark.parametrize("metric", triton_ida.FUSED_METRICS)
def test_gradcheck_in_float64(metric):
    """Finite differences against the kernels' own backward, float64 throughout (the kernels
    compute in float64 under the interpreter), with key masses and a key mask."""
    q, k, v, mass = inputs(metric, n_q=5, n_k=7, dim=3, dim_v=2, dtype=torch.float64, seed=3)
    mask = torch.tensor([True, True, False, True, True, True, True])
    leaves = [t.clone().requires_grad_(True) for t in (q[0], k, v, mass)]
    assert torch.autograd.gradcheck(fused(metric, EPS, mask), leaves, atol=1e-6, rtol=1e-5)
    # and float64 to float64's rounding against the reference, values and every gradient
    tensors = (q[0], k, v, mass)
    got = outputs_and_grads(fused(metric, EPS, mask), tensors)
    assert_close_rel(got, outputs_and_grads(reference(metric, EPS, mask), tensors), rel=1e-11)


@interpreted
def test_a_query_equal_to_a_key_takes_the_largest_weight_with_finite_gradients():
    """eps = 1e-7: the query at a key reads that key's value (its weight ~1), values and
    gradients are finite and match the reference."""
    for metric in triton_ida.FUSED_METRICS:
        q, k, v, _ = inputs(metric, n_q=20, n_k=23, dim=4, dim_v=3, seed=7)
        got = outputs_and_grads(fused(metric, 1e-7), (q, k, v))
        want = outputs_and_grads(reference(metric, 1e-7), (q, k, v))
        assert_close_rel(got, want)
        torch.testing.assert_close(got[0][0, :3], v[:3].double(), atol=1e-4, rtol=0)


@interpreted
def test_points_near_the_boundary_give_finite_values_and_gradients():
    """Poincare points at |x| = 1 - 1e-4 (conformal factors ~5e3): finite and within 1e-4 of
    the reference, gradients included."""
    q = ball_points(2 * 30, 4, 1 - 1e-4, dtype=torch.float32, seed=11, min_norm=1 - 1e-4)
    k = ball_points(33, 4, 1 - 1e-4, dtype=torch.float32, seed=12, min_norm=1 - 1e-4)
    k[:2] = q[:2]
    q = q.reshape(2, 30, 4)
    v = torch.randn(33, 2, generator=torch.Generator().manual_seed(13))
    for eps in (1e-3, 1e-6):
        got = outputs_and_grads(fused("poincare", eps), (q, k, v))
        want = outputs_and_grads(reference("poincare", eps), (q, k, v))
        assert_close_rel(got, want)


# --------------------------------------------------------------------------- masks and masses


@interpreted
def test_key_masks_and_fully_masked_rows_match_the_reference():
    """A key mask [Nk], a per-batch key mask [B, 1, Nk] whose second row masks every key (out 0
    and gradients 0 there, as the reference), and masks combined with masses."""
    q, k, v, mass = inputs("poincare", n_q=21, n_k=19, dim=4, dim_v=3, seed=17)
    drop = torch.ones(19, dtype=torch.bool)
    drop[[0, 5, 18]] = False
    per_batch = torch.stack([drop, torch.zeros(19, dtype=torch.bool)]).unsqueeze(-2)  # [2, 1, Nk]
    for metric in triton_ida.FUSED_METRICS:
        for mask in (drop, per_batch):
            got = outputs_and_grads(fused(metric, EPS, mask), (q, k, v, mass))
            want = outputs_and_grads(reference(metric, EPS, mask), (q, k, v, mass))
            assert_close_rel(got, want)
        out = fused(metric, EPS, per_batch)(q, k, v)
        assert torch.equal(out[1], torch.zeros_like(out[1]))


@interpreted
def test_a_key_of_mass_zero_is_not_attended_and_has_the_one_sided_gradient():
    """Mass 0 drops the key; its mass gradient is the one-sided derivative: the reference's at
    a mass of 1e-30 (the reference's at 0 itself is 0, its log m being floored)."""
    q, k, v, mass = inputs("poincare", n_q=6, n_k=9, dim=3, dim_v=2, dtype=torch.float64, seed=23)
    mass[4] = 0.0
    tiny = mass.clone()
    tiny[4] = 1e-30
    got = outputs_and_grads(fused("poincare", EPS), (q, k, v, mass))
    want = outputs_and_grads(reference("poincare", EPS), (q, k, v, tiny))
    assert_close_rel(got, want, rel=1e-9)
    keep = torch.arange(9) != 4
    dropped = reference("poincare", EPS)(q, k[keep], v[keep], mass[keep])
    torch.testing.assert_close(got[0], dropped)


# --------------------------------------------------------------------------- distance forms


@interpreted
def test_distance_forms_at_small_distances():
    """The kernels' |q - k|^2 in float32 against float64, for pairs at distance 1e-1 ... 1e-5
    with |q| ~ 0.5 - 0.9 (docs/measurements.md has the table): differences keep ~1e-6
    relative error at every distance; the expanded form (float32 dot here; TF32 on a GPU is
    worse) loses it below ~1e-2; the corrected form recovers it."""
    q = ball_points(48, 16, 0.9, dtype=torch.float64, seed=29, min_norm=0.5)
    g = torch.Generator().manual_seed(31)
    worst = {}
    for delta in (1e-1, 1e-3, 1e-5):
        step = torch.randn(48, 16, generator=g, dtype=torch.float64)
        k = q + delta * step / step.norm(dim=-1, keepdim=True)
        q32, k32 = q.float(), k.float()
        exact = (q32.double()[:, None] - k32.double()[None]).square().sum(-1)  # [Nq, Nk]
        diagonal = torch.eye(48, dtype=torch.bool)
        for form in triton_ida.FORMS:
            sq = triton_ida.fused_pair_sq(q32, k32, config(form), force=True).double()
            rel = ((sq - exact).abs() / exact)[diagonal].max().item()
            worst[form, delta] = rel
    assert max(worst["difference", d] for d in (1e-1, 1e-3, 1e-5)) < 1e-5, worst
    assert max(worst["corrected", d] for d in (1e-1, 1e-3, 1e-5)) < 1e-5, worst
    assert worst["expanded", 1e-1] < 1e-3 and worst["expanded", 1e-3] > 1e-2, worst
    # float64 inputs: a float64 table accumulated in float64 (difference form: exact to 1e-12
    # at 1e-5 apart)
    sq = triton_ida.fused_pair_sq(q, k, config("difference"), force=True)
    exact = (q[:, None] - k[None]).square().sum(-1)
    assert sq.dtype == torch.float64
    assert ((sq - exact).abs() / exact)[torch.eye(48, dtype=torch.bool)].max() < 1e-12
    with pytest.raises(
        ValueError, match="^the fused inverse-distance kernels cannot run: tensors on cpu$"
    ):
        triton_ida.fused_pair_sq(q, k)  # without force, CPU tensors are refused


# --------------------------------------------------------------------------- dispatch


def test_cpu_runs_the_reference_and_refusals_name_their_reason(caplog):
    """Without force, CPU tensors never take the kernels (DenseHIDA returns the reference);
    a sphere metric, a per-query mask or force on a refused call say why."""
    q, k, v, _ = inputs("poincare", n_q=6, n_k=9, dim=3, dim_v=2)
    assert triton_ida.fusion_refusal(q, k, v, "poincare") == "tensors on cpu"
    assert triton_ida.fused_or_none(q, k, v, EPS, "poincare") is None
    out, none = DenseHIDA(DenseHIDAConfig(eps=EPS))(q, k, v, need_weights=False)
    assert none is None
    torch.testing.assert_close(out, ida.inverse_distance_attention(q, k, v, EPS, "poincare")[0])
    assert "sphere" in triton_ida.fusion_refusal(q, k, v, "sphere", force=True)
    per_query = torch.ones(6, 9, dtype=torch.bool)
    per_query[0, 0] = False
    assert "differs between queries" in triton_ida.fusion_refusal(
        q, k, v, "poincare", per_query, force=True
    )
    with pytest.raises(ValueError, match="sphere"):
        triton_ida.fused_or_none(q, k, v, EPS, "sphere", force=True)
    with pytest.raises(ValueError, match="^KernelConfig.form must be one of"):
        triton_ida.KernelConfig(form="cdist")
    # the mask and the key masses reach the refusal; a refusal on a CPU is not logged
    with pytest.raises(ValueError, match="differs between queries"):
        triton_ida.fused_or_none(q, k, v, EPS, "poincare", per_query, force=True)
    with pytest.raises(ValueError, match="different dtypes"):
        triton_ida.fused_or_none(q, k, v, EPS, "poincare", key_mass=k[:, 0].double(), force=True)
    with caplog.at_level(logging.WARNING, logger=triton_ida.__name__):
        assert triton_ida.fused_or_none(q, k, v, EPS, "poincare", per_query) is None
    assert not caplog.records


def test_kernel_config_and_refusals_before_any_launch():
    """KernelConfig's blocks are powers of two >= 16 and near lies in (0, 1), each refused at
    its boundary; with force on CPU, the checks that precede triton name their reason (mixed
    dtypes, no keys, feature dims above MAX_DIM = 256); the key-mask reduction accepts a mask
    [Nk], [..., 1, Nk], one expanded over the queries (stride 0) or any mask for one query."""
    for bad, message in [
        (dict(block_q=8), "block_q must be a power of two >= 16"),
        (dict(block_k=48), "block_k must be a power of two >= 16"),
        (dict(near=0.0), "near must lie in"),
        (dict(near=1.0), "near must lie in"),
    ]:
        with pytest.raises(ValueError, match=message):
            triton_ida.KernelConfig(**bad)
    assert triton_ida.KernelConfig(block_q=16, block_k=64, near=0.5).block_k == 64
    q, k, v, _ = inputs("euclidean", n_q=6, n_k=9, dim=3, dim_v=2)
    refusal = lambda *a, **kw: triton_ida.fusion_refusal(*a, force=True, **kw)  # noqa: E731
    assert refusal(q, k.double(), v, "euclidean") == "inputs of different dtypes or devices"
    assert refusal(q, k[:0], v[:0], "euclidean") == "no keys"
    assert refusal(q, k, v, "euclidean", key_mass=torch.ones(9).double()) == (
        "inputs of different dtypes or devices"
    )
    wide = torch.zeros(1, 9, 257)  # batched: the feature dim is the last, not the second
    assert refusal(q[None], k[None], wide, "euclidean") == "feature dims above 256"
    assert refusal(q[None], k[None], wide[..., :256], "euclidean") != "feature dims above 256"
    wide_q = torch.zeros(1, 2, 257)
    assert refusal(wide_q, wide_q, v[None], "euclidean") == "feature dims above 256"
    keys = torch.tensor([True] * 4 + [False] + [True] * 4)
    key_mask = triton_ida._key_mask
    for mask in (keys, keys[None], keys.expand(6, 9)):
        assert torch.equal(key_mask(mask), keys)
    per_query = keys.repeat(6, 1)
    per_query[0, 0] = False
    assert key_mask(per_query) is None and key_mask(per_query[:2]) is None
    assert torch.equal(key_mask(per_query[:1]), per_query[0])
    assert refusal(q[:2], k, v, "euclidean", per_query[:2]) == (
        "a mask that differs between queries (the kernels take key masks [..., 1, Nk])"
    )


def test_refusals_after_importing_triton_and_whether_the_interpreter_is_active(monkeypatch):
    """With the kernels missing, imported under another TRITON_INTERPRET than triton, or
    compiled (not interpreted) on a CPU, a forced call is refused by name and the interpreter
    is not active; it is where both agree on interpreting."""
    assert triton_ida.interpreter_active() is IN_PROCESS
    q, k, v, _ = inputs("euclidean", n_q=6, n_k=9, dim=3, dim_v=2)
    cases = [
        (None, "triton is not installed"),
        (
            SimpleNamespace(INTERPRETED=True, MODES_AGREE=False),
            "TRITON_INTERPRET changed between importing triton and importing the kernels",
        ),
        (
            SimpleNamespace(INTERPRETED=False, MODES_AGREE=True),
            "tensors on cpu need TRITON_INTERPRET=1 before triton is imported",
        ),
    ]
    for kernels, reason in cases:
        monkeypatch.setattr(triton_ida, "_kernels", lambda kernels=kernels: kernels)
        assert triton_ida.fusion_refusal(q, k, v, "euclidean", force=True) == reason
        assert triton_ida.interpreter_active() is False
    both = SimpleNamespace(INTERPRETED=True, MODES_AGREE=True)
    monkeypatch.setattr(triton_ida, "_kernels", lambda: both)
    assert triton_ida.interpreter_active() is True
    assert triton_ida.fusion_refusal(q, k, v, "euclidean", force=True) is None


@interpreted
def test_the_public_entry_point_takes_the_kernels_only_where_they_apply():
    """fused_inverse_distance_attention: on CPU tensors the reference itself (bit for bit),
    forced under the interpreter the kernels (to 1e-4 of the reference), masks and masses
    passed through; a refused forced call raises."""
    q, k, v, mass = inputs("poincare", n_q=6, n_k=9, dim=3, dim_v=2)
    mask = torch.tensor([True] * 4 + [False] + [True] * 4)
    entry = triton_ida.fused_inverse_distance_attention
    want = ida.inverse_distance_attention(q, k, v, EPS, "poincare", mask, key_mass=mass)[0]
    torch.testing.assert_close(entry(q, k, v, EPS, "poincare", mask, mass), want, rtol=0, atol=0)
    cfg = config("expanded", "dot")
    got = entry(q, k, v, EPS, "poincare", mask, mass, force=True, config=cfg)
    assert not torch.equal(got, want)  # the kernels ran: float32 rounding differs
    assert torch.equal(got, fused("poincare", EPS, mask, "expanded", "dot")(q, k, v, mass))
    assert_close_rel([got.double()], [reference("poincare", EPS, mask)(q, k, v, mass)])
    with pytest.raises(ValueError, match="sphere"):
        entry(q, k, v, EPS, "sphere", force=True)


@interpreted
def test_a_mask_equal_for_every_query_is_a_key_mask():
    q, k, v, _ = inputs("euclidean", n_q=6, n_k=9, dim=3, dim_v=2)
    keys = torch.tensor([True] * 4 + [False] + [True] * 4)
    assert triton_ida.fusion_refusal(q, k, v, "euclidean", keys.expand(6, 9), force=True) is None
    a = fused("euclidean", EPS, keys.expand(2, 6, 9))(q, k, v)
    torch.testing.assert_close(a, fused("euclidean", EPS, keys)(q, k, v))


def test_interpreter_tests_in_a_fresh_process():
    """Where this process could not switch the interpreter on, the tests above run in one that
    starts with TRITON_INTERPRET=1."""
    if IN_PROCESS or _FRESH:
        pytest.skip("the interpreter tests ran in this process")
    root = Path(__file__).resolve().parents[2]
    env = child_env(TRITON_INTERPRET="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "run by the fresh-process test" not in run.stdout, run.stdout[-3000:]  # they ran


def test_without_the_interpreter_cpu_tensors_are_refused_by_name():
    """A process that imports triton without TRITON_INTERPRET (a CPU machine): the interpreter
    is not active, and forced CPU calls are refused because the interpreter must be chosen
    before triton is imported."""
    root = Path(__file__).resolve().parents[2]
    code = (
        "import torch, triton\n"
        "from world_model.attention import triton_ida\n"
        "x = torch.zeros(2, 3)\n"
        "print(triton_ida.interpreter_active())\n"
        "print(triton_ida.fusion_refusal(x, x, x, 'euclidean', force=True))\n"
    )
    env = child_env()
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    active, refusal = run.stdout.strip().splitlines()
    assert active == "False"
    assert refusal == "tensors on cpu need TRITON_INTERPRET=1 before triton is imported"


# --------------------------------------------------------------------------- on a GPU


@on_cuda
@pytest.mark.parametrize("metric", triton_ida.FUSED_METRICS)
def test_compiled_kernels_match_the_reference_on_cuda(metric):
    if IN_PROCESS:
        pytest.skip("this process interprets the kernels")
    tensors = [t.cuda() for t in inputs(metric, n_q=300, n_k=250, dim=32, dim_v=16)]
    got = outputs_and_grads(
        lambda q, k, v, m: triton_ida.fused_or_none(q, k, v, EPS, metric, key_mass=m), tensors
    )
    want = outputs_and_grads(reference(metric, EPS), tensors)
    assert_close_rel(got, want)


@on_cuda
def test_dense_hida_takes_the_kernels_on_cuda_and_logs_a_refusal_once(monkeypatch, caplog):
    if IN_PROCESS:
        pytest.skip("this process interprets the kernels")
    calls = []
    original = triton_ida._fused
    monkeypatch.setattr(triton_ida, "_fused", lambda *a: calls.append(1) or original(*a))
    monkeypatch.setattr(triton_ida, "_LOGGED", set())
    q, k, v, _ = (t.cuda() for t in inputs("poincare", n_q=40, n_k=50, dim=8, dim_v=4))
    DenseHIDA(DenseHIDAConfig(eps=EPS))(q.requires_grad_(), k, v, need_weights=False)
    assert calls == [1]
    x = torch.nn.functional.normalize(q.detach(), dim=-1)
    with caplog.at_level(logging.WARNING, logger=triton_ida.__name__):
        for _ in range(2):
            DenseHIDA(DenseHIDAConfig(metric="sphere"))(x, x[0], x[0], need_weights=False)
    assert len([r for r in caplog.records if "sphere" in r.getMessage()]) == 1
