"""A trained run read without training it: diagnose's report (`inspection`, its text in
`inspection_format`) and the figures (`figures` draws what `figures_data` collects from the run,
with the replay buffer's episodes of `figure_episodes`; the geodesic heads' numbers come from
world_model/geodesic/head_pass.py and head_figures.py)."""
