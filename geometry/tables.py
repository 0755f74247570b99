"""Constant tables (structure constants, quaternion and doublet layouts): built once per key and
read only, in eager code and under torch.compile alike.

`functools.lru_cache` is not enough under torch.compile: dynamo ignores the cache wrapper and
traces the wrapped function, so a compiled step would rebuild every table (hundreds of
element-wise writes, complex arithmetic inductor cannot generate code for) at every call.
:func:`constant_table` keeps the tables in a plain dict whose lookup dynamo traces as a read of
an existing tensor (a graph input), as long as the table was built before the traced call
(world_model/geodesic/compiled.py: a plan's context, built eagerly before its compiled steps,
builds every table the steps read).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

__all__ = ["constant_table"]

T = TypeVar("T")


def constant_table(build: Callable[..., T]) -> Callable[..., T]:
    """`build(*key)` computed on the first call with a key and returned from a dict afterwards
    (the key's parts hashable: ints, dtypes, devices, frozen dataclasses). Callers must not
    write into a returned table."""
    tables: dict[tuple, T] = {}

    @functools.wraps(build)
    def table(*key):
        found = tables.get(key)
        if found is None:
            found = tables[key] = build(*key)
        return found

    return table
