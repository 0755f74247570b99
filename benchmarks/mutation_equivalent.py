"""Surviving mutants that cannot change behaviour, with the reason (read by benchmarks.mutation).

Keyed by (module, function, line before, line after) as `mutmut show` prints them, stripped;
methods appear as `Classǁmethod`, the way mutmut names them. A mutant is
listed only after reading it: the reason says why no input can tell it from the original.
"""

EQUIVALENT: dict[tuple[str, str, str, str], str] = {}

_TWO_BRANCHES = (
    "both branches compute b @ z' (one as a matrix product, one broadcast): a speed choice"
)
_OUTSIDE_FLOORED = (
    "a target on or outside the boundary has 1 - |z'|^2 floored at eps, which at_floor turns "
    "into inf as the original does"
)


def _add(module: str, function: str, pairs: list[tuple[str, str]], why: str) -> None:
    for before, after in pairs:
        EQUIVALENT[(module, function, before, after)] = why


_add("geometry.screening", "weighted_string_area_grad", [
    ("b_sum = b.sum(-1, keepdim=True)  # [B, 1]", "b_sum = b.sum(+1, keepdim=True)  # [B, 1]"),
    ("return lam2 * (b_sum * z - b_zp) + lam2 * lam * (b * delta2).sum(-1, keepdim=True) * z",
     "return lam2 * (b_sum * z - b_zp) + lam2 * lam * (b * delta2).sum(+1, keepdim=True) * z"),
], "b and delta2 are [B, N] (the signature's shapes): dim 1 is dim -1")  # fmt: skip
_add("geometry.screening", "weighted_string_area_grad", [
    ("if z_prime.shape[0] == 1:  # shared entries: one matrix product",
     "if z_prime.shape[1] == 1:  # shared entries: one matrix product"),
    ("if z_prime.shape[0] == 1:  # shared entries: one matrix product",
     "if z_prime.shape[0] == 2:  # shared entries: one matrix product"),
], _TWO_BRANCHES)  # fmt: skip
_add("geometry.screening", "proxy_geodesic_reach", [
    ("inside = sqnorm(target, keepdim=False) < 1.0", "inside = sqnorm(target, keepdim=False) <= 1.0"),
    ("inside = sqnorm(target, keepdim=False) < 1.0", "inside = sqnorm(target, keepdim=False) < 2.0"),
], _OUTSIDE_FLOORED)  # fmt: skip
