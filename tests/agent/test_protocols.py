"""agent.core.agent.Agent satisfies, structurally, each Protocol its collaborators annotate it with
(agent/core/protocols.py, agent.core.loop.TrainedAgent): every member a Protocol declares exists on
a constructed Agent, as an attribute of the declared type or as a method whose signature accepts
every call the Protocol's allows. Not isinstance on a runtime_checkable Protocol, which checks the
names alone."""

from __future__ import annotations

import inspect
import types
import typing

import pytest

from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.loop import TrainedAgent
from agent.core.protocols import ActingAgent, InspectedAgent, PlanningAgent
from tests.agent.conftest import tiny

PROTOCOLS = [PlanningAgent, ActingAgent, InspectedAgent, TrainedAgent]


def protocol_members(protocol: type) -> tuple[dict[str, object], dict[str, typing.Any]]:
    """(attributes {name: declared type}, methods {name: function}) of `protocol` and the
    Protocols it extends."""
    hints = typing.get_type_hints(protocol)
    attributes: dict[str, object] = {}
    methods: dict[str, typing.Any] = {}
    for cls in reversed(protocol.__mro__):
        if not getattr(cls, "_is_protocol", False) or cls is typing.Protocol:
            continue
        for name in cls.__dict__.get("__annotations__", {}):
            attributes[name] = hints[name]
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                methods[name] = value
    return attributes, methods


def is_instance(value: object, declared: object) -> bool:
    """isinstance against a declared type: X | None, dict[str, float] (its container), a class."""
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        return any(is_instance(value, arg) for arg in typing.get_args(declared))
    if declared is type(None):
        return value is None
    if declared is float:
        return isinstance(value, int | float)
    return isinstance(value, origin or declared)


def accepts_every_call(required: inspect.Signature, offered: inspect.Signature) -> str | None:
    """None when a method of signature `offered` accepts every call one of `required` allows
    (self left out of both), else what is missing."""
    params = offered.parameters
    for name, want in required.parameters.items():
        have = params.get(name)
        if have is None:
            return f"no parameter {name!r}"
        if want.kind != have.kind and not (
            have.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            and want.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.KEYWORD_ONLY)
        ):
            return f"parameter {name!r} is {have.kind.description}, not {want.kind.description}"
        if want.default is not inspect.Parameter.empty and have.default is inspect.Parameter.empty:
            return f"parameter {name!r} has no default"
    extra = [n for n, p in params.items() if n not in required.parameters]
    missing_default = [n for n in extra if params[n].default is inspect.Parameter.empty]
    if missing_default:
        return f"extra parameters without defaults: {missing_default}"
    return None


@pytest.fixture(scope="module")
def agent() -> Agent:
    return Agent(None, RunConfig.from_dict(tiny()))


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_the_agent_has_every_member_of_the_protocol(agent, protocol):
    attributes, methods = protocol_members(protocol)
    assert attributes and methods, protocol
    for name, declared in attributes.items():
        assert hasattr(agent, name), f"{protocol.__name__}.{name}: Agent has no attribute"
        value = getattr(agent, name)
        assert not inspect.ismethod(value), f"{protocol.__name__}.{name}: a method on Agent"
        assert is_instance(value, declared), (
            f"{protocol.__name__}.{name}: Agent's is {type(value).__name__}, not {declared}"
        )
    for name, function in methods.items():
        bound = getattr(agent, name, None)
        assert inspect.ismethod(bound), f"{protocol.__name__}.{name}(): not a method of Agent"
        wanted = inspect.signature(function)
        wanted = wanted.replace(parameters=list(wanted.parameters.values())[1:])  # no self
        problem = accepts_every_call(wanted, inspect.signature(bound))
        assert problem is None, f"{protocol.__name__}.{name}(): {problem}"


def test_the_protocols_extend_each_other_as_their_readers_pass_the_agent_on():
    """The loop hands its agent to Collection (ActingAgent) and to the figures
    (InspectedAgent); a PlanningAgent is what PlannerPolicy reads of Collection's agent."""
    assert PlanningAgent in ActingAgent.__mro__
    assert ActingAgent in TrainedAgent.__mro__ and InspectedAgent in TrainedAgent.__mro__


def test_the_signature_check_sees_a_mismatch():
    """accepts_every_call refuses what the protocol test must catch."""

    def required(obs, *, explore: bool, steps: int = 1): ...

    def keyword_renamed(obs, *, explore_: bool, steps: int = 1): ...

    def no_default(obs, *, explore: bool, steps: int): ...

    def extra_required(obs, extra, *, explore: bool, steps: int = 1): ...

    def looser(obs, explore: bool = False, steps: int = 1, more: int = 0): ...

    want = inspect.signature(required)
    assert accepts_every_call(want, inspect.signature(keyword_renamed)) is not None
    assert accepts_every_call(want, inspect.signature(no_default)) is not None
    assert accepts_every_call(want, inspect.signature(extra_required)) is not None
    assert accepts_every_call(want, inspect.signature(looser)) is None
