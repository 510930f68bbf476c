"""The book's settings: one validated object for the data, the masking and the key convention.

:class:`Masking` holds BERT's corruption probabilities ``p_m, p_c, p_r``; :class:`Setting`
holds a topic model's sizes ``T, v, tau``, the document length ``N``, a :class:`Masking` and
the key convention ``attend_to_masked``, which has no default anywhere in the package:

- ``attend_to_masked=True``, **the theory's convention**: selected (masked) positions are
  visible as keys. Our check, not the authors' statement: the authors' constants are limits of
  the optimum in this convention.
- ``attend_to_masked=False``, **the released code's convention**: selected positions are
  hidden as keys, as in the authors' released code.

Both classes are frozen dataclasses, validated once when built (errors name the value), so
every function that takes one can trust it. Change a field with :meth:`Setting.replace`
(or ``dataclasses.replace``), which validates again.

Examples
--------
>>> s = Setting.chapter4(attend_to_masked=True)
>>> (s.num_topics, s.words_per_topic, s.topics_per_doc, s.doc_len, s.V, s.D)
(10, 10, 2, 64, 100, 101)
>>> s.hidden().attend_to_masked
False
>>> Setting(5, 4, 2, 20, attend_to_masked=False).masking
Masking(mask_prob=0.15, keep_prob=0.1, random_prob=0.1)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .utils import check_masking, check_positive_int

__all__ = ["Masking", "Setting", "BERT_MASKING", "check_attend_to_masked"]


def check_attend_to_masked(value: object) -> bool:
    """``value`` as a bool, else ``ValueError``: the key convention must be said, True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"attend_to_masked must be True (the theory's convention: masked positions are visible "
                         f"keys) or False (the released code's convention: hidden), got {value!r}")
    return bool(value)


def _check_doc_len(doc_len: object) -> float | int:
    """``doc_len`` is an int >= 2 or ``math.inf``."""
    if isinstance(doc_len, float) and math.isinf(doc_len) and doc_len > 0:
        return math.inf
    n = check_positive_int("doc_len", doc_len)
    if n < 2:
        raise ValueError(f"doc_len must be >= 2 (or math.inf), got {doc_len!r}")
    return n


@dataclass(frozen=True)
class Masking:
    """BERT's corruption: select each position with ``mask_prob``; a selected position shows its
    own word with ``keep_prob``, a uniform random word with ``random_prob`` and ``[MASK]`` otherwise.

    The defaults are BERT's (0.15, 0.1, 0.1). ``keep_prob + random_prob <= 1``.
    """

    mask_prob: float = 0.15
    keep_prob: float = 0.1
    random_prob: float = 0.1

    def __post_init__(self) -> None:
        p_m, p_c, p_r = check_masking(self.mask_prob, self.keep_prob, self.random_prob)
        object.__setattr__(self, "mask_prob", p_m)
        object.__setattr__(self, "keep_prob", p_c)
        object.__setattr__(self, "random_prob", p_r)

    p_m = property(lambda self: self.mask_prob, doc="``p_m``, the selection probability.")
    p_c = property(lambda self: self.keep_prob, doc="``p_c``, a selected position keeps its word.")
    p_r = property(lambda self: self.random_prob, doc="``p_r``, a selected position shows a random word.")

    @property
    def p_M(self) -> float:
        """``p_[M] = 1 - p_c - p_r``, a selected position shows ``[MASK]``."""
        return max(0.0, 1.0 - self.keep_prob - self.random_prob)

    def as_dict(self) -> dict[str, float]:
        """``{"mask_prob": ..., "keep_prob": ..., "random_prob": ...}``, for keyword arguments."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> Masking:
        """A copy with ``changes`` applied, validated again."""
        return dataclasses.replace(self, **changes)


#: BERT's corruption, ``Masking(mask_prob=0.15, keep_prob=0.1, random_prob=0.1)``, the default
#: ``masking`` of :class:`Setting`, :func:`topicmech.train.train` and the recipes.
BERT_MASKING = Masking()


@dataclass(frozen=True)
class Setting:
    """A topic model's sizes, the document length, the masking and the key convention.

    Parameters
    ----------
    num_topics : int
        ``T >= 1``, the number of topics.
    words_per_topic : int
        ``v >= 1``, the words of each topic.
    topics_per_doc : int
        ``tau``, the topics of each document, ``1 <= tau <= T``.
    doc_len : int or math.inf
        ``N >= 2``; ``math.inf`` stands for the long-document limit (closed forms only).
    masking : Masking, keyword only
        BERT's corruption; default :data:`BERT_MASKING`.
    attend_to_masked : bool, keyword only, required
        True: the theory's convention (selected positions are visible keys). False: the
        released code's convention (hidden).

    Notes
    -----
    The properties ``T``, ``v``, ``tau``, ``N``, ``V = T v``, ``D = V + 1`` and ``p_m``,
    ``p_c``, ``p_r``, ``p_M`` read the fields in the book's notation.
    """

    num_topics: int
    words_per_topic: int
    topics_per_doc: int
    doc_len: int | float
    masking: Masking = field(default=BERT_MASKING, kw_only=True)
    attend_to_masked: bool = field(kw_only=True)

    def __post_init__(self) -> None:
        T = check_positive_int("num_topics", self.num_topics)
        v = check_positive_int("words_per_topic", self.words_per_topic)
        tau = check_positive_int("topics_per_doc", self.topics_per_doc)
        if tau > T:
            raise ValueError(f"topics_per_doc must be <= num_topics={T}, got {self.topics_per_doc!r}")
        N = _check_doc_len(self.doc_len)
        if not isinstance(self.masking, Masking):
            raise ValueError(f"masking must be a topicmech.Masking, got {self.masking!r}")
        si = check_attend_to_masked(self.attend_to_masked)
        if not si and self.masking.mask_prob >= 1.0:
            raise ValueError(f"mask_prob must be < 1 when attend_to_masked=False (no visible key otherwise), "
                             f"got {self.masking.mask_prob!r}")
        for name, value in (("num_topics", T), ("words_per_topic", v), ("topics_per_doc", tau), ("doc_len", N),
                            ("attend_to_masked", si)):
            object.__setattr__(self, name, value)

    # ---- the book's notation ----
    T = property(lambda self: self.num_topics, doc="``T``, the number of topics.")
    v = property(lambda self: self.words_per_topic, doc="``v``, words per topic.")
    tau = property(lambda self: self.topics_per_doc, doc="``tau``, topics per document.")
    N = property(lambda self: self.doc_len, doc="``N``, the document length (may be ``math.inf``).")
    V = property(lambda self: self.num_topics * self.words_per_topic, doc="``V = T v``, the number of words.")
    D = property(lambda self: self.num_topics * self.words_per_topic + 1, doc="``D = V + 1``, tokens with [MASK].")
    p_m = property(lambda self: self.masking.mask_prob, doc="``p_m``.")
    p_c = property(lambda self: self.masking.keep_prob, doc="``p_c``.")
    p_r = property(lambda self: self.masking.random_prob, doc="``p_r``.")
    p_M = property(lambda self: self.masking.p_M, doc="``p_[M] = 1 - p_c - p_r``.")

    # ---- copies ----
    def replace(self, **changes: Any) -> Setting:
        """A copy with ``changes`` applied (``mask_prob``, ``keep_prob``, ``random_prob`` change the
        masking), validated again."""
        masking = {k: changes.pop(k) for k in ("mask_prob", "keep_prob", "random_prob") if k in changes}
        if masking:
            changes["masking"] = dataclasses.replace(changes.get("masking", self.masking), **masking)
        return dataclasses.replace(self, **changes)

    def visible(self) -> Setting:
        """This setting in the theory's convention (masked positions are visible keys)."""
        return self.replace(attend_to_masked=True)

    def hidden(self) -> Setting:
        """This setting in the released code's convention (selected positions hidden as keys)."""
        return self.replace(attend_to_masked=False)

    @property
    def convention(self) -> str:
        """``"the theory's convention"`` or ``"the released code's convention"``, for labels."""
        return "the theory's convention" if self.attend_to_masked else "the released code's convention"

    # ---- the book's presets ----
    @classmethod
    def chapter4(cls, *, attend_to_masked: bool, doc_len: int | float = 64) -> Setting:
        """Chapters 3, 4 and the appendices: ``T = v = 10``, ``tau = 2``, ``N = 64``, BERT masking."""
        return cls(10, 10, 2, doc_len, attend_to_masked=attend_to_masked)

    @classmethod
    def stage2_quick(cls, *, attend_to_masked: bool) -> Setting:
        """Chapter 5's quick setting: ``T = 5``, ``v = 4``, ``tau = 2``, ``N = 20``."""
        return cls(5, 4, 2, 20, attend_to_masked=attend_to_masked)
