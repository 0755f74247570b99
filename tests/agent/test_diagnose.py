"""`python -m agent.diagnose`: on a tiny geodesic run trained through `python -m agent.train`, the
report holds nodes 67-70 exactly as GeodesicDynamics.node_reports computes them (values,
thresholds, OK / WARN, the seed's remedy for a crossed threshold), the scalar diagnostics, the
|z| and tau(z) spreads and the trend read from TensorBoard; a GRU run says it has none; an agent
with an empty buffer is diagnosed at its prototypes; bad input is one line and exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent import diagnose
from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.inspection import inspection
from agent.persistence import run_records
from agent.persistence.runs import CHECKPOINT_NAME
from tests.agent.conftest import call_main, tiny
from tests.conftest import ROOT, child_env
from world_model.model import EpisodeInputs

STEPS = 150
GEODESIC = {
    "latent_dim": 4,
    "encoder_dim": 16,
    "head": {"d_k": 8},
    "context": {"prototypes": 8, "feature_dim": 8},
}
SCALARS = (
    "node67_relative",
    "node69_degenerate_fraction",
    "friction",
    "confinement",
    "chirality_strength",
    "z_norm_max",
)


def to_toml(sections: dict) -> str:
    """Sections of ints, floats, bools and strings as TOML; a nested table is written as its
    own dotted table ([dynamics.head])."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v)

    def table(name: str, keys: dict) -> list[str]:
        plain = {k: v for k, v in keys.items() if not isinstance(v, dict)}
        out = [f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in plain.items())]
        for k, v in keys.items():
            if isinstance(v, dict):
                out += table(f"{name}.{k}", v)
        return out

    return "\n".join(text for name, keys in sections.items() for text in table(name, keys))


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def train_run(folder: Path, world_model: str, dynamics: dict) -> Path:
    config = folder / f"tiny_{world_model}.toml"
    config.write_text(to_toml({**tiny(), "dynamics": dynamics}))
    logdir = folder / world_model
    done = run_module(
        "agent.train", "--world-model", world_model, "--config", str(config),
        "--steps", str(STEPS), "--logdir", str(logdir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = logdir.iterdir()
    return run


@pytest.fixture(scope="module")
def geodesic_run(tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("diagnose"), "geodesic", GEODESIC)


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("diagnose"), "gru", tiny()["dynamics"])


def json_report(capsys, *argv: str) -> dict:
    assert diagnose.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=pytest.fail)


# ----------------------------------------------------------------------- geodesic


@pytest.mark.slow
def test_nodes_are_node_reports_of_the_saved_agent_on_its_buffer(geodesic_run, capsys):
    report = json_report(capsys, str(geodesic_run), "--states", "32")
    assert report["world_model"] == "geodesic" and report["step"] == STEPS
    assert report["states"] == 32
    nodes = report["geometric"]["nodes"]
    assert [n["node"] for n in nodes] == [67, 68, 69, 70]
    assert report["geometric"]["nodes_not_run"] == {}

    agent = Agent.load(geodesic_run / CHECKPOINT_NAME)  # the same reports, computed here
    agent.model.eval()
    batch = run_records.sample_batch(agent, 32)
    assert batch.history_obs.shape[0] == agent.model.history_length == 4
    expected, _ = agent.model.dynamics.node_reports(
        batch, value_fn=agent.model.value, max_states=32
    )
    for got, want in zip(nodes, expected, strict=True):
        assert math.isfinite(got["value"]) and got["value"] >= 0
        assert got["value"] == pytest.approx(want.value, rel=1e-5, abs=1e-9)
        assert got["threshold"] == want.threshold and got["name"] == want.name
        assert got["passed"] == (got["value"] < got["threshold"])
        assert got["passed"] == want.passed
        if not got["passed"]:
            assert got["warning"].startswith(f"Node {got['node']} {got['name']}: ")
            assert "Remedy: " in got["warning"]
    assert nodes[0]["threshold"] == 1e-3 and nodes[2]["threshold"] == 1e-6
    assert nodes[1]["threshold"] == pytest.approx(0.01 * math.sqrt(8))  # 0.01 sqrt(d_k)
    assert nodes[3]["threshold"] == pytest.approx(math.exp(-1))
    assert nodes[2]["extra"]["n_projectors"] == 32

    scalars = report["geometric"]["scalars"]
    assert set(SCALARS) <= set(scalars) and all(math.isfinite(scalars[k]) for k in SCALARS)
    assert scalars["friction"] >= 0 and scalars["confinement"] >= 0
    spread = report["geometric"]["distributions"]
    z, tau = spread["z_norm"], spread["tau"]
    assert 0 <= z["min"] <= z["median"] <= z["max"] < 1
    assert z["max"] == pytest.approx(scalars["z_norm_max"])
    assert 0 < tau["min"] <= tau["median"] <= tau["max"]
    assert scalars["node67_relative"] == pytest.approx(nodes[0]["extra"]["relative"])

    # the trend, read back from the run's TensorBoard events
    trends = report["trends"]
    for tag in ("node67_gauge_invariance", "node70_texture_leakage", *SCALARS):
        assert tag in trends, tag
        assert trends[tag]["first_step"] < trends[tag]["last_step"] == STEPS
        assert math.isfinite(trends[tag]["first"]) and math.isfinite(trends[tag]["last"])
    assert report["eval"][-1]["step"] == STEPS and report["error"] is None

    # the latent fit: the world model's consistency loss per predicted step, recomputed here as
    # world_model.training does it (same buffer sequences, no noise)
    fit = report["latent_fit"]
    horizon = agent.config.loss.horizon
    assert fit["horizon"] == horizon == len(fit["consistency"]) and fit["states"] == 32
    batch = run_records.sample_batch(agent, 32, horizon)
    model = agent.model
    with torch.no_grad():
        state = model.encode(batch.obs[0])
        inputs = EpisodeInputs(batch.history_obs, batch.history_mask, batch.memory)
        context = model.context(state, inputs)
        for t in range(horizon):
            state = model.next(state, batch.action[t], context)
            target = model.encode(batch.obs[t + 1], target=True)
            want = float(model.consistency_loss(state, target).mean())
            assert fit["consistency"][t] == pytest.approx(want, rel=1e-5, abs=1e-9)
    assert all(v > 0 for v in fit["consistency"])


@pytest.mark.slow
def test_text_report_in_a_real_process(geodesic_run):
    done = run_module("agent.diagnose", str(geodesic_run))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    report = inspection.diagnose(geodesic_run, states=64)  # the same report, in this process
    for node in report["geometric"]["nodes"]:
        status = "OK" if node["passed"] else "WARN"
        row = next(line for line in text.splitlines() if line.startswith(f"| {node['node']} "))
        assert node["name"] in row and row.rstrip(" |").endswith(status)
        assert f"{node['threshold']:.3g}" in row or f"{node['threshold']:.3e}" in row
        if node["warning"]:
            assert f"  ! {node['warning']}" in text
    for heading in (
        "seed 003 diagnostic nodes (64 states from the replay buffer)",
        "scalar diagnostics",
        "distributions over the 64 states",
        "trend over training (TensorBoard diagnostics/*)",
        "evaluation history (eval/mean_return)",
        "latent fit (consistency loss per predicted step, no noise)",
    ):
        assert heading in text
    for label in ("relative gauge deviation", "degenerate fraction", "max |z|", "| tau(z) "):
        assert label in text
    assert "| node67_gauge_invariance " in text and f"| {STEPS} " in text


def test_an_empty_buffer_is_diagnosed_at_the_prototypes(tmp_path, capsys):
    config = RunConfig.from_dict({**tiny(train={"world_model": "geodesic"}), "dynamics": GEODESIC})
    path = Agent(None, config).save(tmp_path / "fresh.pt", include_buffer=True)
    report = json_report(capsys, str(path))
    assert report["states"] == 0 and report["step"] == 0 and report["latent_fit"] is None
    assert [n["node"] for n in report["geometric"]["nodes"]] == [67, 68, 69, 70]
    assert all(math.isfinite(n["value"]) for n in report["geometric"]["nodes"])
    assert report["error"].startswith("no TensorBoard events") and report["trends"] == {}
    assert diagnose.main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "queries at the prototypes" in text and "no TensorBoard events" in text


# ----------------------------------------------------------------------- GRU and bad input


@pytest.mark.slow
def test_a_gru_run_has_no_geometric_diagnostics(gru_run, capsys):
    assert diagnose.main([str(gru_run)]) == 0
    text = capsys.readouterr().out
    assert "world model 'gru' has no geometric diagnostics" in text
    assert "| node" not in text and f"| {STEPS} " in text  # the evaluation history
    report = json_report(capsys, str(gru_run))
    assert report["geometric"] is None and report["trends"] == {}
    fit = report["latent_fit"]  # every world model has one (tiny(): horizon 2)
    assert len(fit["consistency"]) == 2 and all(v >= 0 for v in fit["consistency"])
    assert "latent fit (consistency loss per predicted step" in text
    assert [e["step"] for e in report["eval"]] == [STEPS]
    assert report["eval"][0]["mean"] <= 0 and report["eval"][0]["std"] >= 0


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / CHECKPOINT_NAME).write_bytes(b"PK\x03\x04 truncated zip")
    cases = [
        ([str(tmp_path / "nowhere")], "no run folder at"),
        ([str(empty)], "no checkpoint at"),
        ([str(corrupt)], "corrupt or unreadable"),
        ([str(corrupt), "--states", "0"], "--states must be >= 1"),
        ([str(corrupt), "--states", "many"], "invalid int value"),
    ]
    for argv, expected in cases:
        code, lines, out = call_main(diagnose.main, argv, capsys)
        assert code == 2, (argv, lines)
        assert len(lines) == 1 and expected in lines[0], (argv, lines)
        assert out == ""
