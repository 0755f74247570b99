"""Surviving mutants that cannot change behaviour, with the reason (read by benchmarks.mutation).

Keyed by (module, function, line before, line after) as `mutmut show` prints them, stripped;
methods appear as `Classǁmethod`, the way mutmut names them. A mutant is listed only after
reading it: the reason says why no input can tell it from the original. One file per package.
"""

from benchmarks.mutation_equivalent import geometry, memory

EQUIVALENT = {**geometry.EQUIVALENT, **memory.EQUIVALENT}
