"""Sphinx extension: author-year citations that tell same-author, same-year works apart.

sphinxcontrib-bibtex's ``author_year`` style prints author and ``year`` only, so two works
by the same authors in the same year cite identically: the first author's slides and the
released code both read "Li [2023]", the paper and its project page both "Li et al. [2023]".
The bibliography itself already separates them, because pybtex's ``alpha`` labels carry a
letter (``[Li23a]``, ``[Li23b]``, ``[LLR23a]``, ``[LLR23b]``).

This extension registers the referencing style ``author_year_suffix``: the ``author_year``
style in which the year is followed by what the work is, from the entry's ``citetag`` field
("Li et al. [2023, paper]", "Li [2023, slides]"), or, for an entry without one, by the letter
of its label, so the citation "Li [2023a]" points at the entry labelled ``[Li23a]``. The ``.bib`` file keeps its real years and the
bibliography keeps its order; nothing changes for works without a letter.

Use it with ``bibtex_reference_style: author_year_suffix`` (``_config.yml``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pybtex.richtext import Text
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BaseReferenceStyle, BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_year import ExtraYearReferenceStyle
from sphinxcontrib.bibtex.style.template import (
    join,
    join2,
    node,
    post_text,
    pre_text,
    reference,
    year,
)

#: The disambiguating letters pybtex's alpha label style appends after the two-digit year.
SUFFIX = re.compile(r"\d([a-z]+)$")


def label_suffix(label: str) -> str:
    """The letters after the year in an alpha label: ``"Li23b"`` -> ``"b"``, ``"WWD+20"`` -> ``""``."""
    match = SUFFIX.search(label)
    return match.group(1) if match else ""


#: The ``.bib`` field that names what a work is, for works of the same authors and year.
TAG_FIELD = "citetag"


@node
def year_suffix(children, data) -> Text:
    """The entry's year followed by its ``citetag`` field ("2023, slides") if it has one,
    otherwise by the letter of its bibliography label (if any)."""
    assert not children
    tag = data["entry"].fields.get(TAG_FIELD)
    if tag:
        return Text(year.format_data(data), ", ", tag)
    return Text(year.format_data(data), label_suffix(data["formatted_entry"].label))


@dataclass
class _Parenthetical(BasicAuthorYearParentheticalReferenceStyle):
    def inner(self, role_name: str):
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text,
            reference[
                join(sep=self.author_year_sep)[
                    self.person.author_or_editor_or_title(full="s" in role_name),
                    year_suffix,
                ]
            ],
            post_text,
        ]


@dataclass
class _Textual(BasicAuthorYearTextualReferenceStyle):
    def inner(self, role_name: str):
        return join(sep=self.text_reference_sep)[
            self.person.author_or_editor_or_title(full="s" in role_name),
            join[
                self.bracket.left,
                join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                    pre_text,
                    reference[year_suffix],
                    post_text,
                ],
                self.bracket.right,
            ],
        ]


@dataclass
class _Year(ExtraYearReferenceStyle):
    def inner(self, role_name: str):
        return reference[year_suffix]


_REPLACE = {
    BasicAuthorYearParentheticalReferenceStyle: _Parenthetical,
    BasicAuthorYearTextualReferenceStyle: _Textual,
    ExtraYearReferenceStyle: _Year,
}


@dataclass
class AuthorYearSuffixReferenceStyle(AuthorYearReferenceStyle):
    """``author_year`` with the work's tag (or its label's letter) after the year; works in one
    parenthetical citation are separated by semicolons, since a tag brings its own comma."""

    bracket_parenthetical: BracketStyle = field(
        default_factory=lambda: BracketStyle(sep="; ", sep2="; ", last_sep="; "))

    def __post_init__(self):
        super().__post_init__()
        styles: list[BaseReferenceStyle] = []
        for style in self.styles:
            new = _REPLACE.get(type(style))
            if new is not None:
                kwargs = {k: getattr(style, k) for k in style.__dataclass_fields__}
                style = new(**kwargs)
            styles.append(style)
        self.styles = styles
        # the group's role-name -> style table was built from the old styles
        self.role_style = {name: s for s in self.styles for name in s.role_names()}


def setup(app):
    register_plugin(
        "sphinxcontrib.bibtex.style.referencing", "author_year_suffix", AuthorYearSuffixReferenceStyle
    )
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
