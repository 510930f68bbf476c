"""What a chapter notebook calls first and last: :func:`setup_notebook` (threads, seeds, inline
figures in the house style) and :func:`glue_values` (many numbers glued for the prose at once);
in an exported notebook, :func:`show_values` shows the numbers a paragraph names.

Imported on first use (``tm.setup_notebook``, ``tm.glue_values``): it pulls in matplotlib.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from . import plotting
from .utils import Mode, check_positive_int, run_mode, seed_everything

__all__ = ["setup_notebook", "glue_values", "GLUED", "format_values", "show_values",
           "table_styles"]

#: What :func:`glue_values` glued, by name (with or without ``myst_nb``). In an exported notebook,
#: the values behind the numbers its text shows as their names.
GLUED: dict[str, Any] = {}


def setup_notebook(seed: int = 0, *, threads: int = 1) -> Mode:
    """Set ``threads`` torch threads (one by default: two on two busy cores can be far slower),
    seed everything, draw figures inline in house style; return the run mode."""
    torch.set_num_threads(check_positive_int("threads", threads))
    seed_everything(seed)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython ships with the book's requirements
        shell = None
    if shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell":
        shell.run_line_magic("matplotlib", "inline")  # even if MPLBACKEND=Agg is set
        # tqdm.auto (imported by transformers, and by train(progress=True)) warns once that
        # ipywidgets is missing and falls back to a text bar: no news for a reader of the page
        warnings.filterwarnings("ignore", message="IProgress not found")
    plotting.set_style()
    return run_mode()


def table_styles(*left: int) -> list[dict[str, str]]:
    """Styles for a pandas ``Styler.set_table_styles``: padded cells, numbers right-aligned.

    ``left`` numbers (from 1) the columns that stay left-aligned, such as a column of labels.
    ``ValueError`` naming the value for a column number that is not a positive int.

    Examples
    --------
    >>> df.style.hide(axis="index").set_table_styles(table_styles(1))  # doctest: +SKIP
    """
    for k in left:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"column numbers must be positive ints, got {k!r}")
    pad = [{"selector": "th, td", "props": "padding: 0.2em 0.3em; text-align: right"}]
    return pad + [{"selector": f"td:nth-child({k}), th:nth-child({k})", "props": "text-align: left"}
                  for k in left]


def glue_values(values: Mapping[str, Any], *, convert: Callable[[Any], Any] | None = None) -> None:
    """Glue every entry of ``values`` for the page's ``{glue:text}`name:format``` roles, in order:
    ``myst_nb.glue(name, value, display=False)`` for each when ``myst_nb`` is installed, and
    always into :data:`GLUED` (an exported notebook shows the glued numbers as their names and
    tells the reader to look them up there).

    Each value first goes through ``convert`` when given (``convert=float`` glues exactly what
    ``glue(name, float(value), display=False)`` would); then a NumPy scalar, a 0-d array or a
    one-element tensor becomes the Python number it holds, which a format such as ``.2f`` can
    format. ``ValueError`` naming the entry for a key that is not a non-empty string or a value
    that is not a number, a bool or a string.

    Examples
    --------
    >>> glue_values({"value_gap": gap, "n_seeds": len(seeds)})  # doctest: +SKIP
    """
    try:
        from myst_nb import glue  # the book's notebook layer, not a dependency of the package
    except ImportError:  # an exported notebook outside Jupyter Book: GLUED alone
        glue = None

    if not isinstance(values, Mapping):
        raise ValueError(f"values must be a mapping of names to numbers, got {type(values).__name__}")
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"glue names must be non-empty strings, got {name!r}")
        if convert is not None:
            value = convert(value)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        elif isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
            value = value.item()
        if not isinstance(value, (int, float, str)):
            raise ValueError(f"values[{name!r}] must be a number, a bool or a string, got {type(value).__name__}")
        if glue is not None:
            glue(name, value, display=False)
        GLUED[name] = value


#: What :func:`format_values` shows for a name that nothing has glued yet.
NOT_COMPUTED = "not computed yet"


def _format_one(spec: str, values: Mapping[str, Any]) -> str:
    if not isinstance(spec, str) or not spec.split(":", 1)[0].strip():
        raise ValueError(f"each spec must be 'name' or 'name:format', got {spec!r}")
    name, _, fmt = spec.partition(":")
    name = name.strip()
    if name not in values:
        return f"{name} = {NOT_COMPUTED}"
    value = values[name]
    try:
        text = format(value, fmt) if fmt else str(value)
    except (TypeError, ValueError):  # a format the value does not take: show it plainly
        text = str(value)
    return f"{name} = {text}"


def format_values(*specs: str, values: Mapping[str, Any] | None = None) -> str:
    """One line ``"name = value; ..."`` for the glued names ``specs``, each ``"name"`` or
    ``"name:format"`` as in the book's ``{glue:text}`name:format``` roles (``"gap:.3f"``,
    ``"n_docs:,"``).

    Values are read from ``values`` (default :data:`GLUED`); a name not there yet reads
    ``"name = not computed yet"``, and a value that its format does not fit is shown with
    ``str``. ``ValueError`` naming the spec for one that is not a string with a name.

    Examples
    --------
    >>> format_values("gap:.3f", "n:,", "later", values={"gap": 0.25, "n": 1200})
    'gap = 0.250; n = 1,200; later = not computed yet'
    """
    table = GLUED if values is None else values
    return "; ".join(_format_one(spec, table) for spec in specs)


def show_values(*specs: str, values: Mapping[str, Any] | None = None) -> None:
    """Print :func:`format_values` of ``specs``: in an exported notebook, the cell after a
    paragraph calls it to show the numbers that the paragraph names in code font."""
    print(format_values(*specs, values=values))
