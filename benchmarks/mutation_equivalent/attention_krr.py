"""Equivalent surviving mutants of world_model/attention/ (krr modules; see this package's
__init__.py)."""

from benchmarks.mutation_equivalent._table import Table

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_M = "world_model.attention."
