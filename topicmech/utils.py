"""Seeding, threads, run mode (quick or paper scale) and the input checks shared by every module.

Every chapter's first code cell calls :func:`setup_notebook`.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "MODE", "seed_offset", "shift_seed", "spawn_seeds", "numpy_rng", "check_seed", "run_mode", "is_full",
    "seed_everything", "make_generator", "default_device", "as_float64",
    "check_matrix",
]

Mode = Literal["quick", "full"]


def run_mode() -> Mode:
    """The run mode from ``TOPICMECH_MODE``: ``"quick"`` (default, chapters in about a minute) or
    ``"full"`` (paper scale); ``ValueError`` for anything else."""
    mode = os.environ.get("TOPICMECH_MODE", "quick").strip().lower() or "quick"
    if mode not in ("quick", "full"):
        raise ValueError(f"TOPICMECH_MODE must be 'quick' or 'full', got {mode!r}")
    return mode  # type: ignore[return-value]


MODE: Mode = run_mode()


def is_full() -> bool:
    """True when the paper-scale mode is on (``TOPICMECH_MODE=full``)."""
    return run_mode() == "full"


def default_device() -> torch.device:
    """CUDA in full mode when present, else the CPU."""
    return torch.device("cuda") if is_full() and torch.cuda.is_available() else torch.device("cpu")


def seed_offset() -> int:
    """The shift ``TOPICMECH_SEED_OFFSET`` (a non-negative int, default 0) added to every seed the
    package uses, so one variable reruns the whole book on fresh randomness."""
    raw = os.environ.get("TOPICMECH_SEED_OFFSET", "0").strip() or "0"
    try:
        offset = int(raw)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"TOPICMECH_SEED_OFFSET must be a non-negative integer, got {raw!r}")
    return offset


def check_seed(seed: object) -> int:
    """Raise ``ValueError`` naming ``seed`` unless it is an int in ``[0, 2**64)``; return it."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def shift_seed(seed: int) -> int:
    """``seed`` plus :func:`seed_offset`, modulo ``2**64``: the seed actually used."""
    return (check_seed(seed) + seed_offset()) % 2**64


def spawn_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent child seeds of ``seed`` (``numpy.random.SeedSequence.spawn``), not yet shifted."""
    n = check_positive_int("n", n)
    return [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(check_seed(seed)).spawn(n)]


def numpy_rng(seed: int) -> np.random.Generator:
    """A NumPy ``Generator`` seeded with the shifted ``seed``."""
    return np.random.default_rng(shift_seed(seed))


def seed_everything(seed: int, *, deterministic: bool | None = None) -> None:
    """Seed Python, NumPy and torch with the shifted ``seed``.

    ``deterministic`` (default: only when :func:`default_device` is CUDA) also calls
    ``torch.use_deterministic_algorithms(True, warn_only=True)``. On the CPU with one thread every
    kernel the package uses is already reproducible, and the call costs about 1 s (it imports
    ``torch._inductor``) and fills every fresh tensor with NaN."""
    seed = shift_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic is None:
        deterministic = default_device().type == "cuda"
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    """``seed`` itself if it is a ``torch.Generator``, else a fresh CPU generator seeded with the shifted seed."""
    return seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(shift_seed(seed))


def check_positive_int(name: str, value: object) -> int:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1; return it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_seeds(seeds: Iterable[int] | int) -> list[int]:
    """Distinct non-negative seeds as a list (an int ``n`` means ``range(n)``); ``ValueError`` naming ``seeds``."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = range(check_positive_int("seeds", seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ValueError(f"seeds must be an int or an iterable of ints, got {seeds!r}")
    out = list(seeds)
    if (not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in out)
            or len(set(out)) != len(out)):
        raise ValueError(f"seeds must be a non-empty list of distinct non-negative ints, got {out!r}")
    return [int(s) for s in out]


def check_choice(name: str, value: object, options: tuple[str, ...]) -> str:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``options``; return it."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def _as_float(value: object) -> float:
    """``float(value)``, or NaN for a bool, a string or anything that does not convert."""
    try:
        return math.nan if isinstance(value, (bool, str, bytes)) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def as_float64(x: torch.Tensor | np.ndarray | Any) -> np.ndarray:
    """``x`` as a float64 NumPy array; a tensor is detached and moved to the CPU first. No copy is
    made when ``x`` already is float64 on the CPU: copy the result before changing it in place."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def check_float(name: str, value: object, *, positive: bool = True) -> float:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite float > 0 (>= 0 if not
    ``positive``); return it as a float."""
    x = _as_float(value)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{name} must be a finite float {'> 0' if positive else '>= 0'}, got {value!r}")
    return x


def check_matrix(name: str, x: torch.Tensor | np.ndarray | Any, *, shape: tuple[int, int] | None = None,
                 square: bool = False) -> np.ndarray:
    """``x`` as a new float64 2-D NumPy array (a copy, safe to change in place), else ``ValueError``
    naming ``name``: not an array, not 2-D, not ``shape`` or, with ``square``, not square."""
    try:
        M = np.array(as_float64(x))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}") from None
    if M.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {M.shape}")
    if square and M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square, got shape {M.shape}")
    if shape is not None and M.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {M.shape}")
    return M


def check_probability(name: str, value: object) -> float:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a float in [0, 1]; return it."""
    p = _as_float(value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return p


def check_masking(mask_prob: float, keep_prob: float, random_prob: float) -> tuple[float, float, float]:
    """Check the BERT corruption probabilities (``keep_prob + random_prob <= 1``); return them as floats."""
    p_m = check_probability("mask_prob", mask_prob)
    p_c = check_probability("keep_prob", keep_prob)
    p_r = check_probability("random_prob", random_prob)
    if p_c + p_r > 1.0 + 1e-12:
        raise ValueError(f"keep_prob + random_prob must be <= 1, got keep_prob={keep_prob!r}, "
                         f"random_prob={random_prob!r}")
    return p_m, p_c, p_r
