"""Environments: gymnasium continuous-control tasks behind one `make_env`, and the project's own
environments with known ground-truth dynamics."""
