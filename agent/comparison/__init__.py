"""World models side by side, and model-free SAC, on one task: the library behind
`python -m agent.compare` (agent/compare.py, the command, only parses flags and calls these).

For every seed 1..N and every method, train with `agent.train`'s default config (plus the
`--config` overrides) and stop at each evaluation point for `--episodes` deterministic episodes
on the fixed evaluation seeds train.eval_seed + k, the same for every method. An agent's run is
one uninterrupted `Trainer` run evaluated from a callback; evaluation uses its own env, planner
and generator, so the run trains exactly as `python -m agent.train` trains it. SAC
("MlpPolicy", SB3's default settings) trains on the same seeds in the same process with the same
torch threads setting, so wall times are measured side by side. Training time excludes
evaluation, checkpoints and diagnostics.

A second table pairs every method with a reference (`--reference`, default gru) seed by seed:
both trained on the same seed and evaluated on the same episodes, so the per-seed difference of
mean returns removes what the seeds share. It reports on how many seeds the method did better,
the mean and median difference, and a bootstrap 95% interval of the mean difference (an
interval holding 0: these seeds do not tell the two apart). A few seeds' means are dominated by
one bad seed; the wins and the median say whether that is one seed or all of them.

OUT (default runs/compare__{env}__{time}) receives results.json (every number of the table, per
seed and per episode, rewritten after every evaluation), learning_curves.png (mean +- std over
seeds against env steps) and runs/{env}__{method}__{seed}__{time}/, one TensorBoard run per
method and seed (the geodesic runs with diagnostics nodes 67-70): `tensorboard --logdir OUT`.

Modules, each one job:

- `config`: CompareConfig (what to compare, validated at construction) and the evaluation points
- `ablations`: the seed's components knocked out one at a time (`--ablations`), each a row
- `stats`: paired differences and their bootstrap interval
- `results`: what a comparison holds (runs, points, summary and paired rows) and results.json
- `runner`: training the agents (a measured Trainer) and SAC, run_comparison, run folders
- `report`: the Markdown tables and learning_curves.png
"""
