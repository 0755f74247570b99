"""Atomic, self-describing checkpoints and the random-generator states they carry.

A checkpoint is one `torch.save`d dict of tensors and plain Python values (loads with
`weights_only=True`, so loading never runs code), tagged with its format version (`FORMAT_VERSION`):
v2 since the geodesic config became nested sections and four measured-and-rejected options left the
code, v3 since the file carries the SHA-256 digest of its content (`content_digest`), checked on
every load: torch's zip reader checks no CRC, so a bit flipped in a tensor's bytes loaded silently
before; v4 since the episode so far (the context's history window and memory, agent/core/episode.py)
is the agent's `episode`, not part of its `planner` (a v3 file's planner state holds both and is
read as such). v2 files (no digest) are read unchecked; a v1 file is read with its config migrated
(agent.core.config.migrate_config) or refused in one line that names its version. It is written to a
temporary file in the same folder, flushed to disk and moved over the old one with `os.replace`, so
a crash, a kill or a failed write leaves the previous checkpoint intact; a temporary left by a
killed writer is removed by the next save (`remove_stale_temporaries`). Any unreadable, damaged or
incomplete file raises `CheckpointError` with one line; a write that fails (a full disk, a read-only
folder) raises `RunWriteError` with one line.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "format_version",
    "CheckpointError",
    "RunWriteError",
    "content_digest",
    "remove_stale_temporaries",
    "replace_atomically",
    "save_checkpoint",
    "load_checkpoint",
    "global_rng_state",
    "set_global_rng_state",
    "env_rng_state",
    "set_env_rng_state",
    "rng_state",
    "rng_from_state",
    "seed_everything",
]

FORMAT_VERSION = 4
_TAG = "geodesic-rl/agent-checkpoint/v"
FORMAT = f"{_TAG}{FORMAT_VERSION}"
READABLE_VERSIONS = (1, 2, 3, 4)
DIGEST_SINCE = 3
"""the first format version whose files carry `digest` (content_digest of the rest)"""


def format_version(state: dict[str, Any]) -> int:
    """The format version of a loaded checkpoint (one of READABLE_VERSIONS)."""
    return int(str(state["format"]).removeprefix(_TAG))


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, corrupt or of another format (one line)."""


class RunWriteError(OSError):
    """A checkpoint or another run file that could not be written (one line); the previous
    one is intact."""

    def __str__(self) -> str:
        return str(self.strerror)


def content_digest(state: Any) -> str:
    """SHA-256 over a checkpoint's content: every tensor's dtype, shape and bytes and every plain
    value's type and repr, walked in the dicts' insertion order (which torch.save keeps)."""
    h = hashlib.sha256()
    stack = [state]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(obj.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            h.update(f"D{len(obj)}".encode())
            for key, value in reversed(list(obj.items())):
                stack += [value, key]
        elif isinstance(obj, (list, tuple)):
            h.update(f"{type(obj).__name__[0]}{len(obj)}".encode())
            stack += reversed(obj)
        else:
            h.update(f"{type(obj).__name__}:{obj!r};".encode())
    return h.hexdigest()


def _temporary(path: Path) -> Path:
    return path.with_name(f".tmp-{os.getpid()}-{path.name}")


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporaries of `path` left by writers that were killed mid-write (their
    process is gone); returns what was removed."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".tmp-*-{path.name}"):
        pid = tmp.name.removeprefix(".tmp-").split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def replace_atomically(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """`write(tmp)` to a temporary file beside `path` (same suffix: some writers append one
    that is missing), then move it over `path` with `os.replace`: a crash, a kill or a failed
    write leaves the previous file intact, and a failed write leaves no temporary behind (a
    killed one does: remove_stale_temporaries). An OSError (a full disk, a read-only folder)
    becomes RunWriteError, one line naming the file."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        kept = "the previous one is intact" if path.is_file() else "there was none before"
        raise RunWriteError(
            err.errno, f"could not write {str(path)!r} ({reason}); {kept}"
        ) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write `state` (with the format tag and content digest added) atomically to `path`,
    flushed to disk."""
    content = {"format": FORMAT, **state}
    content["digest"] = content_digest(content)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            torch.save(content, fh)
            fh.flush()
            os.fsync(fh.fileno())

    return replace_atomically(path, write)


def load_checkpoint(path: str | Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint` (tensors on CPU)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {str(path)!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a damaged zip/pickle
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupt or unreadable ({type(err).__name__}: "
            f"{detail[:160]})"
        ) from None
    tag = state.get("format") if isinstance(state, dict) else None
    if not isinstance(tag, str) or not tag.startswith(_TAG):
        raise CheckpointError(f"{str(path)!r} is not a geodesic-rl agent checkpoint ({FORMAT})")
    version = tag.removeprefix(_TAG)
    if not version.isdigit() or int(version) not in READABLE_VERSIONS:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format version {version}; this geodesic-rl reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))} (and writes {FORMAT_VERSION})"
        )
    if int(version) >= DIGEST_SINCE:
        digest = state.pop("digest", None)
        if digest != content_digest(state):
            why = "has no content digest" if digest is None else "does not match its digest"
            raise CheckpointError(
                f"checkpoint {str(path)!r} is corrupt: its content {why} (a damaged file; "
                "an earlier copy or a new run is needed)"
            )
    missing = [key for key in required if key not in state]
    if missing:
        raise CheckpointError(f"checkpoint {str(path)!r} is incomplete: no {', '.join(missing)}")
    return state


# ----------------------------------------------------------------------- random generators


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's legacy and torch's global generators (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (the legacy global generator is seeded too)
    torch.manual_seed(seed)


def global_rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": _legacy_numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _legacy_numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    return {
        "name": name,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def set_global_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    legacy = (
        n["name"],
        n["keys"].numpy().astype(np.uint32),
        n["pos"],
        n["has_gauss"],
        n["cached_gaussian"],
    )
    np.random.set_state(legacy)  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def env_rng_state(env: gym.Env) -> dict[str, Any]:
    """The state of the env's own generator (`env.unwrapped.np_random`: a numpy Generator, or
    the legacy RandomState that dm_control tasks draw from, as shimmy exposes it)."""
    return rng_state(env.unwrapped.np_random)


def set_env_rng_state(env: gym.Env, state: dict[str, Any]) -> None:
    env.unwrapped.np_random = rng_from_state(state)


def rng_state(rng: np.random.Generator | np.random.RandomState) -> dict[str, Any]:
    """A numpy generator's state as plain values (checkpoints load with weights_only=True)."""
    if isinstance(rng, np.random.RandomState):  # MT19937's key as a list: weights_only loads it
        state = rng.get_state(legacy=False)
        key = state["state"]["key"].tolist()
        return {**state, "state": {**state["state"], "key": key}, "legacy": True}
    return rng.bit_generator.state


def rng_from_state(state: dict[str, Any]) -> np.random.Generator | np.random.RandomState:
    """The generator `rng_state` described."""
    if state.get("legacy"):
        inner = {**state["state"], "key": np.asarray(state["state"]["key"], dtype=np.uint32)}
        rng = np.random.RandomState()
        rng.set_state({**{k: v for k, v in state.items() if k != "legacy"}, "state": inner})
        return rng
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)
