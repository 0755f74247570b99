"""The table the per-package lists fill: (module, function, line before, line after) -> why."""

from __future__ import annotations

Key = tuple[str, str, str, str]

# reasons that recur across functions and packages
DEVICE_ONLY = "device only: on a CPU-only machine (the tests' machine) None is the input's device"
CPU_DEFAULT_DTYPE = "torch infers int64 from Python ints: the dtype it names is the default"
LAST_OF_TWO = "dim 1 of a 2-D tensor is dim -1"
NEW_LAST_AXIS = "a new last axis of a 1-D tensor is axis 1"
WIDEST_FLOAT = (
    "torch has no real floating dtype wider than 64 bits: float64 is chosen for every dtype "
    "either way"
)
EINSUM_CASE = "einsum takes upper-case subscripts as it takes lower-case ones"
EXACT_IDENTITY = (
    "the identity's 0s and 1s are exact in every dtype, and type promotion gives the other "
    "operand's dtype"
)


def series_switch(point: str, agreement: str) -> str:
    """The reason for `<` turned into `<=` at a series/closed-form switch."""
    return (
        f"at {point} exactly the series and the closed form agree to the series' truncation "
        f"({agreement}); no test can pin which one a single point takes"
    )


class Table:
    """Equivalent mutants with their reasons."""

    def __init__(self) -> None:
        self.entries: dict[Key, str] = {}

    def add(self, module: str, function: str, pairs: list[tuple[str, str]], why: str) -> None:
        """List the mutants of `function` in `module` given as (line before, line after)."""
        for before, after in pairs:
            self.entries[(module, function, before, after)] = why
