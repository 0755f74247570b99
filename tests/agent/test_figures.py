"""`python -m agent.diagnose RUN_DIR --figures DIR` and the end-of-run TensorBoard figures
(agent/inspection/figures.py, agent/inspection/figures_data.py): on tiny trained runs every figure
is written, small, and drawn from the numbers it claims, each checked here against a computation of
its own: the trajectories are the projection of the encoded buffer episodes; the measured
temperature is the record's scores / logits and lies on sqrt(d_k)/lambda(z) for a metric-temperature
run and off it for a constant-temperature one; node 67 per Wilson mode is gauge_invariance_check run
with that mode; heat map, leakage and chiral commitment are the heads' records; the nodes over
training are the logged scalars. A GRU run gets one line and no figure; a failing figure costs the
run one warning line."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from agent import diagnose
from agent.core.agent import Agent
from agent.core.buffer import ReplayBuffer
from agent.core.config import RunConfig
from agent.inspection import figure_episodes, figures, figures_data
from agent.persistence import run_records
from geometry import poincare
from geometry.doublet import chiral_gate, chiral_operator
from tests.agent.conftest import call_main, tiny
from world_model.attention.covariant import CovariantQueries
from world_model.diagnostics import gauge_invariance_check, texture_leakage_check
from world_model.geodesic.kick import kick_queries
from world_model.memory.window import state_features
from world_model.model import EpisodeInputs

STEPS = 100  # 60 random seed steps, 40 updates: two whole 50-step episodes
D_K = 8
GEODESIC = {
    "latent_dim": 4,
    "encoder_dim": 16,
    "head": {"d_k": D_K},
    # the figures' records are checked against a fixed table of 8 prototypes (a routed pool's
    # heat map lists all its rows, the inactive ones blank)
    "context": {"prototypes": 8, "feature_dim": 8, "memory": "none", "routing": "dense"},
}
NAMES = (
    "trajectories",
    "temperature",
    "gauge_wilson",
    "attention",
    "texture_leakage",
    "chirality",
    "nodes_over_training",
)


def geodesic_config(**head) -> RunConfig:
    dynamics = {**GEODESIC, "head": {**GEODESIC["head"], **head}}
    train = {"world_model": "geodesic", "figures": True}
    return RunConfig.from_dict({**tiny(train=train), "dynamics": dynamics})


@pytest.fixture(scope="module")
def metric_run(tmp_path_factory) -> tuple[Agent, Path]:
    """A tiny geodesic run trained by the Trainer into a run folder (events, checkpoint and the
    end-of-run figures)."""
    run_dir = tmp_path_factory.mktemp("figures") / "metric"
    agent = Agent(None, geodesic_config())
    agent.learn(STEPS, log_dir=run_dir)
    return agent, run_dir


@pytest.fixture(scope="module")
def metric_data(metric_run):
    agent, run_dir = metric_run
    return figures_data.collect(agent, run_dir)


@pytest.fixture(scope="module")
def constant_agent() -> Agent:
    """Trained in memory with the constant temperature sqrt(d_k) (no run folder)."""
    agent = Agent(None, geodesic_config(temperature="constant"))
    agent.learn(80)  # 20 updates
    return agent


# ----------------------------------------------------------------------- independent reads


def last_episodes(agent: Agent, count: int = figure_episodes.EPISODES) -> list[np.ndarray]:
    """The buffer rows of its last `count` whole episodes (one stream, never wrapped)."""
    buffer = agent.buffer
    assert buffer.streams == 1 and buffer.size < buffer.capacity
    done = ((buffer.terminated + buffer.truncated)[: buffer.size] > 0).squeeze(-1).numpy()
    ends = np.flatnonzero(done)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [np.arange(s, e + 1) for s, e in zip(starts, ends, strict=True)][-count:]


def heads_at_episodes(agent: Agent, episodes: list[np.ndarray]):
    """The production path at the episodes' states: WorldModel.context (window of the W steps
    before each state in its episode, value gradient) and the heads' forward passes with the
    integrator's own kick queries. (z, p, context, kick record, drift record)."""
    model, buffer = agent.model, agent.buffer
    dyn = model.dynamics
    w = model.history_length
    obs, hist, mask = [], [], []
    for rows in episodes:
        for t, row in enumerate(rows):
            obs.append(buffer.obs[row])
            back = [t - w + j for j in range(w)]
            mask.append(torch.tensor([b >= 0 for b in back]))
            hist.append(
                torch.stack([buffer.obs[rows[b]] if b >= 0 else buffer.obs[0] * 0 for b in back])
            )
    obs, hist, mask = torch.stack(obs), torch.stack(hist, 1), torch.stack(mask, 1)  # [T, O] ...
    model.eval()
    with torch.no_grad():
        state = model.encode(obs)
        ctx = model.context(state, EpisodeInputs(hist, mask))
        integ = dyn.integrator
        _, kick = integ.kick_head(kick_queries(integ.kick_head, state.z, ctx), ctx.force)
        drift_queries = CovariantQueries(
            positions=state.z,
            features=state_features(state.z, state.p),
            velocity=state.p * poincare.inverse_metric_factor(state.z),
            chiral=ctx.chiral_for(integ.drift_head),
        )
        _, drift = integ.drift_head(drift_queries, ctx.correction)
    return state.z, state.p, ctx, kick, drift


def ratios(record) -> tuple[torch.Tensor, torch.Tensor]:
    """s / l for every valid (query, entry) pair whose logit is not ~0: (ratios, query index)."""
    valid = torch.ones_like(record.scores, dtype=torch.bool)
    if record.mask is not None:
        valid = valid & record.mask.unsqueeze(-2)
    valid = valid & (record.logits.abs() > 1e-4)
    b, _, _ = torch.nonzero(valid, as_tuple=True)
    return (record.scores[valid] / record.logits[valid]).double(), b


# ----------------------------------------------------------------------- episodes


def test_buffer_episodes_follow_each_copy_and_skip_a_cut_oldest_episode():
    """Two env copies (streams), episodes of 3 and 4 steps, in a ring that has wrapped: each
    episode is one copy's consecutive steps ending at its done flag, the newest last, and the
    oldest episode of a copy, whose start was overwritten, is never drawn."""
    buffer = ReplayBuffer(obs_dim=1, action_dim=1, capacity=20, streams=2)
    lengths = (3, 4)
    for t in range(23):  # 46 transitions into 20 slots
        done = [(t + 1) % n == 0 for n in lengths]
        obs = np.array([[100 * k + t] for k in range(2)], dtype=np.float32)  # copy, time
        buffer.add_batch(obs, np.zeros((2, 1)), np.zeros(2), obs, np.zeros(2), np.array(done))
    episodes = figure_episodes.buffer_episodes(buffer, count=10)
    times = [buffer.obs[torch.from_numpy(e)].squeeze(-1).numpy() for e in episodes]
    for ep, tm in zip(episodes, times, strict=True):
        assert len(set(ep % 2)) == 1  # one copy's slots
        copy, steps = int(tm[0] // 100), tm % 100
        assert np.array_equal(steps, np.arange(steps[0], steps[0] + lengths[copy]))
        assert steps[0] % lengths[copy] == 0  # from the episode's first step
    # the ring holds t = 13..22: copy 0's whole episodes 15-17 and 18-20, copy 1's 16-19;
    # 12-14 and 12-15 lost their starts, 21-22 and 20-22 are still open
    assert [(int(tm[0] // 100), int(tm[-1] % 100)) for tm in times] == [(0, 17), (1, 19), (0, 20)]
    last_two = figure_episodes.buffer_episodes(buffer, count=2)
    assert [e.tolist() for e in last_two] == [e.tolist() for e in episodes[-2:]]
    cut = figure_episodes.buffer_episodes(buffer, count=1, max_steps=2)  # the first steps of each
    assert [e.tolist() for e in cut] == [episodes[-1][:2].tolist()]


# ----------------------------------------------------------------------- the command


def test_diagnose_writes_every_figure_small_and_lists_them(metric_run, tmp_path, capsys):
    _, run_dir = metric_run
    out = tmp_path / "figs"
    start = time.process_time()
    argv = [str(run_dir), "--states", "16", "--figures", str(out)]
    code, err, stdout = call_main(diagnose.main, argv, capsys)
    assert code == 0, err
    assert time.process_time() - start < 30  # the report and the figures, one thread
    files = [out / f"{name}.png" for name in NAMES]
    assert f"figures written to {out}:" in stdout
    listed = [line.strip() for line in stdout.splitlines() if line.startswith(f"  {out}")]
    assert listed == [str(f) for f in files]
    for path in files:
        head = path.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n", path
        assert 1000 < path.stat().st_size <= figures.MAX_BYTES, path
    assert sorted(p.name for p in out.iterdir()) == sorted(f.name for f in files)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    argv = [str(run_dir), "--states", "16", "--figures", str(blocked / "figs")]
    code, err, stdout = call_main(diagnose.main, argv, capsys)
    assert code == 2 and stdout == ""  # bad input, refused before the run is loaded
    assert len(err) == 1 and err[0].startswith("python -m agent.diagnose: error: --figures ")
    assert "a file is in the way" in err[0]


def test_a_gru_run_says_so_in_one_line_and_draws_nothing(tmp_path, capsys):
    run_dir = tmp_path / "gru"
    Agent(None, RunConfig.from_dict(tiny())).learn(60, log_dir=run_dir)
    out = tmp_path / "figs"
    code, err, stdout = call_main(diagnose.main, [str(run_dir), "--figures", str(out)], capsys)
    assert code == 0, err
    notes = [line for line in stdout.splitlines() if "Poincare latent" in line]
    assert notes == ["figures: world model 'gru' has no Poincare latent: no geometric figures"]
    assert not out.exists()
    code, err, stdout = call_main(diagnose.main, [str(run_dir), "--json", "--figures", "f"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["figures"] == {"dir": "f", "files": [], "notes": [notes[0][len("figures: ") :]]}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir)).Reload()  # and no figure at the end of the run
    assert events.Tags()["images"] == [] and events.Tags()["scalars"]


# ----------------------------------------------------------------------- the numbers drawn


def test_trajectories_are_the_projection_of_the_encoded_episodes(metric_run, metric_data):
    agent, _ = metric_run
    data = metric_data.trajectories
    episodes = last_episodes(agent)
    assert [len(e) for e in episodes] == [len(z) for z in data.z] == [50, 50]
    z, _, ctx, kick, drift = heads_at_episodes(agent, episodes)
    z = z.double()
    assert np.allclose(np.concatenate(data.z), z.numpy(), atol=1e-6)
    # the basis: the two leading eigenvectors of the covariance of log_0 z, orthonormal
    u = poincare.logmap0(z)
    cov = torch.cov(u.T)
    basis = data.projection.basis
    eig = torch.linalg.eigvalsh(cov)
    assert torch.allclose(basis.T @ basis, torch.eye(2, dtype=basis.dtype), atol=1e-10)
    assert torch.allclose(cov @ basis, basis * eig[[-1, -2]], atol=1e-8)
    xy = torch.tanh((u @ basis).norm(dim=-1, keepdim=True)) * torch.nn.functional.normalize(
        u @ basis, dim=-1
    )  # exp_0 of the 2-d tangent vector
    plotted = figures.trajectories_figure(data, "t")
    drawn = np.concatenate([plotted.arrays[f"xy/{k}"] for k in range(len(episodes))])
    assert np.allclose(drawn, xy.numpy(), atol=1e-9)
    assert np.all(np.linalg.norm(drawn, axis=-1) < 1)
    # every query's attention, averaged over the two heads, lands on a prototype or a window
    # entry exactly once: what the markers show adds up to one per state
    total = data.prototype_attention.sum() + sum(t.sum() for t in data.texture_attention)
    assert total == pytest.approx(1.0, abs=1e-5)
    want = (kick.weights[:, 0, :8] + drift.weights[:, 0, :8]).double().mean(0) / 2  # [M]
    protos = agent.model.dynamics.prototypes.positions.detach().double()
    order = [int(torch.cdist(torch.from_numpy(p)[None], protos).argmin()) for p in data.prototype_z]
    assert sorted(order) == list(range(8))
    assert np.allclose(data.prototype_attention, want[order].numpy(), atol=1e-6)
    # a window entry is an earlier state of the episode: slot j of step t is step t - (W - j)
    both = ((kick.weights[:, 0, 8:] + drift.weights[:, 0, 8:]) / 2).double()  # [B, W]
    start = 0
    for k, rows in enumerate(episodes):
        want = np.zeros(len(rows))
        for t in range(len(rows)):
            for j in range(4):
                if t - (4 - j) >= 0:
                    want[t - (4 - j)] += float(both[start + t, j]) / both.shape[0]
        assert np.allclose(data.texture_attention[k], want, atol=1e-9)
        start += len(rows)
    sizes = plotted.arrays["prototype_size"]
    assert np.allclose(sizes, 250 * data.prototype_attention / data.prototype_attention.max())


def test_measured_temperature_is_scores_over_logits_on_the_metric_curve(metric_run, metric_data):
    agent, _ = metric_run
    data = metric_data.temperature
    assert data.mode == "metric" and data.d_k == D_K
    z, _, _, kick, drift = heads_at_episodes(agent, last_episodes(agent))
    norms = z.norm(dim=-1).double().numpy()
    plotted = figures.temperature_figure(data, "t")
    for name, record in (("kick", kick), ("drift", drift)):
        tau = plotted.arrays[f"tau/{name}"]
        assert np.array_equal(tau, data.tau[name]) and len(tau) == len(norms)
        assert np.allclose(plotted.arrays[f"z_norm/{name}"], norms, atol=1e-6)
        r, query = ratios(record)
        assert len(r) > 10 * len(norms)  # several entries per query
        assert np.allclose(tau[query.numpy()], r.numpy(), rtol=1e-5)
        curve = math.sqrt(D_K) * (1 - norms**2) / 2  # sqrt(d_k) / lambda(z)
        assert np.allclose(tau, curve, atol=1e-5)
    r_grid = plotted.arrays["curve_r"]
    assert np.allclose(plotted.arrays["curve_tau"], math.sqrt(D_K) * (1 - r_grid**2) / 2)


def test_a_constant_temperature_run_leaves_the_curve(constant_agent):
    data = figures_data.collect(constant_agent, None).temperature
    assert data.mode == "constant"
    z, _, _, kick, _ = heads_at_episodes(constant_agent, last_episodes(constant_agent))
    plotted = figures.temperature_figure(data, "t")
    tau, norms = plotted.arrays["tau/kick"], plotted.arrays["z_norm/kick"]
    r, query = ratios(kick)
    assert np.allclose(tau[query.numpy()], r.numpy(), rtol=1e-5)
    assert np.allclose(tau, math.sqrt(D_K), rtol=1e-5)
    curve = math.sqrt(D_K) * (1 - norms**2) / 2
    assert np.all(tau >= 2 * curve - 1e-5)  # twice the curve at the origin, more away from it
    assert np.median(np.abs(tau - curve)) > 0.5 * math.sqrt(D_K)


def test_node67_per_wilson_mode_is_the_gauge_check_with_that_mode(metric_run, metric_data):
    agent, _ = metric_run
    data = metric_data.wilson
    integ = agent.model.dynamics.integrator
    options = integ.kick_head.config.options
    assert data.trained == (options.wilson, options.segments) == ("magnus4", 12)
    assert data.segments == (1, 2, 4, 8, 12) and data.states == figures_data.SWEEP_STATES
    batch = run_records.sample_batch(agent, figures_data.SWEEP_STATES)
    model = agent.model
    with torch.no_grad():
        state = model.encode(batch.obs[0])
        ctx = model.context(state, EpisodeInputs(batch.history_obs, batch.history_mask))
    z, p = state.z, state.p
    kick_q = CovariantQueries(positions=z, features=torch.cat([z, poincare.logmap0(z)], -1))
    drift_q = CovariantQueries(
        positions=z, features=state_features(z, p), velocity=p * poincare.inverse_metric_factor(z)
    )
    plotted = figures.wilson_figure(data, "t")
    saved = (options.wilson, options.segments)
    try:
        for mode in ("first_order", "exp", "path_ordered", "magnus4"):
            counts = data.segments if mode in ("path_ordered", "magnus4") else (12,)
            assert len(plotted.arrays[f"node67/{mode}"]) == len(counts)
            for i, count in enumerate(counts):
                options.wilson, options.segments = mode, count  # every head shares the options
                worst = max(
                    gauge_invariance_check(
                        head, queries, bank, generator=torch.Generator().manual_seed(seed)
                    ).value
                    for head, queries, parts, seed in (
                        (integ.kick_head, kick_q, ctx.force_parts, 0),
                        (integ.drift_head, drift_q, ctx.correction_parts, 1),
                    )
                    for bank in parts
                )
                assert plotted.arrays[f"node67/{mode}"][i] == pytest.approx(worst, rel=1e-6)
    finally:
        options.wilson, options.segments = saved
    # the run's own setting is the report's node 67 (the joined banks, all pairs at once)
    reports, _ = model.dynamics.node_reports(batch, value_fn=model.value, max_states=16)
    assert data.node67["magnus4"][-1] == pytest.approx(reports[0].value, rel=1e-3, abs=1e-5)
    assert data.node67["first_order"][0] > 100 * data.node67["magnus4"][-1]


def test_heat_map_leakage_and_chirality_are_the_heads_records(metric_run, metric_data):
    agent, _ = metric_run
    att, chi = metric_data.attention, metric_data.chirality
    episodes = last_episodes(agent)
    _, _, ctx, kick, drift = heads_at_episodes(agent, episodes)
    # heat map: the middle state of the last episode, every entry, masked ones blank
    assert (att.episode, att.episode_step) == (1, 25) and att.state == 75
    plotted = figures.attention_figure(att, "t")
    matrix = plotted.arrays["weights"]
    for row, record in enumerate((kick, drift)):
        want = record.weights[75, 0].double().numpy()
        valid = record.mask[75].numpy()
        assert np.allclose(matrix[row][valid], want[valid], atol=1e-7)
        assert np.array_equal(np.isnan(matrix[row]), ~valid)
        assert np.nansum(matrix[row]) == pytest.approx(1.0, abs=1e-5)
    assert att.labels == [f"P{j}" for j in range(8)] + ["t-4", "t-3", "t-2", "t-1"]
    # leakage by level: node 70 is the macro (kick) queries' largest texture mass
    leak = figures.leakage_figure(att, "t").arrays
    assert att.node70 == pytest.approx(texture_leakage_check(kick).value, abs=1e-7)
    assert leak["max/kick"][1] == pytest.approx(att.node70, abs=1e-7)
    mass = kick.weights[:, 0, 8:].sum(-1).double()
    assert leak["mean/kick"][1] == pytest.approx(float(mass.mean()), abs=1e-7)
    assert leak["mean/kick"].sum() == pytest.approx(1.0, abs=1e-6)
    # chiral commitment along the last episode: Psi^T P Psi / |Psi|^2 with Pi's real operator
    last = slice(50, 100)
    drawn = figures.chirality_figure(chi, "t").arrays
    for name, record, prepared, head in (
        ("kick", kick, ctx.force, agent.model.dynamics.integrator.kick_head),
        ("drift", drift, ctx.correction, agent.model.dynamics.integrator.drift_head),
    ):
        psi = torch.einsum("bqn,bnk->bqk", record.weights, prepared.values.expand(100, -1, -1))
        op = chiral_operator(record.projectors, 2, D_K, psi.dtype)  # [B, 1, k, k]
        c = (psi.unsqueeze(-2) @ op @ psi.unsqueeze(-1)).squeeze((-2, -1)) / psi.square().sum(-1)
        assert np.allclose(drawn[f"commitment/{name}"], c[last, 0].numpy(), atol=1e-5)
        gated = chiral_gate(psi, record.projectors, 2, head.chirality_strength.detach())
        change = (gated - psi).norm(dim=-1) / psi.norm(dim=-1)
        assert np.allclose(drawn[f"change/{name}"], change[last, 0].numpy(), rtol=1e-4)
        assert np.array_equal(drawn[f"degenerate/{name}"], record.degenerate[last, 0].numpy())
        assert chi.kappa[name] == float(head.chirality_strength.detach())
    assert np.all((drawn["commitment/kick"] >= 0) & (drawn["commitment/kick"] <= 1 + 1e-6))


def test_nodes_over_training_are_the_logged_scalars(metric_run, metric_data):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir = metric_run
    events = EventAccumulator(str(run_dir)).Reload()
    drawn = figures.nodes_figure(metric_data.series, "t").arrays
    for node, tag in figures_data.NODE_TAGS.items():
        logged = events.Scalars(f"diagnostics/{tag}")
        assert len(logged) >= 2 and logged[-1].step == STEPS
        assert np.array_equal(drawn[f"steps/{node}"], [e.step for e in logged])
        assert np.allclose(drawn[f"values/{node}"], [e.value for e in logged], rtol=1e-6)


# ----------------------------------------------------------------------- TensorBoard


def test_tensorboard_gets_the_figures_at_the_end_of_a_geodesic_run(metric_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir = metric_run
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload()
    assert sorted(events.Tags()["images"]) == sorted(f"figures/{n}" for n in NAMES)
    for name in NAMES:
        (image,) = events.Images(f"figures/{name}")
        assert image.step == STEPS and image.width > 100 and image.height > 100
        assert image.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run_dir / "checkpoint.pt").is_file()


def test_train_figures_off_adds_no_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = geodesic_config()
    off = RunConfig.from_dict(
        {**config.to_dict(), "train": {**config.to_dict()["train"], "figures": False}}
    )
    Agent(None, off).learn(STEPS, log_dir=tmp_path)
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0}).Reload()
    assert events.Tags()["images"] == [] and events.Tags()["scalars"]


def test_a_failing_figure_costs_one_warning_line_not_the_run(metric_run, monkeypatch, capsys):
    agent, run_dir = metric_run
    trainer = agent._trainer

    def broken(*args, **kwargs):
        raise RuntimeError("no canvas\nsecond line")

    monkeypatch.setattr(figures, "add_to_tensorboard", broken)
    trainer.log_figures()
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "warning: end-of-run figures not added to TensorBoard (RuntimeError: no canvas second line)"
    ]
    writer, trainer.writer = trainer.writer, None  # a rank > 0 has no writer: nothing is drawn
    try:
        trainer.log_figures()
    finally:
        trainer.writer = writer
    assert capsys.readouterr().err == ""
    assert Agent.load(run_dir / "checkpoint.pt").num_timesteps == STEPS
