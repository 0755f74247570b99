"""One covariant cross-attention head (seed 003 Defs 280-286, 291; Thms 98, 99, 101, 102).

For a query at z in the Poincare ball and context entries at z':

    psi_Q(z)  = W_Q x + W_Qz z + W_Qv x_v + W_QGamma(z, z) [+ W_Qzv(z, v)]   Def 283 / 291
    psi_K(z') = W_K x_K(z'),   psi_V(z') = W_V x_V(z')                        fields, local frame
    Q~ = U_{z->0} psi_Q,  K~ = U_{z'->0} psi_K,  V~ = U_{z'->0} psi_V         Def 282 (Wilson lines)
    s(z, z')  = <Q~, K~>                                                      Thm 98 (real rep.)
    l(z, z')  = s / tau(z),   tau(z) = sqrt(d_k) / lambda(z)                  Thm 99
    alpha     = softmax_z'( l - sigma(level(z)) A(z, z') [z' colour-charged] )  Def 286
    out       = W_O chiral( sum_z' alpha V~ )                                 Defs 284-285

(alpha for kernel "softmax"; the inverse-distance and KRR kernels: covariant_kernels.)
docs/seed_map.md, section "Covariant attention head, screening, diagnostics 67-70", maps each
line to its code and test.

- Representation: R^{d_k} is the realification of C^{N_f} (x) C^2 (x) C^m and the gauge group
  acts on C^{N_f} (x) C^2 only, so every line is U (x) I_m with U acting on R^r, r = 4 N_f
  (geometry.lie_algebra.gauge_generators(r, N_f)). The head computes the lines in that minimal
  representation and applies them channel by channel (:func:`apply_in_channels`): the same
  transport as the d_k x d_k lines, with matrix exponentials (d_k / r)^3 times cheaper.
- Wilson lines: one U_{z->0} per context entry (in :meth:`CovariantAttention.prepare`, reused for
  keys and values and cached across queries) and one per query; never one per (query, key) pair:
  <U_z psi, U_z' phi> = psi^T U_z^T U_z' phi is the pairwise transport composed via the origin.
- Screening is applied as the log-space identity
  alpha S / sum(alpha S) = softmax(l - sigma A) for S = exp(-sigma A): the same weights as Def 286's
  multiply-then-renormalise, without underflow when every entry is screened hard.
- Chirality: the output is read as a doublet over the C^2 slot of that same layout, projected
  with Pi = (I + n.sigma)/2 (complex Pauli matrices, geometry.su2), n = P grad V, gated by the
  normalised commitment c^ = Psi^dag Pi Psi / |Psi|^2, and mixed in with strength kappa:
  Psi + kappa (c^ Pi Psi - Psi).

The degenerate limit (all couplings 0, temperature "constant", W_Qz = W_QGamma = 0, sigma = 0,
kappa = 0) is standard attention W_O softmax(QK^T / sqrt(d_k)) V through this same code path.

Ablations (HeadOptions; README.md, "Ablations"): wilson "none" makes every line the identity
(no parallel transport: s = <psi_Q, psi_K>, out = sum alpha psi_V), temperature "constant" sets
tau = sqrt(d_k), screening False drops the sigma A term and its parameter; the chiral gate is
off for queries without a value gradient (the geodesic model's context.value_gradient).

This module is the nn.Module; the rest lives beside it and is re-exported here: the maths on
the realified layout in geometry.doublet, the config in covariant_config, the queries, prepared
context and record in covariant_types, the kernels (chosen once, at construction) in
covariant_kernels, and the closed-form potential gradient in covariant_gradient.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from geometry import lie_algebra, poincare, screening, su2, wilson_lines
from geometry.doublet import (
    apply_in_channels,
    bilinear,
    chiral_gate,
    chiral_operator,
    low_rank_bilinear,
)

from . import covariant_gradient
from .context import MACRO_LEVEL, ContextBank
from .covariant_config import (
    NO_TRANSPORT,
    AreaProxy,
    AttentionKernel,
    ChristoffelMode,
    CovariantAttentionConfig,
    HeadOptions,
    TemperatureMode,
)
from .covariant_kernels import ATTENTION_KERNELS
from .covariant_types import (
    AttentionRecord,
    CovariantQueries,
    FieldMap,
    PreparedContext,
    charged_entry_columns,
    check_context,
    check_queries,
)

__all__ = [
    "ChristoffelMode",
    "AttentionKernel",
    "TemperatureMode",
    "AreaProxy",
    "FieldMap",
    "CovariantAttentionConfig",
    "HeadOptions",
    "CovariantQueries",
    "PreparedContext",
    "AttentionRecord",
    "CovariantAttention",
]


class CovariantAttention(nn.Module):
    """One covariant attention head (see the module docstring for the identities).

    Call shape: ``out, record = head(queries, context)`` with ``context`` a :class:`ContextBank`
    or the :class:`PreparedContext` from :meth:`prepare`; ``record.weights`` are the attention
    weights [B, Q, N]. ``out`` is [B, d_out] for single queries, [B, Q, d_out] otherwise.
    """

    def __init__(self, config: CovariantAttentionConfig):
        super().__init__()
        self.config = cfg = config
        opt = cfg.options  # shared by every head of a model
        d, k = cfg.d, opt.d_k
        self.rep_dim = 4 * opt.n_colors  # r: realified C^{n_colors} (x) C^2

        # gauge structure: generators of the minimal representation R^r (r = 4 n_colors) with
        # couplings folded in (constants of the config, kept in float64 and cast on use, so a
        # head moved to float64 gets exact generators), and the connection's learned coefficients
        gens = lie_algebra.gauge_generators(
            self.rep_dim, opt.n_colors, opt.hypercharge, torch.float64
        )
        self._generators64 = gens.stacked(opt.g_s, opt.g_2, opt.g_1)  # [G, r, r]
        self._generators_cache: dict[tuple, Tensor] = {}
        n_gen = self._generators64.shape[0]
        std = opt.connection_init_std
        self.connection_c0 = nn.Parameter(std * torch.randn(d, n_gen))
        self.connection_c1 = nn.Parameter(std * torch.randn(d, d, n_gen))

        # Christoffel query (Def 283): linear terms
        self.w_q = nn.Linear(cfg.d_query, k, bias=False)
        self.w_qz = nn.Linear(d, k, bias=False)
        self.w_qv = (
            nn.Linear(cfg.d_velocity_features, k, bias=False) if cfg.d_velocity_features else None
        )
        # quadratic terms
        if opt.christoffel == "full":
            self.w_q_gamma = nn.Parameter(torch.randn(k, d, d) / d)
            self.w_q_zv = nn.Parameter(torch.randn(k, d, d) / d) if cfg.position_velocity else None
        else:
            scale = 1.0 / math.sqrt(d)
            self.q_gamma_u = nn.Parameter(scale * torch.randn(opt.rank, k, d))
            self.q_gamma_v = nn.Parameter(scale * torch.randn(opt.rank, k, d))
            if cfg.position_velocity:
                self.q_zv_u = nn.Parameter(scale * torch.randn(opt.rank, k, d))
                self.q_zv_v = nn.Parameter(scale * torch.randn(opt.rank, k, d))
        if opt.christoffel == "poincare" and cfg.query_velocity:  # W applied to Gamma(z)[v, v]
            self.w_q_christoffel = nn.Linear(d, k, bias=False)

        # keys, values, output
        self.w_k = nn.Linear(cfg.d_key, k, bias=False)
        self.w_v = nn.Linear(cfg.d_value, k, bias=False)
        self.w_o = nn.Linear(k, cfg.d_out, bias=False)

        # area-law screening: sigma(l) = g(l)^2 (Thm 102: sigma proportional to g_s(l)^2);
        # none without screening (the ablation: no term, nothing to learn)
        self.screening_coupling = (
            nn.Parameter(torch.tensor(opt.string_tension).sqrt()) if opt.screening else None
        )

        # kernel ridge regression: lam = softplus(raw) + 1e-4 (seed 001 §3)
        if opt.kernel == "krr":
            self.krr_lambda_raw = nn.Parameter(
                torch.tensor(math.log(math.expm1(opt.krr_lambda - 1e-4)))
            )

        # chirality: P : R^d -> R^3 and the mixing strength kappa (raw, so 0 is reachable)
        self.value_grad_proj = nn.Linear(d, 3, bias=False)
        self.chirality_strength = nn.Parameter(torch.tensor(float(opt.chirality)))

        # how transported fields become weights: chosen once here (as x-transformers' Attend
        # picks its attention function), not by a branch on every call
        self.attention_kernel = ATTENTION_KERNELS[opt.kernel]

    # ------------------------------------------------------------------ pieces

    @property
    def generators(self) -> Tensor:
        """The gauge generators with couplings folded in, [G, r, r], in the parameters' dtype."""
        c0 = self.connection_c0
        key = (c0.dtype, c0.device)
        if key not in self._generators_cache:
            self._generators_cache[key] = self._generators64.to(dtype=c0.dtype, device=c0.device)
        return self._generators_cache[key]

    @property
    def group(self) -> lie_algebra.GaugeGroup:
        """The gauge group with this head's couplings (same generators as :attr:`generators`)."""
        opt = self.config.options
        return lie_algebra.GaugeGroup(opt.n_colors, opt.g_s, opt.g_2, opt.g_1, opt.hypercharge)

    def lines_to_origin(
        self, positions: Tensor, connection: wilson_lines.ConnectionFn | None = None
    ) -> Tensor:
        """U_{z->0} for every point (seed 003 Def 282) in the minimal representation: positions
        [..., d] -> [..., r, r]. The head's own connection goes through the closed-form group
        path (geometry.wilson_lines.wilson_line_in_group: no matrix exponentials); another
        connection (node 67's transformed one) through the generic path. Both give the same lines.
        Wilson mode "none": the identity [..., r, r] for every point and connection."""
        cfg = self.config
        if cfg.options.wilson == NO_TRANSPORT:  # the ablation: U = I, whatever the connection
            eye = torch.eye(self.rep_dim, dtype=positions.dtype, device=positions.device)
            return eye.expand(*positions.shape[:-1], self.rep_dim, self.rep_dim)
        if connection is None:
            return wilson_lines.affine_wilson_line_to_origin(
                self.group,
                self.connection_c0,
                self.connection_c1,
                positions,
                cfg.options.wilson,
                cfg.options.segments,
            )
        return wilson_lines.wilson_line_to_origin(
            connection, positions, mode=cfg.options.wilson, segments=cfg.options.segments
        )

    def connection(self) -> wilson_lines.ConnectionFn:
        """A(x) . dx = sum_g (c0 + c1 x) T_g (Def 280), couplings folded into T_g; in the minimal
        representation R^r (x, dx [..., d] -> [..., r, r])."""
        return wilson_lines.affine_connection(
            self.generators, self.connection_c0, self.connection_c1
        )

    def chiral_projector(self, value_grad: Tensor) -> tuple[Tensor, Tensor]:
        """Pi = (I + n.sigma)/2 for n = P grad V (Def 285) and the degenerate flags:
        value_grad [..., d] -> ([..., 2, 2] complex, [...] bool) (geometry.su2)."""
        return su2.chiral_projector(self.value_grad_proj(value_grad))

    def chiral_inputs(self, value_grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(Pi, degenerate, Pi's flat operator [..., d_k, d_k]) for CovariantQueries.chiral: what
        a caller whose value gradient is fixed over a rollout builds once."""
        proj, degenerate = self.chiral_projector(value_grad)
        operator = chiral_operator(
            proj, self.config.options.n_colors, self.config.options.d_k, value_grad.dtype
        )
        return proj, degenerate, operator

    def string_tension(self) -> Tensor:
        """sigma(l) for l = 0 .. L: [L + 1] (a head with screening off has none)."""
        if self.screening_coupling is None:
            raise ValueError("this head has no area-law screening (HeadOptions.screening off)")
        return self.screening_coupling.square()

    def query_field(self, queries: CovariantQueries) -> Tensor:
        """psi_Q = W_Q x + W_Qz z + W_Qv x_v + W_QGamma(z, z) + W_Qzv(z, v)  (Def 283), local frame.

        christoffel = "full": W_QGamma a [d_k, d, d] tensor; "factorized": rank-R (Def 291);
        "poincare": lambda(z) W~(z, z) (rank R, Prop 99's conformal modulation) plus
        W_Gamma Gamma(z)[v, v] with the exact O(d) contraction (Def 291's closed form; 0 without v).
        positions [..., d] -> [..., d_k].
        """
        cfg, z, v = self.config, queries.positions, queries.velocity
        q = self.w_q(queries.features) + self.w_qz(z)  # [..., d_k]
        if self.w_qv is not None:
            if queries.velocity_features is None:
                raise ValueError("this head has a W_Qv term: pass queries.velocity_features")
            q = q + self.w_qv(queries.velocity_features)
        if cfg.options.christoffel == "full":
            q = q + bilinear(self.w_q_gamma, z, z)
        else:
            quad = low_rank_bilinear(self.q_gamma_u, self.q_gamma_v, z, z)
            if cfg.options.christoffel == "poincare":
                quad = poincare.conformal_factor(z) * quad
            q = q + quad
        if v is not None:
            if not cfg.query_velocity:
                raise ValueError("this head was built with query_velocity=False: pass no velocity")
            if cfg.options.christoffel == "poincare":
                q = q + self.w_q_christoffel(poincare.christoffel_contract(z, v))
            if cfg.position_velocity:
                if cfg.options.christoffel == "full":
                    q = q + bilinear(self.w_q_zv, z, v)
                else:
                    q = q + low_rank_bilinear(self.q_zv_u, self.q_zv_v, z, v)
        return q

    def temperature(self, positions: Tensor) -> Tensor:
        """tau(z) [...] for positions [..., d]: Thm 99's sqrt(d_k)/lambda(z) ("metric") or
        sqrt(d_k) ("constant", the degenerate limit's)."""
        cfg = self.config
        if cfg.options.temperature == "constant":
            return torch.full(
                positions.shape[:-1],
                math.sqrt(cfg.options.d_k),
                dtype=positions.dtype,
                device=positions.device,
            )
        return poincare.metric_temperature(positions, cfg.options.d_k).squeeze(-1)  # [...]

    def screening_penalty(
        self, z: Tensor, z_entries: Tensor, query_levels: Tensor, entry_levels: Tensor
    ) -> Tensor:
        """sigma(level(z)) A(z, z') on colour-charged entries (level != 0), 0 on macro ones
        (Def 286, Thm 102): subtracted from the logits. z [B, Q, d], z' [Bc, N, d] -> [B, Q, N]."""
        if self.config.options.area == "conformal":
            area = screening.pairwise_string_area(z, z_entries)
        else:
            area = screening.pairwise_geodesic_string_area(z, z_entries)
        sigma = self.string_tension()[query_levels]  # [B, Q]
        charged = (entry_levels != MACRO_LEVEL).unsqueeze(-2)  # [Bc, 1, N]
        return sigma.unsqueeze(-1) * area * charged

    def _key_value_fields(self, context: ContextBank) -> tuple[Tensor, Tensor]:
        return self.w_k(context.key_features), self.w_v(context.value_features)

    # ------------------------------------------------------------------ context and scores

    def prepare(
        self,
        context: ContextBank,
        connection: wilson_lines.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
        lines: Tensor | None = None,
    ) -> PreparedContext:
        """Fields of every entry, transported to the origin with one Wilson line per entry.

        `connection` replaces the head's connection and `field_map(z', psi)` acts on the local
        fields first: together they express the bank in another gauge (node 67)."""
        check_context(self.config, context)
        psi_k, psi_v = self._key_value_fields(context)  # [Bc, N, d_k] x 2
        if field_map is not None:
            psi_k, psi_v = field_map(context.positions, psi_k), field_map(context.positions, psi_v)
        if lines is None:  # given: the entries' lines of this head's connection, computed once
            lines = self.lines_to_origin(context.positions, connection)  # [Bc, N, r, r]
        keys, values = apply_in_channels(lines, psi_k), apply_in_channels(lines, psi_v)
        charged_index = charged_entry_columns(context.levels)
        return PreparedContext(
            positions=context.positions,
            levels=context.levels,
            mask=context.mask,
            _key_fields=psi_k,
            _keys=keys,
            _values=values,
            _lines=lines,
            charged=bool(charged_index.numel()),
            charged_index=charged_index,
            ridge_inverse=self.attention_kernel.ridge(self, keys, context.mask),
        )

    def ridge_lambda(self) -> Tensor:
        return torch.nn.functional.softplus(self.krr_lambda_raw) + 1e-4

    def _transported_query(
        self,
        queries: CovariantQueries,
        connection: wilson_lines.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
        lines: Tensor | None = None,
    ) -> Tensor:
        """U_{z->0} psi_Q(z): [B, Q, d_k] (one Wilson line per query)."""
        psi_q = self.query_field(queries)
        if field_map is not None:
            psi_q = field_map(queries.positions, psi_q)
        if lines is None:
            lines = self.lines_to_origin(queries.positions, connection)
        return apply_in_channels(lines, psi_q)

    def scores(
        self,
        queries: CovariantQueries,
        context: ContextBank | PreparedContext,
        connection: wilson_lines.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
    ) -> Tensor:
        """s(z, z') = <U_{z->0} psi_Q(z), U_{z'->0} psi_K(z')>  (Thm 98): [B, Q, N].

        With `connection` / `field_map` the fields are first mapped psi -> field_map(z, psi) at
        their own points and transported with that connection (node 67's gauge check); a
        PreparedContext can only be scored as it was prepared."""
        q = queries.multi()
        if isinstance(context, PreparedContext):
            if connection is not None or field_map is not None:
                raise ValueError("re-scoring under another gauge needs the ContextBank")
            prepared = context
        else:
            prepared = self.prepare(context, connection, field_map)
        check_queries(self.config, q, prepared)
        q_t = self._transported_query(q, connection, field_map)
        return prepared.products(q_t)  # [B, Q, N]

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        queries: CovariantQueries,
        context: ContextBank | PreparedContext,
        query_lines: Tensor | None = None,
    ) -> tuple[Tensor, AttentionRecord]:
        """`query_lines` [B, Q, r, r] (or [B, r, r] for single queries): the queries' Wilson lines
        of this head's connection, when the caller already has them (heads that share one
        connection share the lines of a point); None computes them."""
        cfg = self.config
        q = queries.multi()
        prepared = context if isinstance(context, PreparedContext) else self.prepare(context)
        check_queries(self.config, q, prepared)
        z = q.positions  # [B, Q, d]
        if q.levels is not None:
            levels = q.levels  # [B, Q]
            if int(levels.min()) < 0 or int(levels.max()) >= cfg.n_levels:
                raise ValueError(f"query levels must lie in [0, {cfg.n_levels - 1}]")
        else:
            levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)

        if query_lines is not None and queries.single:
            query_lines = query_lines.unsqueeze(1)
        q_t = self._transported_query(q, lines=query_lines)  # [B, Q, d_k]
        scores = prepared.products(q_t)  # [B, Q, N]
        logits, weights, tau = self.attention_kernel.weights(
            self, z, levels, q_t, scores, prepared
        )  # [B, Q, N] x 2, tau [B, Q] | None; each reads prepared.mask
        out = prepared.mixture(weights)  # [B, Q, d_k], at the origin frame

        projectors = degenerate = None
        chiral = q.projector(self)
        if chiral is not None:
            projectors, degenerate, *operator = chiral
            out = chiral_gate(
                out, projectors, cfg.options.n_colors, self.chirality_strength, *operator
            )
        out = self.w_o(out)  # [B, Q, d_out]

        record = AttentionRecord(
            weights=weights,
            scores=scores,
            logits=logits,
            tau=tau,
            conformal=poincare.conformal_factor(z).squeeze(-1),
            query_levels=levels,
            entry_levels=prepared.levels,
            mask=prepared.mask,
            projectors=projectors,
            degenerate=degenerate,
            d_k=cfg.options.d_k,
        )
        return (out.squeeze(1) if queries.single else out), record

    # ------------------------------------------------------------------ scalar potentials

    def has_closed_form_gradient(self) -> bool:
        """Whether :meth:`scalar_output_gradient` covers this head
        (covariant_gradient.has_closed_form_gradient); other heads differentiate by autograd."""
        return covariant_gradient.has_closed_form_gradient(self.config)

    def scalar_output_gradient(
        self, queries: CovariantQueries, prepared: PreparedContext
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(Phi [B, 1], dPhi/dz [B, d], dPhi/dx [B, d_query], lines [B, r, r]) of this scalar head
        read as a potential, in closed form (covariant_gradient.scalar_output_gradient)."""
        return covariant_gradient.scalar_output_gradient(self, queries, prepared)
