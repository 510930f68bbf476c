"""Stored results (``results/*.json``): the writer and reader, and every stored file checked
against what its recorded function computes now, on its first seed."""

from __future__ import annotations

import json

import pytest

from topicmech import results


def toy_metric(seed: int, *, scale: float = 1.0) -> dict:
    """A module-level function of a seed, as stored results need."""
    return {"value": scale * (seed + 1), "even": seed % 2 == 0, "curve": [seed, 2 * seed]}


def test_store_load_rerun_round_trip(tmp_path):
    path = results.store("toy", toy_metric, [0, 1, 2], command="pytest", kwargs={"scale": 2.0},
                         n_jobs=1, directory=tmp_path)
    raw = json.loads(path.read_text())
    assert raw["provenance"]["function"] == "tests.test_results:toy_metric" or \
        raw["provenance"]["function"].endswith("test_results:toy_metric")
    for key in ("commit", "command", "date", "machine", "versions", "seeds", "mode"):
        assert key in raw["provenance"], key
    stored = results.load("toy", directory=tmp_path)
    assert stored.seeds == [0, 1, 2]
    assert stored.values("value").tolist() == [2.0, 4.0, 6.0]
    iv = stored.interval("value")
    assert iv.mean == pytest.approx(4.0) and iv.lo < 4.0 < iv.hi and (iv.min, iv.max) == (2.0, 6.0)
    assert stored.summary["value"]["n"] == 3
    stored.check_rerun([{"seed": 1, "value": 4.0, "even": False, "curve": [1, 2]}])
    with pytest.raises(AssertionError, match="seed 1, value"):
        stored.check_rerun([{"seed": 1, "value": 4.5}])
    with pytest.raises(KeyError, match="no metric"):
        stored.values("missing")


def test_rerun_under_a_seed_offset_checks_the_stored_range(tmp_path, monkeypatch):
    results.store("toy", toy_metric, range(10), command="pytest", n_jobs=1, directory=tmp_path)
    stored = results.load("toy", directory=tmp_path)          # value = seed + 1: stored range [1, 10]
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "3000")
    stored.check_rerun([{"seed": 0, "value": 27.5, "even": True, "curve": [99, 0]}])   # 10 + 2 * 9
    with pytest.raises(AssertionError, match="curve"):                 # a curve: its last value
        stored.check_rerun([{"seed": 0, "curve": [0, 55]}])
    with pytest.raises(AssertionError, match="outside the stored range"):
        stored.check_rerun([{"seed": 0, "value": 28.5}])
    with pytest.raises(AssertionError, match="fresh seed"):
        stored.check_rerun([{"seed": 0, "even": "maybe"}])


def test_bad_inputs_name_the_value(tmp_path):
    with pytest.raises(ValueError, match="plain file stem"):
        results.store("a/b", toy_metric, [0], command="x", directory=tmp_path)
    with pytest.raises(ValueError, match="module-level"):
        results.store("lam", lambda seed: {"v": 1.0}, [0], command="x", n_jobs=1, directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="scripts/results"):
        results.load("nothing_here", directory=tmp_path)
    with pytest.raises(ValueError, match="finite"):
        results.interval([])


STORED = sorted(p.stem for p in results.RESULTS_DIR.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", STORED)
def test_stored_file_matches_its_function(name):
    """Each stored file still holds what its recorded function computes, on its first seed."""
    stored = results.load(name)
    stored.check_rerun(results.rerun(stored), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", STORED)
def test_stored_file_was_written_from_a_clean_commit(name):
    """A stored file's provenance names a commit that holds the code that wrote it: its script
    ran from a committed tree, not one with uncommitted changes ("+dirty") or outside git."""
    commit = results.load(name).provenance["commit"]
    assert commit != "unknown" and not commit.endswith("+dirty"), f"results/{name}.json: commit {commit}"
