"""Tests for topicmech.utils: seeding, generators, run mode, input checks."""

from __future__ import annotations

import gc
import math
import random

import numpy as np
import pytest
import torch

from topicmech import utils
from topicmech.notebook import glue_values, setup_notebook, table_styles
from topicmech.utils import (
    check_masking,
    check_positive_int,
    check_probability,
    default_device,
    is_full,
    make_generator,
    run_mode,
    seed_everything,
)


@pytest.fixture
def restore_torch_globals():
    """seed_everything can switch deterministic algorithms on for the whole process: undo it."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    torch.set_num_threads(threads)


def draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_seed_everything_seeds_python_numpy_and_torch(restore_torch_globals):
    seed_everything(123)
    a = draws()
    seed_everything(123)
    assert draws() == a
    seed_everything(124)
    assert all(x != y for x, y in zip(draws(), a))


def test_seed_everything_deterministic_flag(restore_torch_globals):
    torch.use_deterministic_algorithms(False)
    seed_everything(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    seed_everything(0)  # default: deterministic kernels only where the models run on CUDA
    assert torch.are_deterministic_algorithms_enabled() == (default_device().type == "cuda")
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()


def test_seed_everything_accepts_large_and_numpy_seeds(restore_torch_globals):
    seed_everything(2**64 - 1)
    seed_everything(np.int64(5))
    a = draws()
    seed_everything(5)
    assert draws() == a


def test_make_generator():
    g = make_generator(42)
    assert isinstance(g, torch.Generator)
    assert torch.equal(torch.rand(5, generator=g), torch.rand(5, generator=torch.Generator().manual_seed(42)))
    assert torch.equal(torch.rand(3, generator=make_generator(np.int32(7))),
                       torch.rand(3, generator=make_generator(7)))
    same = torch.Generator().manual_seed(1)
    assert make_generator(same) is same
    # independent of the global seed
    torch.manual_seed(0)
    x = torch.rand(3, generator=make_generator(9))
    torch.manual_seed(1)
    assert torch.equal(torch.rand(3, generator=make_generator(9)), x)


@pytest.mark.parametrize("bad", [-1, 2**64, 1.0, 0.5, "1", None, True, [1]])
def test_make_generator_and_seed_everything_reject_bad_seeds(bad, restore_torch_globals):
    with pytest.raises(ValueError, match="seed"):
        make_generator(bad)
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


@pytest.mark.parametrize("value,expected", [(None, "quick"), ("", "quick"), ("quick", "quick"), ("full", "full"),
                                            (" FULL ", "full"), ("Quick", "quick")])
def test_run_mode(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("TOPICMECH_MODE", raising=False)
    else:
        monkeypatch.setenv("TOPICMECH_MODE", value)
    assert run_mode() == expected
    assert is_full() == (expected == "full")


@pytest.mark.parametrize("value", ["fast", "paper", "1", "quick,full"])
def test_run_mode_bad_value_raises(monkeypatch, value):
    monkeypatch.setenv("TOPICMECH_MODE", value)
    with pytest.raises(ValueError, match="TOPICMECH_MODE"):
        run_mode()
    with pytest.raises(ValueError, match="TOPICMECH_MODE"):
        is_full()


def test_default_device(monkeypatch):
    monkeypatch.setenv("TOPICMECH_MODE", "quick")
    assert default_device() == torch.device("cpu")
    monkeypatch.setenv("TOPICMECH_MODE", "full")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert default_device().type == expected


def test_setup_notebook(monkeypatch, restore_torch_globals):
    monkeypatch.setenv("TOPICMECH_MODE", "quick")
    frozen = gc.get_freeze_count()
    assert setup_notebook(3, threads=1) == "quick"
    assert gc.get_freeze_count() == frozen           # no hidden global state: the collector is left alone
    assert torch.get_num_threads() == 1
    a = draws()
    setup_notebook(3)
    assert draws() == a
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match="threads"):
            setup_notebook(0, threads=bad)


def test_mode_constant_is_a_valid_mode():
    assert utils.MODE in ("quick", "full")


# ---- check helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize("good", [1, 7, np.int64(3), 10**12])
def test_check_positive_int_accepts(good):
    out = check_positive_int("n", good)
    assert out == good and type(out) is int


@pytest.mark.parametrize("bad", [0, -1, 1.5, 2.0, True, "3", None, np.float64(2.0)])
def test_check_positive_int_rejects(bad):
    with pytest.raises(ValueError, match="my_arg"):
        check_positive_int("my_arg", bad)


@pytest.mark.parametrize("good", [0, 0.0, 0.5, 1, 1.0, np.float32(0.25)])
def test_check_probability_accepts(good):
    out = check_probability("p", good)
    assert out == pytest.approx(float(good)) and type(out) is float


@pytest.mark.parametrize("bad", [-0.1, 1.0001, math.nan, math.inf, -math.inf, "0.5", None, True, [0.5]])
def test_check_probability_rejects(bad):
    with pytest.raises(ValueError, match="my_prob"):
        check_probability("my_prob", bad)


def test_check_masking():
    assert check_masking(0.15, 0.1, 0.1) == (0.15, 0.1, 0.1)
    assert check_masking(1, 0.7, 0.3) == (1.0, 0.7, 0.3)        # keep + random = 1 is allowed
    with pytest.raises(ValueError, match="keep_prob.*random_prob"):
        check_masking(0.15, 0.6, 0.5)
    for args, name in [((1.5, 0.1, 0.1), "mask_prob"), ((0.1, -0.1, 0.1), "keep_prob"),
                       ((0.1, 0.1, math.nan), "random_prob")]:
        with pytest.raises(ValueError, match=name):
            check_masking(*args)


def test_seed_offset_shifts_every_random_source(monkeypatch):
    monkeypatch.delenv("TOPICMECH_SEED_OFFSET", raising=False)
    assert utils.seed_offset() == 0
    base_torch = torch.rand(3, generator=utils.make_generator(5))
    base_numpy = utils.numpy_rng(5).random(3)
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "1000")
    assert utils.seed_offset() == 1000
    assert utils.shift_seed(5) == 1005
    shifted = torch.rand(3, generator=utils.make_generator(5))
    assert not torch.equal(shifted, base_torch)
    assert torch.equal(shifted, torch.rand(3, generator=torch.Generator().manual_seed(1005)))
    assert not np.array_equal(utils.numpy_rng(5).random(3), base_numpy)
    # spawned child seeds are plain ints, shifted only when used
    monkeypatch.delenv("TOPICMECH_SEED_OFFSET")
    assert utils.spawn_seeds(7, 3) == utils.spawn_seeds(7, 3)
    assert len(set(utils.spawn_seeds(7, 3))) == 3


@pytest.mark.parametrize("value", ["-1", "abc", "1.5"])
def test_seed_offset_rejects_bad_values(monkeypatch, value):
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", value)
    with pytest.raises(ValueError, match="TOPICMECH_SEED_OFFSET"):
        utils.seed_offset()


def test_as_float64_detaches_and_converts():
    t = torch.ones(2, 3, requires_grad=True)
    a = utils.as_float64(t * 2)
    assert a.dtype == np.float64 and a.shape == (2, 3) and (a == 2).all()
    assert utils.as_float64([[1, 2]]).dtype == np.float64


def test_glue_values_glues_plain_numbers_in_order(monkeypatch):
    import myst_nb

    glued = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.append((name, value, display)))
    glue_values({"gap": np.float64(0.25), "n": np.int64(3), "t": torch.tensor(1.5), "a": np.array(2.0),
                       "k": 7, "flag": True, "label": "x"})
    assert glued == [("gap", 0.25, False), ("n", 3, False), ("t", 1.5, False), ("a", 2.0, False), ("k", 7, False),
                     ("flag", True, False), ("label", "x", False)]
    assert [type(v) for _, v, _ in glued[:4]] == [float, int, float, float]
    glued.clear()
    glue_values({"n": 3, "half": np.float32(0.5)}, convert=float)     # as glue(name, float(value)) would
    assert glued == [("n", 3.0, False), ("half", 0.5, False)] and type(glued[0][1]) is float
    with pytest.raises(ValueError, match="values"):
        glue_values([("gap", 1.0)])
    with pytest.raises(ValueError, match="names"):
        glue_values({"": 1.0})
    with pytest.raises(ValueError, match=r"values\['v'\]"):
        glue_values({"v": np.zeros(3)})


def test_glue_values_without_myst_nb_keeps_the_values(monkeypatch):
    """An exported notebook runs without Jupyter Book: the values are kept in notebook.GLUED."""
    import builtins

    from topicmech import notebook

    real_import = builtins.__import__

    def no_myst_nb(name, *args, **kwargs):
        if name == "myst_nb":
            raise ImportError("no myst_nb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst_nb)
    monkeypatch.setattr(notebook, "GLUED", {})
    glue_values({"gap": np.float64(0.25)})
    assert notebook.GLUED == {"gap": 0.25}


def test_glue_values_keeps_the_values_with_myst_nb_too(monkeypatch):
    """An exported notebook run where myst_nb is installed still finds the values in GLUED."""
    from topicmech import notebook

    pytest.importorskip("myst_nb")
    monkeypatch.setattr(notebook, "GLUED", {})
    glue_values({"n_seeds": np.int64(3)})
    assert notebook.GLUED == {"n_seeds": 3}


def test_format_values_formats_as_the_book_and_marks_missing_names(monkeypatch, capsys):
    """The values cells of an exported notebook: the book's format specs, and no error for a
    name that no cell has glued yet."""
    from topicmech import notebook

    monkeypatch.setattr(notebook, "GLUED", {})
    glue_values({"gap": np.float64(0.25), "n_docs": 12000, "order": "g_t > g_w"})
    line = notebook.format_values("gap:.3f", "n_docs:,", "order", "later:.2f", "n_docs:.1%")
    assert line == ("gap = 0.250; n_docs = 12,000; order = g_t > g_w; later = not computed yet;"
                    " n_docs = 1200000.0%")
    # a format the value does not take shows the value plainly
    assert notebook.format_values("order:.2f", values={"order": "text"}) == "order = text"
    assert notebook.format_values("k:d", values={"k": 2.5}) == "k = 2.5"
    notebook.show_values("gap:.1f", "missing")
    assert capsys.readouterr().out == "gap = 0.2; missing = not computed yet\n"
    for bad in ("", ":.2f", 3):
        with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
            notebook.format_values(bad)


def test_table_styles_pads_cells_and_keeps_named_columns_left():
    styles = table_styles(1, 3)
    assert "padding" in styles[0]["props"] and styles[0]["selector"] == "th, td"
    assert [s["selector"] for s in styles[1:]] == ["td:nth-child(1), th:nth-child(1)",
                                                  "td:nth-child(3), th:nth-child(3)"]
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=repr(bad)):
            table_styles(bad)
