"""The table the per-package lists fill: (module, function, line before, line after) -> why."""

from __future__ import annotations

Key = tuple[str, str, str, str]

DEVICE_ONLY = "device only: on a CPU-only machine (the tests' machine) None is the input's device"
CPU_DEFAULT_DTYPE = "torch infers int64 from Python ints: the dtype it names is the default"


class Table:
    """Equivalent mutants with their reasons."""

    def __init__(self) -> None:
        self.entries: dict[Key, str] = {}

    def add(self, module: str, function: str, pairs: list[tuple[str, str]], why: str) -> None:
        """List the mutants of `function` in `module` given as (line before, line after)."""
        for before, after in pairs:
            self.entries[(module, function, before, after)] = why
