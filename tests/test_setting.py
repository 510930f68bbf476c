"""Validation of :class:`topicmech.setting.Setting` and :class:`topicmech.setting.Masking`.

The closed forms in :mod:`topicmech.theory` take a Setting, so bad sizes, lengths, masking
probabilities and conventions are rejected here, once, with the value named.
"""

from __future__ import annotations

import math

import pytest

from topicmech.setting import Masking, Setting

BAD_SETTINGS = [
    ("num_topics", lambda: Setting(0, 4, 1, 20, attend_to_masked=True)),
    ("topics_per_doc", lambda: Setting(5, 4, 6, 20, attend_to_masked=True)),
    ("words_per_topic", lambda: Setting(5, 0, 2, 20, attend_to_masked=True)),
    ("doc_len", lambda: Setting(5, 4, 2, 1, attend_to_masked=True)),
    ("doc_len", lambda: Setting(5, 4, 2, 2.5, attend_to_masked=True)),
    ("doc_len", lambda: Setting(5, 4, 2, 0, attend_to_masked=True)),
    ("mask_prob", lambda: Setting(5, 4, 2, 20, masking=Masking(mask_prob=1.5), attend_to_masked=True)),
    ("keep_prob", lambda: Masking(keep_prob=-0.1)),
    ("keep_prob", lambda: Masking(keep_prob=0.6, random_prob=0.5)),
    ("random_prob", lambda: Masking(random_prob=2)),
    ("mask_prob", lambda: Setting(5, 4, 2, 20, masking=Masking(mask_prob=1.0), attend_to_masked=False)),
    ("attend_to_masked", lambda: Setting(5, 4, 2, 20, attend_to_masked="yes")),
    ("masking", lambda: Setting(5, 4, 2, 20, masking=(0.15, 0.1, 0.1), attend_to_masked=True)),
    ("words_per_topic", lambda: Setting(5, 4, 2, 20, attend_to_masked=True).replace(words_per_topic=0)),
    ("keep_prob", lambda: Setting(5, 4, 2, 20, attend_to_masked=True).replace(keep_prob=1.2)),
]


@pytest.mark.parametrize("name, call", BAD_SETTINGS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(BAD_SETTINGS)])
def test_bad_settings_raise(name, call):
    with pytest.raises(ValueError, match=name):
        call()


def test_attend_to_masked_is_required():
    with pytest.raises(TypeError):
        Setting(5, 4, 2, 20)  # type: ignore[call-arg]


def test_replace_and_conventions():
    s = Setting.chapter4(attend_to_masked=True)
    assert (s.T, s.v, s.tau, s.N, s.V, s.D) == (10, 10, 2, 64, 100, 101)
    assert s.replace(doc_len=math.inf).N == math.inf
    assert s.replace(mask_prob=0.3).masking == Masking(0.3, 0.1, 0.1)
    assert s.hidden().attend_to_masked is False and s.hidden().visible() == s
    assert Setting.stage2_quick(attend_to_masked=False).doc_len == 20
