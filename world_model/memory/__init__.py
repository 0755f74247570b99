"""Memory of the world model: context providers of the geodesic model and the GeoResolver memory
modules of seed 000 §6-§11 (one job per file; import from the submodules).

Context providers (used by world_model/geodesic/):
- prototypes.py  the learned prototype pool of the BAOAB heads (macro level).
- window.py      the recent trajectory window (texture level).
- routed_prototypes.py  the alternative macro level: a DMG-grown pool read through GSR's top-K
                 (routing.py's MemoryPool, dmg.py, gsr's routing).
- episodic.py    the HIDA episodic memory: this episode's empirical residual forces, read by
                 the kick with a HIDA operator (M1-M4).

GeoResolver memory modules (built and tested in tests/world_model/memory/, measured by
benchmarks/memory_modules.py; routing and dmg serve routed_prototypes.py, the others are not
wired into the geodesic world model):
- hcc.py         HCC (§6, M5): bit-packed polar compression of ball keys (maths in
                 geometry/quantize.py).
- hypergate.py   HyperGate (§7, M6): head, token and dimension gates; Thm 7.1's bound.
- routing.py     cross-geometric maps phi_A, phi_B, phi_C and hard / soft routing (§8.2-8.3)
                 over a fixed-capacity prototype pool with an active mask.
- dmg.py         DMG (§9, M9): surprise threshold, spawn, prune, hard capacity.
- gsr.py         GSR (§10): top-K routing as local / merge / combine steps; Thm 10.1's bounds.
- unified.py     the unified block (§11.1, M10): QKV -> {HIDA, SIDA -> GSR -> DMG} ->
                 HyperGate, with the HIDA operators' call shape.

Where the seed is wrong and what was built instead: docs/seed_map.md (the GeoResolver memory
section) and docs/architecture.md.
"""

__all__ = [
    "prototypes",
    "routed_prototypes",
    "window",
    "episodic",
    "hcc",
    "hypergate",
    "routing",
    "dmg",
    "gsr",
    "unified",
]
