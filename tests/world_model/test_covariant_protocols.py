"""The Protocols of world_model/attention/covariant_types.py that the attention kernels and the
closed-form potential gradient annotate their head with (instead of importing the head): each
module reads exactly what its Protocol declares, and a CovariantAttention of that kind has all
of it."""

from __future__ import annotations

import ast
import inspect

import pytest

from tests.world_model.test_covariant import _potential_head, make_head
from world_model.attention import covariant_gradient, covariant_kernels
from world_model.attention.covariant_types import ChiralProjectorSource, KernelHead, PotentialHead


def declared(protocol: type) -> set[str]:
    """The members a Protocol declares, its bases' included."""
    return {
        name
        for cls in protocol.__mro__
        if cls.__module__ == protocol.__module__
        for name in vars(cls)
        if not name.startswith("_")
    }


def read_of_head(module) -> set[str]:
    """The attributes a module reads of a variable named `head`."""
    tree = ast.parse(inspect.getsource(module))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "head"
    }


@pytest.mark.parametrize(
    "module, protocol, indirect",
    [
        (covariant_kernels, KernelHead, set()),
        # chiral_projector: through CovariantQueries.projector(head)
        (covariant_gradient, PotentialHead, declared(ChiralProjectorSource)),
    ],
)
def test_each_module_reads_exactly_what_its_protocol_declares(module, protocol, indirect):
    assert read_of_head(module) | indirect == declared(protocol)


@pytest.mark.parametrize(
    "protocol, make",
    [
        (KernelHead, lambda: make_head(kernel="krr")),  # ridge_lambda: kernel "krr" only
        (PotentialHead, _potential_head),
    ],
)
def test_the_head_has_every_member_its_protocol_declares(protocol, make):
    head = make()
    assert {name for name in declared(protocol) if not hasattr(head, name)} == set()
