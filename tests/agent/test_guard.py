"""agent.core.guard: a non-finite loss, gradient or action stops training with where it appeared,
the last good checkpoint kept; a NaN two-hot target propagates instead of becoming an index."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.guard import NonFiniteError, check_actions, check_losses, clip_gradients
from agent.core.loop import Trainer
from agent.persistence.runs import CHECKPOINT_NAME
from agent.train import main as train_main
from tests.agent.conftest import call_main, tiny
from world_model.twohot import two_hot


def test_a_nan_two_hot_target_gives_nan_weights_not_an_out_of_range_index():
    bins = torch.linspace(-10, 10, 11)
    out = two_hot(torch.tensor([1.0, math.nan, -3.0]), bins)  # raised IndexError before
    assert out.shape == (3, 11)
    assert torch.isnan(out[1]).any() and torch.isfinite(out[[0, 2]]).all()
    assert torch.allclose(out[[0, 2]].sum(-1), torch.ones(2))


def test_the_checks_name_what_is_not_finite():
    with pytest.raises(NonFiniteError, match=r"update 7: non-finite loss \(reward\)"):
        check_losses({"value": torch.tensor(1.0), "reward": torch.tensor(math.inf)}, "update 7")
    check_losses({"value": torch.tensor(1.0)}, "fine")

    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    twin = copy.deepcopy(net)
    for m in (net, twin):
        m(torch.ones(1, 2)).sum().backward()
    want = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.1)
    params = list(net.parameters())
    norm = clip_gradients(net, params, 0.1, "fine")  # finite: torch's clip_grad_norm_ exactly
    assert torch.equal(norm, want) and float(norm) > 0.1
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(params, twin.parameters(), strict=True))
    net[1].weight.grad[0, 0] = math.nan
    with pytest.raises(NonFiniteError, match=r"u: non-finite gradient \(of 1\.weight\)"):
        clip_gradients(net, params, 1.0, "u")

    with pytest.raises(NonFiniteError, match="non-finite action"):
        check_actions(torch.tensor([[0.5, math.nan]]), "plan")


def test_an_injected_nan_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    """A run checkpointed at step 100, then a NaN written into one world-model parameter: the
    next update raises NonFiniteError naming the losses, and the checkpoint on disk is the
    step-100 one, byte for byte (no checkpoint of the diverged model)."""
    config = RunConfig.from_dict(tiny(train={"steps": 300, "checkpoint_every": 50}))
    trainer = Trainer(Agent(None, config), tmp_path)
    assert trainer.run(300, stop_at_episode_end_after=100) == "stopped"
    path = tmp_path / CHECKPOINT_NAME
    saved = path.read_bytes()
    with torch.no_grad():
        next(trainer.agent.model.dynamics.parameters()).view(-1)[0] = math.nan
    with pytest.raises(NonFiniteError, match=r"env step 100: plan: no sampled trajectory") as err:
        trainer.run(300)  # the first thing after the NaN is a plan
    assert "the last good checkpoint (env step 100) is kept" in str(err.value)
    assert path.read_bytes() == saved
    assert trainer.agent.num_timesteps == 100  # stopped before the env saw a NaN action
    trainer.close()


def test_a_diverging_learning_rate_exits_3_with_one_line(tmp_path, capsys):
    """`agent.lr = 1e12` (the crash of a NaN target turned into a bin index before the guard):
    one line naming the diverged losses, exit 3, and a run folder without a checkpoint."""
    cfg = tiny(agent={"lr": 1e12}, train={"steps": 120})
    (tmp_path / "lr.json").write_text(json.dumps(cfg))
    code, err, _ = call_main(
        train_main, ["--config", str(tmp_path / "lr.json"), "--logdir", str(tmp_path)], capsys
    )
    assert code == 3
    line = [e for e in err if "diverged" in e]
    assert len(line) == 1 and "non-finite loss" in line[0], err
    assert "no checkpoint had been written" in line[0]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (run / CHECKPOINT_NAME).exists()


def test_an_injected_nan_gradient_names_the_parameter_and_the_update(tmp_path):
    """A NaN in one parameter's gradient (a backward hook, the loss itself finite) stops the
    next update naming that parameter, the update and env step; the optimiser never stepped
    (the weights are the ones before) and the step-100 checkpoint stays."""
    config = RunConfig.from_dict(tiny(train={"steps": 300, "checkpoint_every": 50}))
    trainer = Trainer(Agent(None, config), tmp_path)
    assert trainer.run(300, stop_at_episode_end_after=100) == "stopped"
    saved = (tmp_path / CHECKPOINT_NAME).read_bytes()
    model = trainer.agent.model
    name, param = next((n, p) for n, p in model.named_parameters() if n.startswith("dynamics."))
    param.register_hook(lambda grad: torch.full_like(grad, math.nan))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    updates = trainer.agent.num_updates
    with pytest.raises(NonFiniteError) as err:
        trainer.run(300)
    message = str(err.value)
    assert f"update {updates + 1} (env step 101): non-finite gradient (of {name})" in message
    assert "the last good checkpoint (env step 100) is kept" in message
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert (tmp_path / CHECKPOINT_NAME).read_bytes() == saved
    trainer.close()
