"""The values a covariant attention head takes and returns (seed 003; docs/seed_map.md,
section "Covariant attention head, screening, diagnostics 67-70"):

- :class:`CovariantQueries`  query points, features, velocity, value gradient and levels;
- :class:`PreparedContext`  a context bank transported to the origin once (Def 282, Engineering
  proxy 3), reused by every query of a plan or rollout;
- :class:`AttentionRecord`  what one forward pass leaves for the diagnostics (nodes 67-70);
- :class:`ChiralProjectorSource`, :class:`KernelHead`, :class:`PotentialHead`  what the queries,
  the attention kernels (covariant_kernels) and the closed-form potential gradient
  (covariant_gradient) read of a head, as Protocols: the head passes itself to them, and none of
  them imports the head.

A leaf module: it imports nothing from the head (world_model/attention/covariant.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor, nn

from geometry.doublet import masked_softmax, pair_mixture, pair_products

from .context import MACRO_LEVEL, ContextBank

if TYPE_CHECKING:  # annotations only
    from geometry.lie_algebra import GaugeGroup

    from .covariant_config import CovariantAttentionConfig

__all__ = [
    "FieldMap",
    "ChiralProjectorSource",
    "KernelHead",
    "PotentialHead",
    "CovariantQueries",
    "PreparedContext",
    "AttentionRecord",
    "charged_entry_columns",
    "check_context",
    "check_queries",
]

FieldMap = Callable[[Tensor, Tensor], Tensor]  # (positions [..., d], fields [..., k]) -> [..., k]


class ChiralProjectorSource(Protocol):
    """What :meth:`CovariantQueries.projector` needs of a head: Pi and the degenerate flags
    for a value gradient [..., d] -> ([..., 2, 2] complex, [...] bool)."""

    def chiral_projector(self, value_grad: Tensor) -> tuple[Tensor, Tensor]: ...


class KernelHead(Protocol):
    """What the attention kernels (covariant_kernels) read of the head that calls them: its
    config, the temperature tau(z) [...] of positions [..., d], the screening penalty
    sigma A [B, Q, N] of queries z [B, Q, d] against entries z' [Bc, N, d] (with their levels)
    and the ridge lambda of kernel "krr"."""

    @property
    def config(self) -> CovariantAttentionConfig: ...

    def temperature(self, positions: Tensor) -> Tensor: ...

    def screening_penalty(
        self, z: Tensor, z_entries: Tensor, query_levels: Tensor, entry_levels: Tensor
    ) -> Tensor: ...

    def ridge_lambda(self) -> Tensor: ...


class PotentialHead(ChiralProjectorSource, Protocol):
    """What the closed-form potential gradient (covariant_gradient.scalar_output_gradient)
    reads of a scalar head: its config; the gauge structure (rep_dim r, the generators
    [G, r, r], the group, the connection's coefficients c0 [d, G] and c1 [d, d, G], the lines
    U_{z->0} [..., r, r] of positions [..., d]); the query's maps W_Q, W_Qz and its rank-R
    quadratic factors [R, d_k, d]; the read-out W_O; the string tensions sigma(l) [L + 1]; and,
    for the chiral gate, the mixing strength and the projector (ChiralProjectorSource)."""

    @property
    def config(self) -> CovariantAttentionConfig: ...

    @property
    def rep_dim(self) -> int: ...

    @property
    def generators(self) -> Tensor: ...

    @property
    def group(self) -> GaugeGroup: ...

    @property
    def connection_c0(self) -> Tensor: ...

    @property
    def connection_c1(self) -> Tensor: ...

    @property
    def q_gamma_u(self) -> Tensor: ...

    @property
    def q_gamma_v(self) -> Tensor: ...

    @property
    def w_q(self) -> nn.Linear: ...

    @property
    def w_qz(self) -> nn.Linear: ...

    @property
    def w_o(self) -> nn.Linear: ...

    @property
    def chirality_strength(self) -> Tensor: ...

    def lines_to_origin(self, positions: Tensor) -> Tensor: ...

    def string_tension(self) -> Tensor: ...


@dataclass
class CovariantQueries:
    """Queries of a covariant head; either one per batch element ([B, ...]) or several
    ([B, Q, ...]); the output follows the same layout.

    positions:         [B, (Q,) d] points in the ball
    features:          [B, (Q,) d_query]
    velocity:          [B, (Q,) d] tangent velocity v = G^-1 p (Gamma(z)[v, v], W_Qzv terms)
    velocity_features: [B, (Q,) d_velocity_features] x_v = phi_v(v) (W_Qv term)
    value_grad:        [B, (Q,) d] grad V at z: drives the chiral projector (none: no gate)
    levels:            [B, (Q,)] integer query level (none: the head's config.query_level)
    chiral:            (Pi, degenerate) = head.chiral_projector(value_grad), or with Pi's flat
                       operator (Pi, degenerate, operator) = head.chiral_inputs(value_grad),
                       precomputed, with
                       leading dims broadcastable to [B, (Q,)]: a caller whose value gradient
                       is fixed over many calls (a rollout) computes it once; it replaces
                       value_grad (none: computed from value_grad when given)
    """

    positions: Tensor
    features: Tensor
    velocity: Tensor | None = None
    velocity_features: Tensor | None = None
    value_grad: Tensor | None = None
    levels: Tensor | None = None
    chiral: tuple[Tensor, ...] | None = None

    def __post_init__(self) -> None:
        p = self.positions
        if p.dim() not in (2, 3):
            raise ValueError(
                f"CovariantQueries.positions must be [B, d] or [B, Q, d], got {tuple(p.shape)}"
            )
        lead = tuple(p.shape[:-1])
        for name in ("features", "velocity", "velocity_features", "value_grad"):
            t = getattr(self, name)
            if t is None:
                continue
            if t.dim() != p.dim() or tuple(t.shape[:-1]) != lead:
                raise ValueError(
                    f"CovariantQueries.{name} must have leading shape {lead}, got {tuple(t.shape)}"
                )
            if t.dtype != p.dtype:
                raise ValueError(f"CovariantQueries.{name} has dtype {t.dtype}, not {p.dtype}")
        if self.levels is not None and (
            tuple(self.levels.shape) != lead
            or self.levels.dtype.is_floating_point
            or self.levels.dtype == torch.bool
        ):
            raise ValueError(
                f"CovariantQueries.levels must be an integer tensor of shape {lead}, "
                f"got {self.levels.dtype} {tuple(self.levels.shape)}"
            )
        for name in ("velocity", "value_grad"):
            t = getattr(self, name)
            if t is not None and t.shape[-1] != p.shape[-1]:
                raise ValueError(f"CovariantQueries.{name} must have last dim d = {p.shape[-1]}")
        max_norm = float(p.detach().norm(dim=-1).max())  # NaN fails the test below too
        if not max_norm < 1.0:
            raise ValueError(
                "CovariantQueries.positions must be finite points inside the unit ball "
                f"(max |z| = {max_norm:.6g})"
            )

    @classmethod
    def unchecked(cls, **values: Tensor | tuple[Tensor, ...] | None) -> CovariantQueries:
        """Queries from code that guarantees what __post_init__ checks (shapes, dtypes, points
        inside the ball: a model's own states), without the checks: their max |z| read costs
        a few ops and a host sync on every call of a rollout's inner loop."""
        queries = object.__new__(cls)
        for name, default in _QUERY_FIELDS:  # a constant tuple: torch.compile traces it
            setattr(queries, name, values.pop(name, default))
        if values:
            raise TypeError(f"unknown CovariantQueries fields {sorted(values)}")
        return queries

    @property
    def single(self) -> bool:
        """True for one query per batch element ([B, d])."""
        return self.positions.dim() == 2

    def multi(self) -> CovariantQueries:
        """The same queries in the [B, Q, ...] layout (Q = 1 for single queries)."""
        if not self.single:
            return self

        def unsq(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.unsqueeze(1)

        tensors = {f.name: unsq(getattr(self, f.name)) for f in fields(self) if f.name != "chiral"}
        chiral = None
        if self.chiral is not None:  # (Pi [.., 2, 2], degenerate [..], operator [.., k, k]):
            proj, degenerate, *operator = self.chiral  # the query axis before the matrices'
            chiral = (
                proj.unsqueeze(-3),
                degenerate.unsqueeze(-1),
                *(o.unsqueeze(-3) for o in operator),
            )
        return CovariantQueries.unchecked(**tensors, chiral=chiral)  # checked when built

    def projector(self, head: ChiralProjectorSource) -> tuple[Tensor, ...] | None:
        """(Pi, degenerate[, operator]) for `head`: the precomputed tuple, else from value_grad,
        else None."""
        if self.chiral is not None:
            return self.chiral
        if self.value_grad is None:
            return None
        return head.chiral_projector(self.value_grad)


_QUERY_FIELDS = tuple((f.name, f.default) for f in fields(CovariantQueries))


@dataclass
class PreparedContext:
    """A context bank transported to the origin once (seed 003 Def 282; Engineering proxy 3):
    reusable for every query while the bank and the head's parameters are unchanged (a plan).

    positions [Bc, N, d], levels [Bc, N], mask [Bc, N] | None; key_fields [Bc, N, d_k] (local
    frame, for re-scoring under another connection); keys, values [Bc, N, d_k] at the origin;
    lines [Bc, N, r, r] = U_{z'->0} in the minimal representation (r = 4 n_colors; it acts on
    the d_k-dim fields as U (x) I_m). Bc = 1: shared by every query of the batch.
    A bank joined by :meth:`cat` joins key_fields, keys, values and lines from its parts on
    first read (a rollout that contracts part by part never reads them joined).
    """

    positions: Tensor
    levels: Tensor
    mask: Tensor | None
    _key_fields: Tensor | None
    _keys: Tensor | None
    _values: Tensor | None
    _lines: Tensor | None
    charged: bool = True  # any colour-charged (texture) entry: False skips area-law screening
    ridge_inverse: Tensor | None = None  # kernel "krr": (K_kk + lam I)^-1 [Bc, N, N], once
    charged_index: Tensor | None = None  # [C] entries charged in some row (None: not yet read)
    # (keys, values) of the parts a PreparedContext.cat joined, as prepared ([1 or B, N_i, d_k],
    # in entry order): the head contracts part by part, so a shared part stays one plain matrix
    # product instead of a product with its copy expanded over the batch (None: one part)
    blocks: tuple[tuple[Tensor, Tensor], ...] | None = None
    # log m_j [Bc, N]: entry j counts as m_j coincident entries in the softmax (a routed pool's
    # GSR weights, §10.1; `within`); None: every mass 1
    log_mass: Tensor | None = None
    _charged_entries: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False)
    _parts: tuple[PreparedContext, ...] = field(default=(), repr=False)  # set by cat

    @property
    def batch_size(self) -> int:
        return self.positions.shape[0]

    def _field(self, name: str) -> Tensor:
        value = getattr(self, "_" + name)
        if value is None:  # a joined bank: join the parts' fields now, once
            parts = [getattr(p, name) for p in self._parts]  # [1 or B, N_i, ...]
            value = torch.cat([t.expand(self.batch_size, *t.shape[1:]) for t in parts], dim=1)
            setattr(self, "_" + name, value)
        return value

    @property
    def key_fields(self) -> Tensor:
        return self._field("key_fields")

    @property
    def keys(self) -> Tensor:
        return self._field("keys")

    @property
    def values(self) -> Tensor:
        return self._field("values")

    @property
    def lines(self) -> Tensor:
        return self._field("lines")

    @staticmethod
    def cat(parts: Sequence[PreparedContext]) -> PreparedContext:
        """Join banks prepared separately (a shared B = 1 provider, e.g. prototypes, and a
        per-sample one, e.g. a trajectory window) along the entry axis, broadcasting B = 1 parts
        (as ContextBank.cat): each entry keeps the one Wilson line it was prepared with. Not for
        the KRR kernel, whose ridge system couples all entries (prepare the joined bank)."""
        if any(p.ridge_inverse is not None for p in parts):
            raise ValueError("PreparedContext.cat: KRR banks must be prepared joined")
        batch = max(p.batch_size for p in parts)

        def joined(name: str) -> Tensor:
            ts = [getattr(p, name) for p in parts]
            return torch.cat([t.expand(batch, *t.shape[1:]) for t in ts], dim=1)

        def joined_rows(name: str, fill: bool | float) -> Tensor | None:
            """An optional per-entry field [1 or B, N_i] of the parts (mask, log_mass), joined
            as [B, N]: a part without it reads `fill` at each entry; None when no part has it."""
            rows = [getattr(p, name) for p in parts]
            given = next((r for r in rows if r is not None), None)
            if given is None:
                return None
            rows = [
                r if r is not None else given.new_full(p.positions.shape[:2], fill)
                for r, p in zip(rows, parts, strict=True)
            ]
            return torch.cat([r.expand(batch, -1) for r in rows], dim=1)

        masks = joined_rows("mask", True)
        offsets = [0]
        for p in parts:
            offsets.append(offsets[-1] + p.positions.shape[1])
        charged_index = torch.cat(
            [o + p.charged_columns() for o, p in zip(offsets[:-1], parts, strict=True)]
        )
        blocks = None  # contract part by part only where a shared part meets a per-sample one
        if len({p.batch_size for p in parts}) > 1:
            blocks = tuple(blk for p in parts for blk in (p.blocks or ((p.keys, p.values),)))
        return PreparedContext(
            positions=joined("positions"),
            levels=joined("levels"),
            mask=masks,
            _key_fields=None,
            _keys=None,
            _values=None,
            _lines=None,
            charged=any(p.charged for p in parts),
            charged_index=charged_index,
            blocks=blocks,
            log_mass=joined_rows("log_mass", 0.0),
            _parts=tuple(parts),
        )

    def within(self, keep: Tensor, log_mass: Tensor | None = None) -> PreparedContext:
        """The same prepared entries, batch row b reading only those keep[b] marks ([B, N]
        bool), each with the mass exp(log_mass[b]) ([B, N], None: 1): a routed provider prepares
        its whole pool once and each rollout reads its top-K through the mask, so the pool's keys
        and values stay one shared matrix (one matrix product for all queries, as a fixed
        table's) instead of a gathered copy per row. Not for a joined or KRR bank (the KRR
        kernel's ridge system is over the selected entries)."""
        if self._parts or self.ridge_inverse is not None:
            raise ValueError("PreparedContext.within: prepare a joined or KRR bank after selecting")
        mask = keep if self.mask is None else keep & self.mask
        return replace(self, mask=mask, log_mass=log_mass)

    def softmax(self, logits: Tensor) -> Tensor:
        """alpha_j ∝ m_j exp(l_j) over the valid entries: logits [B, N] or [B, Q, N]
        (geometry.doublet.masked_softmax with the entries' log masses added)."""
        mask, log_mass = self.mask, self.log_mass
        if logits.dim() == 3:  # [B, Q, N]: one mask and mass row per batch row
            mask = None if mask is None else mask.unsqueeze(-2)
            log_mass = None if log_mass is None else log_mass.unsqueeze(-2)
        return masked_softmax(logits if log_mass is None else logits + log_mass, mask)

    def products(self, q: Tensor, values: bool = False) -> Tensor:
        """<q_bi, key_bj> (or value_bj) for every entry j: q [B, Q, d_k] -> [B, Q, N]."""
        if self.blocks is None:
            return pair_products(q, self.values if values else self.keys)
        return torch.cat([pair_products(q, blk[int(values)]) for blk in self.blocks], dim=-1)

    def mixture(self, w: Tensor, values: bool = True) -> Tensor:
        """sum_j w_bij value_bj (or key_bj): w [B, Q, N] -> [B, Q, d_k]."""
        if self.blocks is None:
            return pair_mixture(w, self.values if values else self.keys)
        sizes = [blk[0].shape[1] for blk in self.blocks]
        parts = zip(w.split(sizes, dim=-1), self.blocks, strict=True)
        return sum(pair_mixture(wp, blk[int(values)]) for wp, blk in parts)  # type: ignore[return-value]

    def charged_entries(self) -> tuple[Tensor, Tensor, Tensor]:
        """(columns [C], their positions [Bc, C, d], their levels [Bc, C]) of the entries that are
        colour-charged in some batch row, read once per prepared bank (every query of a
        rollout screens the same entries)."""
        if self._charged_entries is None:
            cols = self.charged_columns()
            self._charged_entries = (cols, self.positions[:, cols], self.levels[:, cols])
        return self._charged_entries

    def charged_columns(self) -> Tensor:
        """[C] indices of the entries that are colour-charged in some batch row: screening
        reads only these (a few texture entries among many macro prototypes)."""
        if self.charged_index is None:
            self.charged_index = charged_entry_columns(self.levels)
        return self.charged_index


def charged_entry_columns(levels: Tensor) -> Tensor:
    """levels [Bc, N] -> [C] long: the entries whose level is not macro in some row."""
    return (levels != MACRO_LEVEL).any(0).nonzero().squeeze(-1)


@dataclass
class AttentionRecord:
    """What one forward pass leaves for the diagnostics (nodes 67-70). Always [B, Q, ...]:

    weights [B, Q, N] after screening and renormalisation; scores [B, Q, N] = <Q~, K~> before
    temperature; logits [B, Q, N] = scores / tau before screening; tau, conformal [B, Q] (the
    temperature used and lambda(z)); query_levels [B, Q]; entry_levels [Bc, N]; mask [Bc, N] or
    None; projectors [B, Q, 2, 2] complex and degenerate [B, Q] bool (None without value_grad).
    """

    weights: Tensor
    scores: Tensor
    logits: Tensor
    tau: Tensor | None  # None for kernels without a temperature (inverse distance, KRR)
    conformal: Tensor
    query_levels: Tensor
    entry_levels: Tensor
    mask: Tensor | None
    projectors: Tensor | None
    degenerate: Tensor | None
    d_k: int

    def detach(self) -> AttentionRecord:
        """A copy cut from the autograd graph (safe to keep across steps)."""
        return AttentionRecord(
            **{
                f.name: getattr(self, f.name).detach()
                if isinstance(getattr(self, f.name), Tensor)
                else getattr(self, f.name)
                for f in fields(self)
            }
        )


def check_context(cfg: CovariantAttentionConfig, context: ContextBank) -> None:
    """One clear error where a context bank does not fit a head of configuration `cfg`."""
    if context.dim != cfg.d:
        raise ValueError(f"context positions have d = {context.dim}, the head expects {cfg.d}")
    if context.key_features.shape[-1] != cfg.d_key:
        raise ValueError(
            f"context key_features have {context.key_features.shape[-1]} features, "
            f"the head expects d_key = {cfg.d_key}"
        )
    if context.value_features.shape[-1] != cfg.d_value:
        raise ValueError(
            f"context value_features have {context.value_features.shape[-1]} features, "
            f"the head expects d_value = {cfg.d_value}"
        )
    if context.size and int(context.levels.max()) >= cfg.n_levels:
        raise ValueError(
            f"context levels must lie in [0, {cfg.n_levels - 1}] (n_levels = {cfg.n_levels})"
        )


def check_queries(
    cfg: CovariantAttentionConfig, queries: CovariantQueries, prepared: PreparedContext
) -> None:
    """One clear error where queries do not fit a head of configuration `cfg` or the batch of
    the prepared bank they attend to (1: shared, or the queries' own)."""
    bq, bc = queries.positions.shape[0], prepared.batch_size
    if bc not in (1, bq):
        raise ValueError(f"context batch size {bc} must be 1 (shared) or equal the queries' {bq}")
    if queries.positions.shape[-1] != cfg.d:
        raise ValueError(
            f"queries have d = {queries.positions.shape[-1]}, the head expects {cfg.d}"
        )
    if queries.features.shape[-1] != cfg.d_query:
        raise ValueError(
            f"queries have {queries.features.shape[-1]} features, the head expects "
            f"d_query = {cfg.d_query}"
        )
