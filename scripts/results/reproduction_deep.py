"""The authors' 4-layer norm plot: a 4-layer encoder trained with Adam at 1e-3 for 400 steps, each
seed on a fresh corpus, 10 seeds: results/reproduction_deep.json."""

from topicmech import reproduce, results

if __name__ == "__main__":
    results.store("reproduction_deep", reproduce.deep_norm_metrics, range(10),
                  command="python scripts/results/reproduction_deep.py",
                  kwargs={"steps": 400}, n_jobs=1)
