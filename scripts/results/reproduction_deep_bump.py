"""The early bump of W^K, W^Q in the 4-layer run (the run of reproduction_deep.py, same seeds,
with the matrices kept): its height, its fall and its direction, 10 seeds:
results/reproduction_deep_bump.json."""

from topicmech import reproduce, results

if __name__ == "__main__":
    results.store("reproduction_deep_bump", reproduce.deep_bump_metrics, range(10),
                  command="python scripts/results/reproduction_deep_bump.py",
                  kwargs={"steps": 400}, n_jobs=1)
