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


def seed_everything(seed: int, *, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch, and ask torch for deterministic kernels.

    Parameters
    ----------
    seed : int
        Non-negative seed.
    deterministic : bool
        Also call ``torch.use_deterministic_algorithms(True, warn_only=True)``.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    torch.manual_seed(int(seed))
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    """Return a CPU ``torch.Generator``: a fresh one seeded with ``seed``, or ``seed`` itself.

    Every random function in the package takes ``seed`` and calls this, so results never
    depend on global random state.
    """
    if isinstance(seed, torch.Generator):
        return seed
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64) or a torch.Generator, got {seed!r}")
    gen = torch.Generator()
    gen.manual_seed(int(seed))
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


def check_seeds(seeds: "Iterable[int] | int") -> list[int]:
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
