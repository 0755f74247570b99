"""Kill -9 trials: a training run killed at chosen points, resumed, compared with the same run
uninterrupted.

    python -m benchmarks.kill_trials                       # every trial, the table
    python -m benchmarks.kill_trials --trials checkpoint-write evaluation --steps 200

Each trial starts `agent.train` in a child process with a hook (`--child`) that stops it at one
point (an env step mid-episode, between two updates, half-way through writing a checkpoint's
temporary file, just after a checkpoint's rename, mid-evaluation, during a resume's loading,
before the first checkpoint) and says so in a marker file; the parent then sends SIGKILL, resumes
with `python -m agent.train --resume RUN` (or starts again when no checkpoint had been written)
until the run is done, and compares it with a reference run of the same seed that was never
interrupted:

- the final checkpoint's agent (weights, optimisers, replay buffer, planner, counters), loop and
  random-generator states, by content digest (agent.persistence.checkpoint.content_digest: bit for
  bit);
- the TensorBoard scalars: every tag at the reference's steps, each step once (the resumed
  writer's purge_step drops what the killed process logged after its checkpoint), and every
  value of charts/ and eval/ and losses/ the reference's (perf/ is timing);
- what was lost: env steps from the checkpoint the resume started from to the kill (at most
  one checkpoint interval plus an episode: checkpoints are written at episode ends, where the
  env's whole state is its generator, which is why the continuation is exact);
- temporaries left in the run folder at the end (a killed writer's is removed by the next save).

The hooks only pause the child where the kill should land; what is tested is the real agent.train,
agent.persistence.checkpoint and TensorBoard writer. tests/agent/test_kill_resume.py runs one trial
in CI.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "KILL_ME.json"
PAUSE_S = 600.0  # a hooked child waits this long for its kill


@dataclass(frozen=True)
class Trial:
    name: str
    hook: str
    at: int
    """env step (step, update, evaluation hooks) or the n-th checkpoint write (write hooks)"""
    description: str


def trials(steps: int, episode: int, checkpoint_every: int) -> list[Trial]:
    """The trials of a run of `steps` env steps, episodes of `episode`, checkpoints every
    `checkpoint_every` (at episode ends)."""
    mid = 2 * checkpoint_every + episode // 2 + 3  # an env step inside an episode
    return [
        Trial("first", "step", max(2, episode // 3), "before the first checkpoint"),
        Trial("mid-episode", "step", mid, f"at env step {mid}, mid-episode"),
        Trial("update", "update", mid + 5, f"between two updates after env step {mid + 5}"),
        Trial("checkpoint-write", "write", 2, "half-way through the 2nd checkpoint's write"),
        Trial("after-rename", "renamed", 2, "just after the 2nd checkpoint's rename"),
        Trial("evaluation", "evaluation", 2, "mid-evaluation (the 2nd one), 10 steps in"),
        Trial("resume", "resume", mid, f"at env step {mid}, then again during the resume"),
        Trial("late", "step", steps - episode // 2, "in the last episode"),
    ]


# ----------------------------------------------------------------------- the hooked child


def _pause(marker: Path, step: int, where: str) -> None:
    marker.write_text(json.dumps({"step": int(step), "where": where}))
    time.sleep(PAUSE_S)
    raise SystemExit(f"kill_trials: no kill arrived {where}")


def install_hook(hook: str, at: int, marker: Path) -> None:
    """Patch the child's agent.train so that it pauses (and is killed) at the hook."""
    import torch

    from agent.core import agent as agent_module
    from agent.core import loop
    from agent.persistence import checkpoint

    if hook == "step":
        observe = agent_module.Agent.observe

        def hooked_observe(self, *args, **kwargs):
            observe(self, *args, **kwargs)
            if self.num_timesteps == at:
                _pause(marker, self.num_timesteps, "after an env step")

        agent_module.Agent.observe = hooked_observe
    elif hook == "update":
        update = agent_module.Agent.update

        def hooked_update(self, *args, **kwargs):
            if self.num_timesteps >= at and not getattr(self, "_hooked", False):
                self._hooked = True
                _pause(marker, self.num_timesteps, "before an update")
            return update(self, *args, **kwargs)

        agent_module.Agent.update = hooked_update
    elif hook in ("write", "renamed"):
        calls = {"n": 0}
        save, replace = torch.save, os.replace

        def hooked_save(obj, fh, *args, **kwargs):
            if not isinstance(obj, dict) or "agent" not in obj:
                return save(obj, fh, *args, **kwargs)
            calls["n"] += 1
            if hook == "write" and calls["n"] == at:
                data = io.BytesIO()
                save(obj, data, *args, **kwargs)
                fh.write(data.getvalue()[: len(data.getvalue()) // 2])
                fh.flush()
                _pause(marker, obj["agent"]["counters"]["num_timesteps"], "mid-write")
            return save(obj, fh, *args, **kwargs)

        def hooked_replace(src, dst, *args, **kwargs):
            replace(src, dst, *args, **kwargs)
            if Path(dst).name == "checkpoint.pt" and hook == "renamed" and calls["n"] == at:
                _pause(marker, -1, "after the rename")

        checkpoint.torch.save = hooked_save
        checkpoint.os.replace = hooked_replace
    elif hook == "evaluation":
        evaluate = loop.Trainer.evaluate
        count = {"evaluations": 0}

        def hooked_evaluate(self, episodes=None, on_step=None):
            count["evaluations"] += 1
            steps = {"n": 0}

            def on(*transition):
                steps["n"] += 1
                if count["evaluations"] == at and steps["n"] == 10:
                    _pause(marker, self.agent.num_timesteps, "mid-evaluation")
                if on_step is not None:
                    on_step(*transition)

            return evaluate(self, episodes, on_step=on)

        loop.Trainer.evaluate = hooked_evaluate
    elif hook == "resume":
        load = agent_module.load_checkpoint

        def hooked_load(*args, **kwargs):
            state = load(*args, **kwargs)
            _pause(marker, state["agent"]["counters"]["num_timesteps"], "during the resume")
            return state

        agent_module.load_checkpoint = hooked_load
    else:
        raise ValueError(f"unknown hook {hook!r}")


def child_main(hook: str, at: int, marker: Path, argv: list[str]) -> int:
    install_hook(hook, at, marker)
    from agent.train import main

    return main(argv)


# ----------------------------------------------------------------------- the parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}


def train(argv: list[str], hook: tuple[str, int] | None = None, marker: Path | None = None):
    """Run agent.train (hooked: until its marker appears, then SIGKILL). Returns the killed
    step (hooked) or None; raises if the process fails or never reaches its hook."""
    if hook is None:
        cmd = [sys.executable, "-m", "agent.train", *argv]
    else:
        cmd = [sys.executable, "-m", "benchmarks.kill_trials", "--child", hook[0], str(hook[1]),
               str(marker), "--", *argv]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    if hook is None:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-500:]}")
        return None
    while not marker.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the hooked run ended before its hook: {proc.stderr.read()[-500:]}")
        time.sleep(0.05)
    time.sleep(0.05)  # the marker is written just before the pause
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    step = json.loads(marker.read_text())["step"]
    marker.unlink()
    return step


def run_folder(logdir: Path) -> Path:
    (run,) = [p for p in logdir.iterdir() if p.is_dir()]
    return run


def checkpoint_step(run: Path) -> int | None:
    from agent.persistence.checkpoint import CheckpointError, load_checkpoint

    try:
        return int(load_checkpoint(run / "checkpoint.pt")["agent"]["counters"]["num_timesteps"])
    except CheckpointError:
        return None


def final_digests(run: Path) -> dict[str, str]:
    from agent.persistence.checkpoint import content_digest, load_checkpoint

    state = load_checkpoint(run / "checkpoint.pt")
    return {part: content_digest(state[part]) for part in ("agent", "loop", "rng")}


def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0}).Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}  # fmt: skip


@dataclass(frozen=True)
class Reference:
    """What every trial is compared with: the uninterrupted run's final digests and curves,
    read once."""

    digests: dict[str, str]
    curves: dict[str, list[tuple[int, float]]]

    @classmethod
    def of(cls, run: Path) -> Reference:
        return cls(final_digests(run), scalars(run))


def compare_curves(
    got: dict[str, list[tuple[int, float]]], want: dict[str, list[tuple[int, float]]]
) -> tuple[bool, bool, list[str]]:
    """(same steps per tag, no duplicated step, tags whose compared values differ)."""
    same_steps = set(got) == set(want) and all(
        [s for s, _ in got[t]] == [s for s, _ in want[t]] for t in want
    )
    unique = all(len({s for s, _ in v}) == len(v) for v in got.values())
    compared = [t for t in want if t.split("/")[0] in ("charts", "eval", "losses", "diagnostics")]
    compared = [t for t in compared if t != "eval/seconds"]
    differ = [t for t in compared if t in got and got[t] != want[t]]
    return same_steps, unique, differ


def run_trial(trial: Trial, base_argv: list[str], root: Path, reference: Reference) -> dict:
    logdir = root / trial.name
    argv = [*base_argv, "--logdir", str(logdir)]
    marker = root / f"{trial.name}-{MARKER}"
    start = time.perf_counter()
    first = ("step", trial.at) if trial.hook == "resume" else (trial.hook, trial.at)
    killed_at = train(argv, first, marker)
    run = run_folder(logdir)
    resumed_from = checkpoint_step(run)
    if trial.hook == "renamed":
        killed_at = resumed_from  # the kill landed at the checkpoint's own step
    kills = 1
    if resumed_from is None:  # killed before the first checkpoint: start again
        shutil.rmtree(run)
        train(argv)
        resumed_from = 0
    else:
        if trial.hook == "resume":  # the first resume is killed while it loads
            train(["--resume", str(run)], ("resume", 0), marker)
            kills += 1
        train(["--resume", str(run)])
    run = run_folder(logdir)
    same_steps, unique, differ = compare_curves(scalars(run), reference.curves)
    return {
        "trial": trial.name,
        "killed": trial.description,
        "kills": kills,
        "killed_at": killed_at,
        "resumed_from": resumed_from,
        "lost_steps": None if killed_at is None else max(0, killed_at - resumed_from),
        "identical": final_digests(run) == reference.digests,
        "curves_same_steps": same_steps,
        "curves_no_duplicates": unique,
        "curve_values_differ": differ,
        "temporaries_left": len(list(run.glob(".tmp-*"))),
        "seconds": time.perf_counter() - start,
    }


def config(steps: int, world_model: str) -> dict:
    """The trials' run: 25-step Pendulum episodes, checkpoints every 50 env steps, an
    evaluation every 50, with the geodesic world model's episodic memory and routed pool."""
    train_section = {"env_id": "Pendulum-v1", "world_model": world_model, "steps": steps,
                     "max_episode_steps": 25, "seed_steps": 30, "eval_every": 50,
                     "eval_episodes": 1, "checkpoint_every": 50, "log_every": 25,
                     "diagnostics_every": 20, "device": "cpu"}  # fmt: skip
    data = {
        "train": train_section,
        "agent": {"batch_size": 16, "pretrain_updates": 0},
        "loss": {"horizon": 2},
        "planner": {
            "horizon": 2,
            "iterations": 2,
            "num_samples": 32,
            "num_elites": 4,
            "num_pi_trajs": 4,
        },  # fmt: skip
        "model": {"hidden_dim": 16, "hidden_layers": 1, "num_bins": 11},
    }
    if world_model == "geodesic":
        context = {"prototypes": 8, "memory": "dense", "memory_capacity": 16, "routing": "gsr",
                   "pool_capacity": 24, "route_k": 4}  # fmt: skip
        data["dynamics"] = {"latent_dim": 4, "encoder_dim": 16, "context": context}
    else:
        data["dynamics"] = {"latent_dim": 16, "encoder_dim": 16, "input_dim": 16}
    return data


def run_trials(names: list[str] | None, steps: int, world_model: str, out: Path) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "config.json"
    cfg.write_text(json.dumps(config(steps, world_model)))
    base = ["--config", str(cfg)]
    train([*base, "--logdir", str(out / "reference")])
    reference = Reference.of(run_folder(out / "reference"))
    chosen = [t for t in trials(steps, 25, 50) if names is None or t.name in names]
    return [run_trial(t, base, out, reference) for t in chosen]


def format_table(rows: list[dict]) -> str:
    head = ("trial", "killed", "kills", "at step", "resumed from", "lost", "identical",
            "curves", "temporaries", "s")  # fmt: skip
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        curves = "same" if r["curves_same_steps"] and r["curves_no_duplicates"] else "SPLIT"
        if r["curve_values_differ"]:
            curves += f" (values differ: {', '.join(r['curve_values_differ'])})"
        lines.append(" | ".join(map(str, (
            r["trial"], r["killed"], r["kills"], r["killed_at"], r["resumed_from"],
            r["lost_steps"], "yes" if r["identical"] else "NO", curves, r["temporaries_left"],
            f"{r['seconds']:.0f}",
        ))))  # fmt: skip
    return "\n".join(f"| {line} |" for line in lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        hook, at, marker, sep, *train_argv = argv[1:]
        assert sep == "--"
        return child_main(hook, int(at), Path(marker), train_argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [t.name for t in trials(400, 25, 50)]
    parser.add_argument("--trials", nargs="+", choices=names, default=None,
                        help="which trials (default: all)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=300, help="env steps of every run")
    parser.add_argument("--world-model", default="geodesic", choices=("geodesic", "gru"))
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs "
                        "(default: a temporary folder)")  # fmt: skip
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="kill_trials_"))
    rows = run_trials(args.trials, args.steps, args.world_model, out)
    print(
        f"kill -9 trials: {args.world_model} agent, {args.steps} env steps, Pendulum-v1, "
        f"checkpoints every 50 env steps at episode ends (episodes of 25); runs in {out}\n"
    )
    print(format_table(rows))
    (out / "kill_trials.json").write_text(json.dumps(rows, indent=1))
    ok = [r["identical"] and r["curves_same_steps"] and r["curves_no_duplicates"]
          and not r["temporaries_left"] for r in rows]  # fmt: skip
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
