"""Stored results (``results/*.json``): the writer and reader, and every stored file checked
against what its recorded function computes now, on its first seed."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from topicmech import results

ROOT = Path(__file__).resolve().parents[1]


def toy_metric(seed: int, *, scale: float = 1.0) -> dict:
    """A module-level function of a seed, as stored results need."""
    return {"value": scale * (seed + 1), "even": seed % 2 == 0, "curve": [seed, 2 * seed]}


def test_store_load_rerun_round_trip(tmp_path, monkeypatch):
    monkeypatch.delenv("TOPICMECH_SEED_OFFSET", raising=False)  # exact rerun at the stored seeds
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


def test_every_stored_file_ships_with_the_package():
    """pyproject.toml maps results/ to the package topicmech.stored and ships its JSON files as
    package data, so that an installed package (an exported notebook on Colab) finds them."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "topicmech.stored" in tool["packages"], tool["packages"]
    assert tool["package-dir"]["topicmech.stored"] == "results", tool["package-dir"]
    patterns = tool["package-data"]["topicmech.stored"]
    files = sorted(p.name for p in (ROOT / "results").glob("*.json"))
    assert files, "no results/*.json"
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"results/ files the package would not ship: {missing}"


def test_benchmark_records_ship_with_the_package_and_load():
    """benchmarks/results/*.json ships as topicmech.stored_benchmarks, and results.benchmark
    reads a record (chapters 5 and 8 read tied_attention) or names the folders it looked in."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "topicmech.stored_benchmarks" in tool["packages"], tool["packages"]
    assert tool["package-dir"]["topicmech.stored_benchmarks"] == "benchmarks/results"
    assert tool["package-data"]["topicmech.stored_benchmarks"] == ["*.json"]
    record = results.benchmark("tied_attention")
    assert record == json.loads((ROOT / "benchmarks" / "results" / "tied_attention.json").read_text())
    with pytest.raises(FileNotFoundError, match="no benchmark record nothing_here.json"):
        results.benchmark("nothing_here")
    with pytest.raises(ValueError, match="file stem"):
        results.benchmark("tied_attention.json")


def test_load_looks_in_order_and_names_where_it_looked(tmp_path, monkeypatch):
    """TOPICMECH_RESULTS first, then the repository's results/; a missing file names every folder."""
    monkeypatch.setenv("TOPICMECH_RESULTS", str(tmp_path))
    where = results.locations()
    assert [label for label, _ in where][:2] == ["TOPICMECH_RESULTS", "the repository's results/"]
    assert where[0][1] == tmp_path and where[1][1] == ROOT / "results"
    name = STORED[0]
    assert results.load(name).seeds                      # not in tmp_path: found in results/
    shadow = json.loads((ROOT / "results" / f"{name}.json").read_text())
    shadow["per_seed"] = shadow["per_seed"][:1]
    (tmp_path / f"{name}.json").write_text(json.dumps(shadow))
    assert len(results.load(name).per_seed) == 1         # TOPICMECH_RESULTS wins
    with pytest.raises(FileNotFoundError, match=f"nothing_here.json; looked in TOPICMECH_RESULTS: {tmp_path}"):
        results.load("nothing_here")
    with pytest.raises(ValueError, match="file stem"):
        results.load("ch3_seeds.json")


@pytest.mark.slow
def test_the_built_wheel_reads_its_own_copy(tmp_path):
    """Build the wheel from a copy of the package files, install it into a folder outside the
    repository, and load every stored result there with no TOPICMECH_RESULTS (about 15 s)."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the wheel without network needs setuptools in this environment")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("topicmech", "results", "benchmarks/results"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("topicmech-*.whl"))
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "TOPICMECH_RESULTS"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    script = ("import json, topicmech, topicmech.results as r\n"
              "names = sorted(p.name[:-5] for p in r.RESULTS_DIR.iterdir() if p.name.endswith('.json'))\n"
              "print(json.dumps({'file': topicmech.__file__, 'where': [w for w, _ in r.locations()],\n"
              "                  'names': names, 'loaded': [r.load(n).name for n in names],\n"
              "                  'tied': r.benchmark('tied_attention')['setting']}))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True)
    got = json.loads(out.stdout)
    assert got["file"].startswith(str(tmp_path / "site")), got["file"]
    assert got["where"] == ["the copy installed with the package"], got["where"]
    assert got["names"] == got["loaded"] == STORED
    assert got["tied"]["doc_len"] == 32, got["tied"]                # a benchmark record too
