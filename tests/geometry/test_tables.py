"""geometry.tables.constant_table: built once per key, and read under torch.compile as an
existing tensor (where functools.lru_cache is traced through and its table rebuilt in the
graph at every call)."""

from __future__ import annotations

import functools

import torch

from geometry import su2
from geometry.tables import constant_table


def _table(n: int, dtype: torch.dtype) -> torch.Tensor:
    t = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):  # element writes: each one an op when traced
        t[i, (i + 1) % n] = 1.0
    return t.to(dtype)


def _ops_of(read) -> int:
    """Ops in the graph dynamo captures for x @ read(8, x.dtype), the table built first."""
    import torch._dynamo  # here, not at import: it imports triton (see test_triton_ida.py)
    from torch._dynamo.testing import CompileCounter

    read(8, torch.float32)
    counter = CompileCounter()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(disable=False):
        fn = torch.compile(lambda x: x @ read(8, x.dtype), backend=counter, fullgraph=True)
        x = torch.randn(3, 8)
        torch.testing.assert_close(fn(x), x @ _table(8, torch.float32))
    return counter.op_count


def test_a_constant_table_is_built_once_per_key_and_returned_as_is():
    built = []

    @constant_table
    def table(n, dtype):
        built.append((n, dtype))
        return _table(n, dtype)

    a, b = table(4, torch.float32), table(4, torch.float32)
    assert a is b and built == [(4, torch.float32)]
    assert table(4, torch.float64).dtype == torch.float64 and len(built) == 2
    assert (
        su2._quaternion_tables(torch.float32, torch.device("cpu"))[0]
        is (su2._quaternion_tables(torch.float32, torch.device("cpu"))[0])
    )


def test_a_compiled_graph_reads_the_table_instead_of_rebuilding_it():
    cached = _ops_of(constant_table(_table))
    traced = _ops_of(functools.lru_cache(maxsize=4)(_table))
    assert cached == 1  # the product alone
    assert traced > 8  # the zeros, the eight writes, the cast and the product
