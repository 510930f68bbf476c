"""Every math symbol the book uses is listed on the notation page (``book/notation.md``).

How the symbols are extracted (the same rules on every page and on the notation page, so a
symbol counts as listed when it appears anywhere in the notation page's maths):

1. **Only the prose's maths**: ``$...$``, ``$$...$$`` and ``{math}`` blocks of the Markdown
   text. Code cells (``{code-cell}`` and other fenced blocks), front matter, HTML comments and
   inline code are skipped; so are ``\\text{...}``, ``\\operatorname{...}``, multi-letter
   ``\\mathrm{...}`` (function names such as Attn, softmax), ``\\label``/``\\tag`` and ``\\mathbb``
   (standard sets and the expectation).
2. **A symbol is a base with its meaningful decorations.** Bases: a Greek letter
   (``\\alpha``, ``\\Sigma``, ``\\varepsilon``), a calligraphic, bold or single-letter roman
   letter (``\\mathcal G``, ``\\mathbf 1``, ``\\mathrm t``), or a single Latin letter (``T``,
   ``v``, ``x``). Accents (``\\tilde``, ``\\bar``, ``\\hat``) belong to the symbol
   (``\\tilde x`` is not ``x``).
3. **Sub- and superscripts**: a label is kept (``\\lambda_{\\rm t}``, ``W^V``, ``W^\\star``,
   ``p_{[M]}``, ``\\lambda_1``, ``\\alpha_\\tau``, ``d_S``); an index is dropped (``x_j`` is
   ``x``, ``P_{ab}`` is ``P``, ``p_m`` is ``p``: a lowercase Latin subscript counts as an index),
   and so are powers and operators (``\\lambda^2``, ``\\Sigma^{-1}``, ``E^\\top``,
   ``\\mathbf 1^\\perp``, ``\\Sigma^{1/2}``). ``\\rm x``, ``\\mathrm{x}`` and ``\\text{x}`` in a
   subscript are the same label.

The test fails naming each symbol that the notation page does not list and the pages that
use it. **To fix a failure, add the symbol (with its meaning) to ``book/notation.md``**, or,
if the page uses a letter for something the notation page names differently, rename it on
the page. ``normalize`` below shows the spelling the test compares.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTATION = BOOK / "notation.md"
# Pages that are not chapters' prose: the template for new chapters and the bibliography stub.
SKIP_PAGES = {"_template.md", "references.md"}

GREEK = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi "
    "pi varpi rho varrho sigma varsigma tau upsilon phi varphi chi psi omega "
    "Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega"
).split()
ACCENTS = ("tilde", "bar", "hat", "widetilde", "widehat", "overline", "vec", "dot", "check")
LETTER_FONTS = ("mathcal", "mathbf", "boldsymbol", "mathrm", "mathsf", "mathscr", "rm", "bf")
# Commands whose argument is not a symbol (text, function names, sets, layout).
DROP_ARG = ("text", "textrm", "textit", "textbf", "operatorname", "label", "tag", "mathbb",
            "hbox", "mbox", "texttt", "mathit")
# Superscripts that are operations, not labels.
OPERATOR_SUPS = {r"\top", "T", r"\perp", r"\prime", "'", "-1", "1/2", "-1/2", r"\dagger", "+", "-", "c"}


def strip_to_math(text: str) -> str:
    """The maths of a MyST page, one segment per line: code cells, front matter, comments and
    inline code removed; ``$$...$$``, ``{math}`` blocks and ``$...$`` kept."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)                  # front matter
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    segments: list[str] = []

    def keep_math_block(m: re.Match) -> str:
        body = re.sub(r"^:\w+:.*$", "", m.group(2), flags=re.M)            # :label: options
        segments.append(body)
        return ""

    # fenced blocks: {math} kept, every other fence (code cells, directives' code) dropped
    # (directives such as {prf:theorem}, {note} and {exercise} hold prose: their fences are
    # removed but their contents stay)
    fence = re.compile(r"^(`{3,}|~{3,})\s*\{math\}[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
    text = fence.sub(keep_math_block, text)
    code = re.compile(r"^(`{3,}|~{3,})\s*(\{code-cell\}|\{literalinclude\}|\{eval-rst\}|python|bash|"
                      r"text|console|yaml|toml|sh|\{code-block\}|\{code\})[^\n]*\n.*?^\1\s*$", re.S | re.M)
    text = code.sub("", text)
    text = re.sub(r"^:::?\{?code-cell.*?^:::?\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"``.*?``|`[^`\n]*`", "", text)                                  # inline code, roles
    for m in re.finditer(r"\$\$(.+?)\$\$", text, flags=re.S):
        segments.append(m.group(1))
    text = re.sub(r"\$\$(.+?)\$\$", "", text, flags=re.S)
    for m in re.finditer(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<![\s\\])\$", text):
        segments.append(m.group(1))
    return "\n".join(segments)


def _group(s: str, i: int) -> tuple[str, int]:
    """The argument starting at ``s[i]`` (a braced group, a command or one character) and the
    index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] == "{":
        depth, j = 0, i
        while j < len(s):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return s[i + 1:j], j + 1
            j += 1
        return s[i + 1:], len(s)
    if s[i] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", s[i:])
        return m.group(0), i + m.end()
    return s[i], i + 1


def _label(script: str, kind: str) -> str | None:
    """Normal form of a sub- or superscript if it is a label, None if it is an index or operator."""
    raw = script.strip()
    s = re.sub(r"\\(mathrm|rm|text|textrm|operatorname)\s*\{([^{}]*)\}", r"\\rm{\2}", raw)
    s = re.sub(r"\\(?:rm|mathrm)\s+([A-Za-z]+)", r"\\rm{\1}", s)
    s = re.sub(r"\s+", "", s)
    if kind == "^" and (s in OPERATOR_SUPS or re.fullmatch(r"[-+]?\d+(/\d+)?|\(\d+\)|[-+]", s)):
        return None
    if s in (r"\star", "*", r"\ast"):
        return r"\star"
    if re.fullmatch(r"\\rm\{[^{}]+\}", s):                         # \rm t, \mathrm{eff}, \text{diag}
        return s
    if re.fullmatch(r"\[[A-Za-z]+\]|\\mathbf\{?1\}?|\\mathbf\{[A-Za-z]\}", s):    # [M], \mathbf 1
        return s.replace(r"\mathbf1", r"\mathbf{1}")
    if re.fullmatch(r"\\(" + "|".join(GREEK) + r")", s):            # \alpha_\tau, W_\nu
        return s
    if kind == "_" and re.fullmatch(r"\d+", s):                     # \lambda_1, c_2
        return s
    if re.fullmatch(r"[A-Z]+", s):                                   # W^V, d_S, \omega_B
        return s
    return None                                                      # i, j, ik, w, t, 0, n+1, ...


def symbols(math: str) -> set[str]:
    """The symbols of a string of LaTeX maths, in the normal form the test compares."""
    s = math
    for cmd in DROP_ARG:
        # (?![A-Za-z]): \text must not match the start of \textstyle
        s = re.sub(r"\\" + cmd + r"(?![A-Za-z])\s*(\{(?:[^{}]|\{[^{}]*\})*\}|[A-Za-z])", " ", s)
    s = re.sub(r"\\(mathrm|rm)\s*\{([A-Za-z]{2,})\}", " ", s)                # \mathrm{Attn}, \rm{Bin}
    s = re.sub(r"\\begin\{\w+\*?\}|\\end\{\w+\*?\}", " ", s)
    found: set[str] = set()
    i = 0
    while i < len(s):
        c = s[i]
        base = None
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+)", s[i:])
            if not m:
                i += 2
                continue
            name, i = m.group(1), i + m.end()
            if name in GREEK:
                base = "\\" + name
            elif name in ACCENTS:
                arg, i = _group(s, i)
                inner = sorted(symbols(arg))
                base = f"\\{name}{{{inner[0]}}}" if len(inner) == 1 else None
                if base is None:
                    found.update(inner)
                    continue
            elif name in LETTER_FONTS:
                arg, i = _group(s, i)
                arg = arg.strip()
                if re.fullmatch(r"[A-Za-z0-9]", arg):
                    font = {"rm": "mathrm", "bf": "mathbf", "boldsymbol": "mathbf"}.get(name, name)
                    base = f"\\{font}{{{arg}}}"
                else:
                    found.update(symbols(arg))
                    continue
            else:
                continue                                                 # \frac, \sum, \le, \top, ...
        elif c.isalpha() and c.isascii():
            base, i = c, i + 1
        elif c in "_^":                                                  # script of ")" or "]"
            script, i = _group(s, i + 1)
            found.update(x for x in symbols(script) if not re.fullmatch(r"[a-z]", x))
            continue
        else:
            i += 1
            continue
        decor = ""
        while True:                                                      # sub- and superscripts
            j = i
            while j < len(s) and s[j] == " ":
                j += 1
            if j < len(s) and s[j] in "_^":
                kind = s[j]
                script, i = _group(s, j + 1)
                label = _label(script, kind)
                if label is not None:
                    decor += f"{kind}{{{label}}}"
                else:
                    found.update(x for x in symbols(script) if not re.fullmatch(r"[a-z]", x))
            else:
                break
        found.add(base + decor)
    return found


def normalize(symbol_latex: str) -> set[str]:
    """Normal forms of the symbols in a snippet of LaTeX (for debugging a failure)."""
    return symbols(symbol_latex)


def page_symbols(path: Path) -> set[str]:
    return symbols(strip_to_math(path.read_text(encoding="utf-8")))


def test_extraction_rules():
    assert symbols(r"\lambda_{\rm t} + \lambda_{\mathrm{t}}") == {r"\lambda_{\rm{t}}"}
    assert symbols(r"W^V x_j") == {"W^{V}", "x"}
    assert symbols(r"W^\star = C\Sigma^{-1}") == {r"W^{\star}", "C", r"\Sigma"}
    assert symbols(r"\tilde x_j^\top A\, \tilde x_i") == {r"\tilde{x}", "A"}
    assert symbols(r"\operatorname{tr}(M \mathbb E[y]) \text{ for all } \mathcal G") == {"M", "y", r"\mathcal{G}"}
    assert symbols(r"p_{[M]} = 1 - p_c") == {"p_{[M]}", "p"}
    assert symbols(r"\mathrm{Attn}(Z)_{ij} + \mathbf 1^\perp") == {"Z", r"\mathbf{1}"}
    assert symbols(r"\textstyle\sum_t \hat p_t^2") == {r"\hat{p}"}
    page = "```{code-cell} ipython3\nx = '$a$'\n```\nthe $b_i$ and $$c$$"
    assert sorted(strip_to_math(page).split("\n")) == ["b_i", "c"]


def test_every_symbol_is_on_the_notation_page():
    listed = page_symbols(NOTATION)
    missing: dict[str, list[str]] = defaultdict(list)
    for page in sorted(BOOK.glob("*.md")):
        if page.name in SKIP_PAGES or page == NOTATION:
            continue
        for sym in sorted(page_symbols(page) - listed):
            missing[sym].append(page.name)
    if missing:
        lines = [f"  {sym!s:<28} used in {', '.join(pages)}" for sym, pages in sorted(missing.items())]
        pytest.fail(
            f"{len(missing)} math symbol(s) used in the book are not on the notation page. "
            "Add each to book/notation.md (a row with its meaning, or a mention in the maths of "
            "an existing row), or rename it on the page to the notation page's symbol:\n"
            + "\n".join(lines)
        )
