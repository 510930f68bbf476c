"""Seeding, threads, run mode and input validation shared by every module and chapter.

Book: every chapter's first code cell calls :func:`setup_notebook`; the run mode
(quick or paper scale) is described on the *How to use this book* page.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Literal

import numpy as np
import torch

__all__ = [
    "MODE",
    "seed_offset",
    "shift_seed",
    "spawn_seeds",
    "numpy_rng",
    "check_seed",
    "run_mode",
    "is_full",
    "seed_everything",
    "setup_notebook",
    "make_generator",
    "default_device",
]

Mode = Literal["quick", "full"]


def run_mode() -> Mode:
    """Read the run mode from the environment variable ``TOPICMECH_MODE``.

    Returns
    -------
    mode : {"quick", "full"}
        ``"quick"`` (default) keeps every chapter under a minute on two CPU cores;
        ``"full"`` runs the paper-scale settings.

    Raises
    ------
    ValueError
        If ``TOPICMECH_MODE`` is set to anything else.
    """
    mode = os.environ.get("TOPICMECH_MODE", "quick").strip().lower() or "quick"
    if mode not in ("quick", "full"):
        raise ValueError(f"TOPICMECH_MODE must be 'quick' or 'full', got {mode!r}")
    return mode  # type: ignore[return-value]


MODE: Mode = run_mode()


def is_full() -> bool:
    """True when the paper-scale mode is on (``TOPICMECH_MODE=full``)."""
    return run_mode() == "full"


def default_device() -> torch.device:
    """The device for paper-scale runs: CUDA when present and in full mode, else CPU."""
    if is_full() and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


SEED_OFFSET_VARIABLE = "TOPICMECH_SEED_OFFSET"


def seed_offset() -> int:
    """The seed shift read from the environment variable ``TOPICMECH_SEED_OFFSET`` (default 0).

    Every seed the package turns into random numbers (:func:`make_generator`,
    :func:`numpy_rng`, :func:`seed_everything`) is first shifted by this offset, so one
    variable reruns the whole book on fresh randomness: ``TOPICMECH_SEED_OFFSET=1000 make
    test`` checks that no claim rests on a lucky seed.

    Raises
    ------
    ValueError
        If the variable is set to anything but a non-negative integer.
    """
    raw = os.environ.get(SEED_OFFSET_VARIABLE, "0").strip() or "0"
    try:
        offset = int(raw)
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_VARIABLE} must be a non-negative integer, got {raw!r}") from None
    if offset < 0:
        raise ValueError(f"{SEED_OFFSET_VARIABLE} must be a non-negative integer, got {raw!r}")
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
    """``n`` independent child seeds of ``seed`` (NumPy's ``SeedSequence.spawn``).

    The one way the package derives several seeds from one (training phases, Monte Carlo
    batches); the children are plain ints and are shifted again only when used.
    """
    n = check_positive_int("n", n)
    return [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(check_seed(seed)).spawn(n)]


def numpy_rng(seed: int) -> np.random.Generator:
    """A NumPy ``Generator`` seeded with the shifted ``seed`` (see :func:`seed_offset`)."""
    return np.random.default_rng(shift_seed(seed))


def seed_everything(seed: int, *, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch (with the shifted seed), and ask for deterministic kernels.

    Parameters
    ----------
    seed : int
        Non-negative seed; :func:`seed_offset` is added to it.
    deterministic : bool
        Also call ``torch.use_deterministic_algorithms(True, warn_only=True)``.
    """
    seed = shift_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    """Return a CPU ``torch.Generator``: a fresh one seeded with the shifted ``seed``, or ``seed`` itself.

    Every random function in the package takes ``seed`` and calls this, so results never
    depend on global random state, and ``TOPICMECH_SEED_OFFSET`` shifts them all.
    """
    if isinstance(seed, torch.Generator):
        return seed
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64) or a torch.Generator, got {seed!r}")
    gen = torch.Generator()
    gen.manual_seed(shift_seed(seed))
    return gen


def setup_notebook(seed: int = 0, *, threads: int = 1) -> Mode:
    """One call at the top of each chapter: one torch thread, seeds, plot style.

    Two threads on two busy cores can be 10-100x slower than one, so chapters run
    single-threaded.

    Parameters
    ----------
    seed : int
        Seed passed to :func:`seed_everything`.
    threads : int
        Number of torch intra-op threads.

    Returns
    -------
    mode : {"quick", "full"}
        The run mode, so a chapter can print it.
    """
    threads = check_positive_int("threads", threads)
    torch.set_num_threads(threads)
    seed_everything(seed)
    _inline_figures()
    from . import plotting  # local import: plotting pulls in matplotlib

    plotting.set_style()
    return run_mode()


def _inline_figures() -> None:
    """Inside a Jupyter kernel, draw figures inline even if ``MPLBACKEND=Agg`` is set."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with the book's requirements
        return
    shell = get_ipython()
    if shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell":
        shell.run_line_magic("matplotlib", "inline")


def check_positive_int(name: str, value: object) -> int:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_seeds(seeds: Iterable[int] | int) -> list[int]:
    """Distinct non-negative seeds as a list; an int ``n`` means ``range(n)``.

    Raises ``ValueError`` naming ``seeds`` for an empty, repeated or non-integer list.
    """
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = range(check_positive_int("seeds", seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ValueError(f"seeds must be an int or an iterable of ints, got {seeds!r}")
    out = list(seeds)
    if not out:
        raise ValueError("seeds must not be empty")
    for s in out:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise ValueError(f"seeds must be non-negative ints, got {s!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct, got {out!r}")
    return [int(s) for s in out]


def check_probability(name: str, value: object) -> float:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a float in [0, 1]."""
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    try:
        p = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}") from None
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return p


def check_masking(mask_prob: float, keep_prob: float, random_prob: float) -> tuple[float, float, float]:
    """Validate the BERT corruption probabilities; return them as floats.

    ``keep_prob + random_prob`` must not exceed 1 (the rest is the ``[MASK]`` share).
    """
    p_m = check_probability("mask_prob", mask_prob)
    p_c = check_probability("keep_prob", keep_prob)
    p_r = check_probability("random_prob", random_prob)
    if p_c + p_r > 1.0 + 1e-12:
        raise ValueError(
            f"keep_prob + random_prob must be <= 1, got keep_prob={keep_prob!r}, random_prob={random_prob!r}"
        )
    return p_m, p_c, p_r
