"""Surviving mutants that cannot change behaviour, with the reason (read by benchmarks.mutation).

Keyed by (module, function, line before, line after) as `mutmut show` prints them, stripped;
methods appear as `Classǁmethod`, the way mutmut names them. A mutant is listed only after
reading it: the reason says why no input can tell it from the original. One file per package
(world_model/attention/, the largest, in four: HIDA and IDA, KRR, covariant attention, the
Triton kernels).
"""

from benchmarks.mutation_equivalent import (
    attention_covariant,
    attention_hida,
    attention_krr,
    attention_triton,
    geometry,
    memory,
)

EQUIVALENT = {
    **geometry.EQUIVALENT,
    **memory.EQUIVALENT,
    **attention_hida.EQUIVALENT,
    **attention_krr.EQUIVALENT,
    **attention_covariant.EQUIVALENT,
    **attention_triton.EQUIVALENT,
}
