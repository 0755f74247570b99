"""world_model/attention/hida.py: the four HIDA operators (seed 000 M1-M4; defined in
world_model/attention/hida_dense.py, hida_fp.py, hida_anchor.py, hida_compressed.py and
re-exported by hida.py) against independent re-computations of their definitions (brute-force
index sets, geoopt distances and maps, a sequential online k-means), their weights as the exact
linear map values -> out, masks, batch dims, finite values and gradients at |z| = 1 - 1e-5, and
their configs' errors."""

from __future__ import annotations

import dataclasses
import math

import geoopt
import pytest
import torch

from tests.conftest import ball_points
from world_model.attention import ida
from world_model.attention.hida import (
    CHIDA,
    FPHIDA,
    LHIDA,
    CHIDAConfig,
    CHIDAState,
    DenseHIDA,
    DenseHIDAConfig,
    FPHIDAConfig,
    LHIDAConfig,
    c_hida_empty_state,
    c_hida_ingest,
    fp_attention,
    fp_index_set,
    l_hida_attention,
)

BALL = geoopt.PoincareBall(c=1.0)
F64 = torch.float64


def data(n_q, n_k, d=3, dv=2, seed=0, max_norm=0.9, dtype=F64):
    q = ball_points(n_q, d, max_norm, dtype=dtype, seed=seed)
    k = ball_points(n_k, d, max_norm, dtype=dtype, seed=seed + 1)
    v = torch.randn(n_k, dv, dtype=dtype, generator=torch.Generator().manual_seed(seed + 2))
    return q, k, v


def seed_fp_bound(n, w, g):
    """Seed 000 Thm 5.4's bound on |S_i|: (2w + 1) + g + 2(⌈log2 n⌉ + 1) + 1."""
    return (2 * w + 1) + g + 2 * ((math.ceil(math.log2(n)) if n > 1 else 0) + 1) + 1


def brute_index_set(p, n, w, g, causal):
    """Seed 000 Def 5.2 written out with Python sets."""
    s = {j for j in range(p - w, p + w + 1)}
    s |= {(t * n) // g for t in range(g)}
    top = math.ceil(math.log2(n)) if n > 1 else 0
    s |= {p + 2**k for k in range(top + 1)} | {p - 2**k for k in range(top + 1)} | {p}
    return sorted(j for j in s if 0 <= j < n and (not causal or j <= p))


# =========================================================================== Dense


def test_dense_equals_the_function_with_and_without_query_chunks():
    q, k, v = data(10, 17)
    mask = torch.rand(10, 17, generator=torch.Generator().manual_seed(3)) > 0.3
    ref_out, ref_w = ida.inverse_distance_attention(q, k, v, 0.05, "poincare", mask)
    for chunk in (None, 3):
        op = DenseHIDA(DenseHIDAConfig(eps=0.05, query_chunk=chunk))
        out, w = op(q, k, v, mask)
        torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-14)
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-14)
        out2, none = op(q, k, v, mask, need_weights=False)
        assert none is None
        torch.testing.assert_close(out2, ref_out, rtol=0, atol=1e-14)


@pytest.mark.parametrize("metric", ida.METRICS)
def test_dense_serves_all_three_geometries(metric):
    """Dense with metric "euclidean" is the Resolver, with "sphere" SIDA (seed 000 §2, §8.1)."""
    q, k, v = data(5, 8)
    if metric == "sphere":
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    out, w = DenseHIDA(DenseHIDAConfig(eps=0.1, metric=metric))(q, k, v)
    torch.testing.assert_close(w @ v, out)
    torch.testing.assert_close(w.sum(-1), torch.ones(5, dtype=F64))


# =========================================================================== FP


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_fp_index_set_matches_its_definition_and_bound(n, causal):
    w, g = 3, 4
    positions = torch.arange(n + 1)  # includes p = n, a query at "now"
    idx, valid = fp_index_set(positions, n, w, g, causal)
    sizes = []
    for p in range(n + 1):
        got = idx[p][valid[p]].tolist()
        assert got == brute_index_set(p, n, w, g, causal)
        assert len(got) <= seed_fp_bound(n, w, g)  # seed 000 Thm 5.4
        sizes.append(len(got))
    assert idx.shape[1] == max(sizes) and (idx[~valid] == 0).all()  # padded with index 0


def test_fp_index_sets_of_explicit_positions_beyond_now():
    """Explicit positions past the newest key (p > n): the dyadic offsets stop at 2^⌈log2 n⌉,
    so p - 2^(⌈log2 n⌉ + 1) is not in S (n = 5: 20 - 16 = 4 is not; n = 2: 3 - 2 = 1 is)."""
    for p, n in ((20, 5), (3, 2)):
        idx, valid = fp_index_set(torch.tensor([p]), n, 0, 1)
        assert idx[0][valid[0]].tolist() == brute_index_set(p, n, 0, 1, False)


def test_fp_query_at_now_sees_the_recent_past_and_the_dyadic_history():
    n = 1000
    idx, valid = fp_index_set(torch.tensor([n]), n, 4, 5, causal=True)
    got = set(idx[0][valid[0]].tolist())
    assert {996, 997, 998, 999} <= got  # local window, newest entries
    assert {999, 998, 996, 992, 984, 968, 936, 872, 744, 488} <= got  # now - 2^k
    assert {0, 200, 400, 600, 800} <= got  # global anchors
    assert max(got) == n - 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("query_time", ["sequence", "now"])
def test_fp_equals_dense_masked_to_the_index_set(query_time, causal):
    """FP-HIDA = Dense-HIDA with every key outside S_i masked (Def 5.2 + Def 5.1); query i
    stands at position i ("sequence") or at Nk ("now")."""
    q, k, v = data(40, 40 if query_time == "sequence" else 57, seed=4)
    n_q, n_k = q.shape[0], k.shape[0]
    user_mask = torch.rand(n_q, n_k, generator=torch.Generator().manual_seed(5)) > 0.2
    cfg = FPHIDAConfig(eps=0.02, window=2, n_global=3, causal=causal, query_time=query_time)
    op = FPHIDA(dataclasses.replace(cfg, query_chunk=7))
    positions = range(n_q) if query_time == "sequence" else [n_k] * n_q
    index_mask = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i, p in enumerate(positions):
        index_mask[i, brute_index_set(p, n_k, 2, 3, causal)] = True
    out, w = op(q, k, v, user_mask)
    ref_out, ref_w = ida.inverse_distance_attention(
        q, k, v, 0.02, "poincare", user_mask & index_mask
    )
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-13)
    out, w = op(q, k, v)  # no user mask: the index sets alone (their padding never attended)
    ref_out, ref_w = ida.inverse_distance_attention(q, k, v, 0.02, "poincare", index_mask)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-13)


def test_fp_with_a_window_covering_everything_is_dense_and_batches():
    q, k, v = data(2 * 12, 2 * 12, seed=6)
    q, k, v = q.reshape(2, 12, 3), k.reshape(2, 12, 3), v.reshape(2, 12, 2)
    out, w = FPHIDA(FPHIDAConfig(eps=0.01, window=12))(q, k, v)
    ref_out, ref_w = ida.inverse_distance_attention(q, k, v, 0.01, "poincare")
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-13)


def test_fp_explicit_query_positions_and_errors():
    q, k, v = data(3, 20, seed=7)
    op = FPHIDA(FPHIDAConfig(eps=0.01, window=1, n_global=1))
    out, w = op(q, k, v, query_positions=torch.tensor([0, 10, 20]))
    torch.testing.assert_close(w @ v, out)
    assert (w[0, 17:] == 0).all() and w[0, 16] > 0 and w[2, 19] > 0  # 16 = 0 + 2^4
    with pytest.raises(ValueError, match="query_positions must have shape"):
        op(q, k, v, query_positions=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="Nq <= Nk"):
        op(k, q, v[:3])
    with pytest.raises(ValueError, match="^FP-HIDA needs at least one key, got n_keys = 0$"):
        FPHIDA(FPHIDAConfig(query_time="now"))(q, k[:0], v[:0])


# =========================================================================== L


def naive_l_hida(q, k, v, anchors, eps, key_mask=None):
    """Seed 000 Def 5.3 (memberships) with mass-weighted query weights, from geoopt."""
    dka = BALL.dist(k[:, None, :], anchors[None, :, :]) ** 2  # [Nk, m]
    memb = 1.0 / (dka + eps)
    memb = memb / memb.sum(-1, keepdim=True)
    if key_mask is not None:
        memb = memb * key_mask[:, None]
    mass = memb.sum(0)  # [m]
    means = (memb.T @ v) / mass[:, None]
    kqa = mass / (BALL.dist(q[:, None, :], anchors[None, :, :]) ** 2 + eps)  # [Nq, m]
    pi = kqa / kqa.sum(-1, keepdim=True)
    return pi @ means


@pytest.mark.parametrize("chunk", [4, 2048])
def test_l_hida_matches_its_definition_and_weights_are_its_linear_map(chunk):
    q, k, v = data(9, 30, seed=8)
    op = LHIDA(LHIDAConfig(n_anchors=5, dim=3, eps=0.05, chunk=chunk)).double()
    out, w = op(q, k, v)
    anchors = op.anchors.detach()
    torch.testing.assert_close(out, naive_l_hida(q, k, v, anchors, 0.05), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w @ v, out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(9, dtype=F64))


def test_l_hida_with_anchors_on_the_keys_is_dense():
    """m = n anchors placed on the keys, eps small against the keys' separation: L -> Dense."""
    q, k, v = data(7, 12, seed=9)
    eps = 1e-8
    out, w = l_hida_attention(q, k, v, k, eps)
    ref_out, ref_w = ida.inverse_distance_attention(q, k, v, eps, "poincare")
    torch.testing.assert_close(out, ref_out, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)


def test_l_hida_key_mask_drops_keys_and_per_query_masks_are_refused():
    q, k, v = data(4, 10, seed=10)
    op = LHIDA(LHIDAConfig(n_anchors=3, dim=3, eps=0.1)).double()
    keep = torch.tensor([1, 1, 0, 1, 0, 1, 1, 1, 0, 1], dtype=torch.bool)
    out, w = op(q, k, v, keep[None, :])
    ref = naive_l_hida(q, k, v, op.anchors.detach(), 0.1, keep.double())
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    assert (w[:, ~keep] == 0).all()
    with pytest.raises(ValueError, match="only a key mask"):
        op(q, k, v, torch.ones(4, 10, dtype=torch.bool))


def test_l_hida_anchors_train_with_riemannian_adam_inside_the_ball():
    """The anchors are a geoopt ManifoldParameter: RiemannianAdam keeps them in the ball while
    it lowers the error against Dense-HIDA (they are learnable)."""
    torch.manual_seed(0)
    q, k, v = data(64, 128, d=2, seed=11, dtype=torch.float32)
    ref, _ = ida.inverse_distance_attention(q, k, v, 0.05, "poincare")
    op = LHIDA(LHIDAConfig(n_anchors=8, dim=2, eps=0.05, init_radius=0.1))
    assert isinstance(op.anchors, geoopt.ManifoldParameter)
    opt = geoopt.optim.RiemannianAdam(op.parameters(), lr=0.05)
    errors = []
    for _ in range(60):
        out, _ = op(q, k, v, need_weights=False)
        loss = (out - ref).square().mean()
        errors.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert errors[-1] < 0.5 * errors[0]
    assert float(op.anchors.detach().norm(dim=-1).max()) < 1.0


# =========================================================================== C


def naive_online_kmeans(keys, values, c, max_norm):
    """Sequential online hyperbolic k-means with geoopt's maps: the first c keys open the
    summaries; each later key x moves its nearest summary s by exp_s(log_s(x) / (n_s + 1))."""
    centers, means, counts = [], [], []
    for x, val in zip(keys, values, strict=True):
        if len(centers) < c:
            centers.append(x.clone())
            means.append(val.clone())
            counts.append(1.0)
            continue
        dist = torch.stack([BALL.dist(x, s) for s in centers])
        j = int(dist.argmin())
        counts[j] += 1.0
        step = BALL.logmap(centers[j], x) / counts[j]
        new = BALL.expmap(centers[j], step, project=False)
        centers[j] = new * (max_norm / new.norm()).clamp_max(1.0)
        means[j] = means[j] + (val - means[j]) / counts[j]
    return torch.stack(centers), torch.stack(means), torch.tensor(counts, dtype=keys.dtype)


def test_c_hida_sequential_ingest_is_online_hyperbolic_kmeans():
    q, k, v = data(6, 40, seed=12, max_norm=0.95)
    cfg = CHIDAConfig(n_summaries=4, key_dim=3, value_dim=2, eps=0.05, ingest_chunk=1)
    op = CHIDA(cfg).double()
    out, w = op(q, k, v)
    centers, means, counts = naive_online_kmeans(k, v, 4, cfg.max_norm)
    state = c_hida_empty_state((), 4, 3, 2, like=k)
    for i in range(40):
        state, _ = c_hida_ingest(state, k[i : i + 1], v[i : i + 1])
    torch.testing.assert_close(state.centers, centers, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(state.value_means, means, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(state.counts, counts)
    ref_out, _ = ida.inverse_distance_attention(
        q, centers, means, 0.05, "poincare", key_mass=counts
    )
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(w @ v, out, rtol=1e-9, atol=1e-11)  # exact map values -> out
    torch.testing.assert_close(w.sum(-1), torch.ones(6, dtype=F64))


def test_c_hida_minibatch_value_means_are_exact_and_persistent_state_matches_forward():
    q, k, v = data(5, 100, seed=13)
    cfg = CHIDAConfig(n_summaries=6, key_dim=3, value_dim=2, eps=0.05, ingest_chunk=16)
    op = CHIDA(cfg).double()
    out, w = op(q, k, v)
    assert float(op.counts.sum()) == 0.0  # forward leaves the persistent state alone
    slots = torch.cat([op.ingest(k[s : s + 16], v[s : s + 16]) for s in range(0, 100, 16)])
    read_out, pi = op.read(q)
    torch.testing.assert_close(read_out, out, rtol=1e-12, atol=1e-13)
    assert float(op.counts.sum()) == 100.0 and pi.shape == (5, 6)
    for j in range(6):  # value means are the exact means of the values assigned to each slot
        torch.testing.assert_close(op.value_means[j], v[slots == j].mean(0), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w @ v, out, rtol=1e-10, atol=1e-12)
    clone = CHIDA(cfg).double()
    clone.load_state_dict(op.state_dict())
    torch.testing.assert_close(clone.read(q)[0], read_out)


def test_c_hida_key_mask_skips_keys_and_batches():
    q, k, v = data(2 * 4, 2 * 30, seed=14)
    q, k, v = q.reshape(2, 4, 3), k.reshape(2, 30, 3), v.reshape(2, 30, 2)
    keep = torch.rand(2, 1, 30, generator=torch.Generator().manual_seed(15)) > 0.3
    # ingest_chunk=1: skipping a key must equal never seeing it (chunks of raw keys would
    # group the remaining keys differently into mini-batches)
    op = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1, ingest_chunk=1)).double()
    out, w = op(q, k, v, keep)
    for b in range(2):
        sub, _ = op(q[b], k[b][keep[b, 0]], v[b][keep[b, 0]])
        torch.testing.assert_close(out[b], sub, rtol=1e-12, atol=1e-13)
    assert (w[~keep.expand(2, 4, 30)] == 0).all()
    with pytest.raises(ValueError, match="only a key mask"):
        op(q, k, v, torch.ones(2, 4, 30, dtype=torch.bool))


def test_c_hida_fewer_keys_than_summaries_and_empty_reads():
    op = CHIDA(CHIDAConfig(n_summaries=8, key_dim=2, value_dim=1, eps=0.1))
    out, pi = op.read(torch.zeros(1, 2))
    assert (out == 0).all() and (pi == 0).all()  # nothing stored yet: zero readout, no NaN
    op.ingest(torch.tensor([[0.1, 0.2], [0.3, -0.1]]), torch.tensor([[1.0], [3.0]]))
    out, pi = op.read(torch.tensor([[0.1, 0.2]]))
    assert float(op.counts.sum()) == 2.0 and (pi[0, 2:] == 0).all() and 1.0 < float(out) < 3.0


def test_c_hida_with_fewer_keys_than_summaries_is_dense_hida_through_forward_and_ingest():
    """With no more keys than summaries every key opens a summary of its own (center the key,
    value mean its value, count 1), so C-HIDA is Dense-HIDA over the keys: an independent
    reference for how many summaries a batch opens, through forward (one chunk, chunks of 3, of
    1) and through ingest in batches of 4, 1 and 6 (11 keys, 12 summaries), then of 1 more key,
    which opens the last free summary."""
    q, k, v = data(6, 12, seed=18)
    eps = 0.05
    tol = dict(rtol=1e-12, atol=1e-13)
    dense = DenseHIDA(DenseHIDAConfig(eps=eps))
    for n in (11, 12):
        dense_out, dense_w = dense(q, k[:n], v[:n])
        for chunk in (256, 3, 1):
            cfg = CHIDAConfig(n_summaries=12, key_dim=3, value_dim=2, eps=eps, ingest_chunk=chunk)
            out, w = CHIDA(cfg).double()(q, k[:n], v[:n])
            torch.testing.assert_close(out, dense_out, **tol)
            torch.testing.assert_close(w, dense_w, **tol)
    op = CHIDA(CHIDAConfig(n_summaries=12, key_dim=3, value_dim=2, eps=eps)).double()
    slots = torch.cat([op.ingest(k[a:b], v[a:b]) for a, b in ((0, 4), (4, 5), (5, 11))])
    assert slots.tolist() == list(range(11))  # each key its own slot, in time order
    assert op.counts.tolist() == [1.0] * 11 + [0.0]
    torch.testing.assert_close(op.centers[:11], k[:11], rtol=0, atol=0)  # opened at the key
    torch.testing.assert_close(op.value_means[:11], v[:11], rtol=0, atol=0)
    dense_out, dense_w = dense(q, k[:11], v[:11])
    read_out, pi = op.read(q)
    torch.testing.assert_close(read_out, dense_out, **tol)
    torch.testing.assert_close(pi[:, :11], dense_w, **tol)
    assert (pi[:, 11] == 0).all()  # the summary never opened is never read
    assert op.ingest(k[11:], v[11:]).tolist() == [11]  # the last free summary
    dense_out, dense_w = dense(q, k, v)
    read_out, pi = op.read(q)
    torch.testing.assert_close(read_out, dense_out, **tol)
    torch.testing.assert_close(pi, dense_w, **tol)


def test_c_hida_a_batch_opens_exactly_the_summaries_still_free():
    """8 summaries, batches of 5 and 5: the second batch's first 3 keys open slots 5-7 and its
    last 2 move their nearest summary (geoopt's distance to the 8 opened keys), by the
    Riemannian mini-batch step exp_s(sum log_s(k_i) / (1 + b)) (module docstring)."""
    _, k, v = data(1, 10, seed=19)
    op = CHIDA(CHIDAConfig(n_summaries=8, key_dim=3, value_dim=2, eps=0.05)).double()
    first, second = op.ingest(k[:5], v[:5]), op.ingest(k[5:], v[5:])
    nearest = BALL.dist(k[8:, None, :], k[None, :8, :]).argmin(-1)  # [2]
    assert first.tolist() == [0, 1, 2, 3, 4]
    assert second.tolist() == [5, 6, 7, *nearest.tolist()]
    counts = torch.ones(8, dtype=F64).index_add(0, nearest, torch.ones(2, dtype=F64))
    torch.testing.assert_close(op.counts, counts, rtol=0, atol=0)
    for j in range(8):
        movers = k[8:][nearest == j]
        step = BALL.logmap(k[j], movers).sum(0) / (1 + len(movers))
        center = BALL.expmap(k[j], step, project=False)
        torch.testing.assert_close(op.centers[j], center, rtol=1e-10, atol=1e-12)
        mean = torch.cat([v[j : j + 1], v[8:][nearest == j]]).mean(0)
        torch.testing.assert_close(op.value_means[j], mean, rtol=1e-10, atol=1e-12)


# =========================================================================== all four


def _operators(d, dv, eps):
    return {
        "dense": DenseHIDA(DenseHIDAConfig(eps=eps)),
        "fp": FPHIDA(FPHIDAConfig(eps=eps, window=2, n_global=2)),
        "l": LHIDA(LHIDAConfig(n_anchors=4, dim=d, eps=eps)),
        "c": CHIDA(CHIDAConfig(n_summaries=4, key_dim=d, value_dim=dv, eps=eps, ingest_chunk=5)),
    }


@pytest.mark.parametrize("name", ["dense", "fp", "l", "c"])
def test_float32_finite_values_and_gradients_at_the_boundary(name):
    """Queries and keys at |z| = 1 - 1e-5, a query equal to a key, float32: finite outputs and
    gradients for every operator (and L's anchors)."""
    k = ball_points(16, 3, 1 - 1e-5, dtype=torch.float32, seed=16, min_norm=1 - 1e-5)
    k = k.requires_grad_(True)
    q = torch.cat([k.detach()[:3], 0.5 * k.detach()[3:6]]).requires_grad_(True)
    v = torch.randn(16, 2, requires_grad=True)
    op = _operators(3, 2, 1e-4)[name]
    out, w = op(q, k, v)
    (out.square().sum() + w.square().sum()).backward()
    for t in (out, w, q.grad, k.grad, v.grad):
        assert torch.isfinite(t).all()
    if name == "l":
        assert torch.isfinite(op.anchors.grad).all()


@pytest.mark.parametrize("name", ["dense", "fp", "l", "c"])
def test_call_shape_and_weights_are_the_linear_map(name):
    """base.py's call shape: out [..., Nq, dv], weights [..., Nq, Nk] with out = weights @ v and
    rows summing to 1; batch dims broadcast."""
    q, k, v = data(2 * 6, 2 * 9, seed=17)
    q, k, v = q.reshape(2, 6, 3), k.reshape(2, 9, 3), v.reshape(2, 9, 2)
    op = _operators(3, 2, 0.05)[name].double()
    out, w = op(q, k, v)
    assert out.shape == (2, 6, 2) and w.shape == (2, 6, 9)
    torch.testing.assert_close(w @ v, out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6, dtype=F64))
    out2, none = op(q, k, v, need_weights=False)
    assert none is None
    torch.testing.assert_close(out2, out)


def test_configs_and_inputs_get_one_clear_error():
    q, k, v = data(3, 5)
    cases = [
        (lambda: DenseHIDAConfig(eps=0), "^eps must be"),
        (lambda: DenseHIDAConfig(metric="klein"), "^DenseHIDAConfig.metric must be one of"),
        (lambda: DenseHIDAConfig(query_chunk=0), "^query_chunk must be an integer >= 1, got 0$"),
        (lambda: FPHIDAConfig(window=-1), "window must be"),
        (lambda: FPHIDAConfig(n_global=0), "n_global must be"),
        (lambda: FPHIDAConfig(query_time="later"), "^FPHIDAConfig.query_time must be one of"),
        (lambda: FPHIDAConfig(query_chunk=0), "^query_chunk must be an integer >= 1, got 0$"),
        (lambda: LHIDAConfig(n_anchors=None), "^n_anchors must be an integer >= 1, got None$"),
        (lambda: DenseHIDA()(1.5 * q / q.norm(dim=-1, keepdim=True), k, v), "^queries must lie"),
        (lambda: DenseHIDA()(q, 1.5 * k / k.norm(dim=-1, keepdim=True), v), "^keys must lie"),
        (lambda: DenseHIDA(DenseHIDAConfig(metric="sphere"))(q, k, v), "^queries must be unit"),
        (lambda: LHIDAConfig(n_anchors=0), "^n_anchors must be an integer >= 1, got 0$"),
        (lambda: LHIDAConfig(dim=0), "^dim must be an integer >= 1, got 0$"),
        (lambda: LHIDAConfig(chunk=0), "^chunk must be an integer >= 1, got 0$"),
        (lambda: LHIDAConfig(init_radius=1.0), "init_radius must lie"),
        (lambda: CHIDAConfig(max_norm=1.0), "max_norm must lie"),
        (lambda: CHIDAConfig(n_summaries=0), "^n_summaries must be an integer >= 1, got 0$"),
        (lambda: CHIDAConfig(key_dim=0), "^key_dim must be an integer >= 1, got 0$"),
        (lambda: CHIDAConfig(value_dim=0), "^value_dim must be an integer >= 1, got 0$"),
        (lambda: CHIDAConfig(ingest_chunk=0), "^ingest_chunk must be"),
        (lambda: LHIDA(LHIDAConfig(dim=4))(q, k, v), "keys must have dim 4"),
        (lambda: LHIDA(LHIDAConfig(n_anchors=9, dim=3)).init_anchors_from_keys(k), "at least"),
        (lambda: CHIDA(CHIDAConfig(key_dim=3, value_dim=2)).ingest(k[0], v), "keys must have"),
        (lambda: CHIDA(CHIDAConfig(key_dim=3, value_dim=3)).ingest(k, v), "values must have"),
        (lambda: CHIDA(CHIDAConfig(key_dim=3)).read(q[:, :2]), "queries must have"),
        (lambda: DenseHIDA()(q, 2 * k / k.norm(dim=-1, keepdim=True), v), "Poincare ball"),
        (lambda: FPHIDA()(q, k, v[:4]), "same number of entries"),
        (lambda: CHIDA(CHIDAConfig(key_dim=3, value_dim=2))(q, k[:, :2], v), "last dim"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_c_hida_state_type():
    state = c_hida_empty_state((2,), 3, 4, 5, like=torch.zeros(1))
    assert isinstance(state, CHIDAState)
    assert state.centers.shape == (2, 3, 4) and state.value_means.shape == (2, 3, 5)


# =========================================================================== edges


def test_fp_default_sizes_are_ceil_log2_n_at_least_one():
    """FPHIDAConfig's window and n_global None: w = g = max(⌈log2 Nk⌉, 1) (the seed's
    Theta(log n)), written out for Nk = 1, 2, 3, 100; window 0 is a valid config; no keys is
    an error."""
    op = FPHIDA()
    assert [op.sizes(n) for n in (1, 2, 3, 100)] == [(1, 1), (1, 1), (2, 2), (7, 7)]
    assert FPHIDA(FPHIDAConfig(window=0, n_global=1)).sizes(100) == (0, 1)
    idx, valid = fp_index_set(torch.tensor([5]), 9, 0, 1)
    assert idx[0][valid[0]].tolist() == brute_index_set(5, 9, 0, 1, False)
    with pytest.raises(ValueError, match="at least one key"):
        fp_index_set(torch.tensor([0]), 0, 1, 1)


def test_a_one_dimensional_key_mask_in_query_chunks_equals_the_dense_mask():
    """A key mask [Nk] (no query axis) through Dense's and FP's query chunks, and through L and
    C (which reduce masks to key masks): the same as the [1, Nk] mask; Dense equals the
    function with the mask broadcast over the queries."""
    q, k, v = data(7, 12, seed=20)
    keep = torch.tensor([1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.bool)
    ref_out, ref_w = ida.inverse_distance_attention(q, k, v, 0.05, "poincare", keep.expand(7, 12))
    dense = DenseHIDA(DenseHIDAConfig(eps=0.05, query_chunk=3))
    fp = FPHIDA(FPHIDAConfig(eps=0.05, window=12, query_chunk=3))
    lh = LHIDA(LHIDAConfig(n_anchors=3, dim=3, eps=0.05)).double()
    ch = CHIDA(CHIDAConfig(n_summaries=4, key_dim=3, value_dim=2, eps=0.05)).double()
    for op in (dense, fp, lh, ch):
        out, w = op(q, k, v, keep)
        out2, w2 = op(q, k, v, keep[None, :])
        torch.testing.assert_close(out, out2, rtol=0, atol=0)
        torch.testing.assert_close(w, w2, rtol=0, atol=0)
        assert (w[:, ~keep] == 0).all()
        if op in (dense, fp):  # a window covering every key: FP is Dense
            torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-13)
            torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-13)


def test_every_operator_checks_its_points_and_can_skip_the_check():
    """check_inputs (default on): a key outside the ball is refused by each operator's call,
    C's ingest and C's read; with check_inputs=False Dense does not look (and returns finite
    output on points inside the ball)."""
    q, k, v = data(3, 5)
    out_k = 1.5 * k / k.norm(dim=-1, keepdim=True)
    for op in _operators(3, 2, 0.05).values():
        with pytest.raises(ValueError, match="Poincare ball"):
            op.double()(q, out_k, v)
    chida = CHIDA(CHIDAConfig(n_summaries=2, key_dim=3, value_dim=2)).double()
    with pytest.raises(ValueError, match="Poincare ball"):
        chida.ingest(out_k, v)
    with pytest.raises(ValueError, match="Poincare ball"):
        chida.read(out_k)
    unchecked = DenseHIDA(DenseHIDAConfig(eps=0.05, check_inputs=False))
    out, _ = unchecked(q, out_k, v)  # outside the ball: d_H is not defined, nothing refused
    torch.testing.assert_close(
        unchecked(q, k, v)[0], DenseHIDA(DenseHIDAConfig(eps=0.05))(q, k, v)[0]
    )
    assert out.shape == (3, 2)


def test_l_hida_anchors_start_inside_init_radius_and_can_be_drawn_from_the_keys():
    """LHIDA's anchors start within init_radius; init_anchors_from_keys sets them to m distinct
    keys (m = N: a permutation of the keys); too few keys or the wrong dim is refused."""
    torch.manual_seed(0)
    op = LHIDA(LHIDAConfig(n_anchors=6, dim=3, init_radius=0.2))
    assert float(op.anchors.detach().norm(dim=-1).max()) <= 0.2 + 1e-6
    _, k, _ = data(1, 6, seed=21)
    op.init_anchors_from_keys(k, torch.Generator().manual_seed(1))
    a = op.anchors.detach().double()
    match = (a[:, None, :] - k[None, :, :]).abs().amax(-1) < 1e-6  # [m, N]
    assert (match.sum(-1) == 1).all() and (match.sum(0) == 1).all()
    with pytest.raises(ValueError, match="at least n_anchors = 6 keys of dim 3"):
        op.init_anchors_from_keys(k[:5])
    with pytest.raises(ValueError, match="at least n_anchors = 6 keys of dim 3"):
        op.init_anchors_from_keys(torch.cat([k, k], -1)[:, :4])
    for bad, message in [
        (lambda: LHIDAConfig(init_radius=0.0), "init_radius must lie"),
        (lambda: CHIDAConfig(max_norm=0.0), "max_norm must lie"),
        (lambda: LHIDAConfig(n_anchors=True), "n_anchors must be an integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            bad()


def test_c_hida_reset_empties_the_persistent_state():
    op = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1)).double()
    _, k, v = data(1, 5, seed=22)
    op.ingest(k, v)
    assert float(op.counts.sum()) == 5.0
    op.reset()
    assert (op.centers == 0).all() and (op.value_means == 0).all() and (op.counts == 0).all()
    assert op.ingest(k[:2], v[:2]).tolist() == [0, 1]  # slots open from 0 again


# =========================================================================== mutation-found edges


@pytest.mark.parametrize("name", ["dense", "fp", "l", "c"])
def test_no_queries_give_empty_outputs(name):
    """Nq = 0: out [0, dv] and weights [0, Nk] (no chunk to join), with and without weights."""
    q, k, v = data(0, 7, seed=30)
    op = _operators(3, 2, 0.05)[name].double()
    out, w = op(q, k, v)
    assert out.shape == (0, 2) and w.shape == (0, 7)
    out, none = op(q, k, v, need_weights=False)
    assert out.shape == (0, 2) and none is None


@pytest.mark.parametrize("name", ["dense", "fp", "l"])
def test_two_query_chunks_over_a_batch_equal_one_chunk(name):
    """Exactly two query chunks over batched queries [2, 6, d] (keys and values broadcast): the
    joined chunks equal the one-chunk call, weights included."""
    q, k, v = data(12, 9, seed=31)
    q = q.reshape(2, 6, 3)
    mask = torch.rand(9, generator=torch.Generator().manual_seed(32)) > 0.3
    mask[0] = True
    one, two = {
        "dense": lambda: [DenseHIDA(DenseHIDAConfig(eps=0.05, query_chunk=c)) for c in (None, 3)],
        "fp": lambda: [FPHIDA(FPHIDAConfig(eps=0.05, window=9, query_chunk=c)) for c in (6, 3)],
        "l": lambda: _two_l_hida_chunks(),
    }[name]()
    for m in (None, mask):
        out1, w1 = one(q, k, v, m)
        out2, w2 = two(q, k, v, m)
        assert out2.shape == (2, 6, 2) and w2.shape == (2, 6, 9)
        torch.testing.assert_close(out2, out1, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(w2, w1, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(two(q, k, v, m, need_weights=False)[0], out1)


def _two_l_hida_chunks():
    one = LHIDA(LHIDAConfig(n_anchors=4, dim=3, eps=0.05)).double()
    two = LHIDA(LHIDAConfig(n_anchors=4, dim=3, eps=0.05, chunk=3)).double()
    two.load_state_dict(one.state_dict())
    return one, two


def test_l_hida_chunk_setting_sets_the_key_pieces(monkeypatch):
    """LHIDAConfig.chunk bounds the [chunk, m] intermediates: 10 keys with chunk 4 are
    summarised in three pieces (4 + 4 + 2 keys), with the default in one."""
    from world_model.attention import hida_anchor

    seen = []
    original = hida_anchor.anchor_memberships
    monkeypatch.setattr(
        hida_anchor, "anchor_memberships", lambda k, *a: seen.append(k.shape[-2]) or original(k, *a)
    )
    q, k, v = data(3, 10, seed=33)
    LHIDA(LHIDAConfig(n_anchors=2, dim=3, chunk=4)).double()(q, k, v, need_weights=False)
    assert seen == [4, 4, 2]
    seen.clear()
    LHIDA(LHIDAConfig(n_anchors=2, dim=3)).double()(q, k, v, need_weights=False)
    assert seen == [10]


def test_l_hida_anchors_start_as_capped_exp0_of_half_gaussians_on_the_unit_ball():
    """The anchors' start: proj_r(exp_0(0.5 xi)), xi ~ N(0, I) from torch's global generator,
    r = init_radius; a geoopt ManifoldParameter on the ball of curvature -1."""
    torch.manual_seed(5)
    op = LHIDA(LHIDAConfig(n_anchors=7, dim=3, init_radius=0.9))
    torch.manual_seed(5)
    xi = torch.randn(7, 3)
    start = BALL.expmap0(0.5 * xi)
    norm = start.norm(dim=-1, keepdim=True)
    want = torch.where(norm > 0.9, start * 0.9 / norm, start)
    torch.testing.assert_close(op.anchors.detach(), want, rtol=1e-5, atol=1e-6)
    assert isinstance(op.anchors.manifold, geoopt.PoincareBall)
    assert float(op.anchors.manifold.c) == 1.0


def test_l_hida_casts_its_anchors_to_the_queries_dtype():
    """A float32 module on float64 inputs computes in float64 with its anchors cast, and a
    float64 module on float32 inputs in float32 (the inputs' dtype, not the anchors')."""
    q, k, v = data(4, 8, seed=34)
    op = LHIDA(LHIDAConfig(n_anchors=3, dim=3, eps=0.05))
    out, w = op(q, k, v)
    ref_out, ref_w = l_hida_attention(q, k, v, op.anchors.detach().double(), 0.05)
    assert out.dtype == F64
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-14)
    op.double().init_anchors_from_keys(k[:3] / 3)  # anchors float32 cannot hold exactly
    q, k, v = q.float(), k.float(), v.float()
    out32, _ = op(q, k, v)  # exactly the float32 computation
    want, _ = l_hida_attention(q, k, v, op.anchors.detach().float(), 0.05)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32, want, rtol=0, atol=0)


def test_each_operator_refuses_a_mask_that_is_not_bool_or_does_not_broadcast():
    q, k, v = data(3, 5)
    for op in _operators(3, 2, 0.05).values():
        op = op.double()
        with pytest.raises(ValueError, match="^mask must be a bool tensor"):
            op(q, k, v, torch.ones(3, 5))
        with pytest.raises(ValueError, match=r"^mask of shape \(4, 5\) does not broadcast"):
            op(q, k, v, torch.ones(4, 5, dtype=torch.bool))
    for op, label in (
        (_operators(3, 2, 0.05)["l"], "L-HIDA"),
        (_operators(3, 2, 0.05)["c"], "C-HIDA"),
    ):
        with pytest.raises(ValueError, match=f"^{label} summarises the keys once for all queries"):
            op.double()(q, k, v, torch.ones(3, 5, dtype=torch.bool))


def test_c_hida_read_takes_batched_float32_queries_on_a_float64_state():
    """read: queries [B, Nq, d] with Nq != key_dim, cast to the state's dtype: each batch row
    reads as the float64 queries alone; a query outside the ball is named in the error."""
    op = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1)).double()
    _, k, v = data(1, 9, seed=35)
    op.ingest(k, v)
    q = ball_points(10, 3, 0.9, dtype=F64, seed=36).reshape(2, 5, 3)
    out, pi = op.read(q.float())
    assert out.dtype == F64 and out.shape == (2, 5, 2) and pi.shape == (2, 5, 3)
    for b in range(2):
        torch.testing.assert_close(out[b], op.read(q[b].float().double())[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="^queries must lie in the Poincare ball"):
        op.read(2 * q)


@pytest.mark.parametrize("batched", ["queries", "keys", "values"])
def test_c_hida_broadcasts_a_batch_that_one_input_carries(batched):
    """A batch dim on one of queries (with a key mask of that batch), keys or values: row b
    equals the unbatched call on row b's inputs."""
    q, k, v = data(4, 7, seed=37)
    inputs = {"queries": q, "keys": k, "values": v}
    g = torch.Generator().manual_seed(38)
    other = {
        "queries": 0.5 * q.flip(0),
        "keys": 0.5 * k.flip(0),
        "values": torch.randn(7, 2, generator=g, dtype=F64),
    }
    inputs[batched] = torch.stack([inputs[batched], other[batched]])
    mask = None
    if batched == "queries":
        mask = torch.rand(2, 1, 7, generator=g) > 0.3
        mask[..., 0] = True
    op = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1, ingest_chunk=2)).double()
    out, w = op(inputs["queries"], inputs["keys"], inputs["values"], mask)
    for b in range(2):
        row = {n: t[b] if n == batched else t for n, t in inputs.items()}
        ref, ref_w = op(
            row["queries"], row["keys"], row["values"], None if mask is None else mask[b]
        )
        torch.testing.assert_close(out[b], ref, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(w[b], ref_w, rtol=1e-12, atol=1e-14)


def test_c_hida_forward_projects_its_summaries_to_max_norm_as_ingest_does():
    """With max_norm = 0.3 below the keys' norms, forward's readout equals ingest-then-read's
    (both project the summaries to |s| <= 0.3), and the stored centers obey the bound."""
    q, k, v = data(4, 12, seed=39, max_norm=0.95)
    cfg = CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1, max_norm=0.3, ingest_chunk=4)
    op = CHIDA(cfg).double()
    out, _ = op(q, k, v)
    for s in range(0, 12, 4):
        op.ingest(k[s : s + 4], v[s : s + 4])
    assert float(op.centers.norm(dim=-1).max()) <= 0.3 + 1e-12
    torch.testing.assert_close(out, op.read(q)[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("form", ida.FORMS)
def test_dense_computes_distances_in_its_configured_form(form):
    """DenseHIDAConfig.form reaches the distance computation: in float32 (where the forms round
    differently) Dense gives exactly the function's output with the same form."""
    q, k, v = data(10, 17, seed=40, dtype=torch.float32)
    want = ida.inverse_distance_attention(q, k, v, 1e-3, "poincare", form=form)
    got = DenseHIDA(DenseHIDAConfig(eps=1e-3, form=form, query_chunk=4))(q, k, v)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_summarising_operators_take_key_masks_that_carry_a_batch_the_keys_lack():
    """L and C with queries [2, 2, d], keys [Nk, d] and a key mask [2, 1, Nk]: row b equals the
    call on row b; two queries with a per-query mask [2, Nk] are refused with the advice."""
    q, k, v = data(4, 8, seed=41)
    q = q.reshape(2, 2, 3)
    keep = torch.rand(2, 1, 8, generator=torch.Generator().manual_seed(42)) > 0.3
    keep[..., :2] = True
    for name in ("l", "c"):
        op = _operators(3, 2, 0.1)[name].double()
        out, w = op(q, k, v, keep)
        assert out.shape == (2, 2, 2) and w.shape == (2, 2, 8)
        for b in range(2):
            ref, ref_w = op(q[b], k, v, keep[b])
            torch.testing.assert_close(out[b], ref, rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(w[b], ref_w, rtol=1e-12, atol=1e-14)
        with pytest.raises(ValueError, match="use DenseHIDA or FPHIDA for per-query masks$"):
            op(q[0], k, v, keep[:, 0])  # [2, 8] over two queries: a per-query mask


def test_c_hida_ingest_marks_skipped_keys_minus_one_and_moves_only_open_slots():
    """ingest with a key mask: skipped keys get slot -1 and change nothing (the same state as
    ingesting the kept keys alone); a batch row that still has free slots next to a row that
    moves keys: its rows' states equal their unbatched ingests."""
    _, k, v = data(1, 9, seed=43)
    keep = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    op = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1)).double()
    slots = op.ingest(k, v, keep)
    assert (slots[~keep] == -1).all() and (slots[keep] >= 0).all()
    alone = CHIDA(CHIDAConfig(n_summaries=3, key_dim=3, value_dim=2, eps=0.1)).double()
    assert torch.equal(alone.ingest(k[keep], v[keep]), slots[keep])
    for a, b in zip(op.state, alone.state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # row 0 moves keys (9 keys, 3 slots); row 1 sees 2 kept keys and keeps a free slot
    rows = keep.clone().repeat(2, 1)
    rows[1] = False
    rows[1, :2] = True
    state = c_hida_empty_state((2,), 3, 3, 2, like=k)
    batched, assign = c_hida_ingest(state, k.expand(2, 9, 3), v.expand(2, 9, 2), rows)
    for r in range(2):
        single, a = c_hida_ingest(c_hida_empty_state((), 3, 3, 2, like=k), k, v, rows[r])
        assert torch.equal(assign[r], a)
        for x, y in zip(batched, single, strict=True):
            torch.testing.assert_close(x[r], y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("batched", ["queries", "keys", "values", "queries and mask"])
def test_fp_broadcasts_a_batch_that_one_input_carries(batched):
    """fp_attention with a batch dim on one of queries (alone or with a per-query mask), keys
    or values: row b equals the unbatched call on row b's inputs, weights included; its
    defaults are the non-causal call with weights."""
    q, k, v = data(5, 8, seed=44)
    g = torch.Generator().manual_seed(45)
    mask = torch.rand(5, 8, generator=g) > 0.3
    mask[:, 0] = True
    inputs = {"queries": q, "keys": k, "values": v, "mask": mask}
    other = {"queries": 0.5 * q.flip(0), "keys": 0.5 * k.flip(0),
             "values": torch.randn(8, 2, generator=g, dtype=F64), "mask": mask.flip(1)}  # fmt: skip
    for name in batched.split(" and "):
        inputs[name] = torch.stack([inputs[name], other[name]])
    pos = torch.arange(5)
    call = lambda i: fp_attention(  # noqa: E731
        i["queries"], i["keys"], i["values"], 0.05, "poincare", pos, 2, 2, False, i["mask"],
        query_chunk=3, need_weights=True,
    )  # fmt: skip
    out, w = call(inputs)
    assert out.shape == (2, 5, 2) and w.shape == (2, 5, 8)
    for b in range(2):
        ref, ref_w = call({n: t[b] if n in batched else t for n, t in inputs.items()})
        torch.testing.assert_close(out[b], ref, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(w[b], ref_w, rtol=1e-12, atol=1e-14)
    plain = fp_attention(q, k, v, 0.05, "poincare", pos, 2, 2)
    explicit = fp_attention(q, k, v, 0.05, "poincare", pos, 2, 2, False, need_weights=True)
    for a, b in zip(plain, explicit, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
