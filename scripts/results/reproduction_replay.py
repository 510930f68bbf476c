"""The released code's demonstration configuration replayed (uniform attention, 5,000 steps),
10 seeds: results/reproduction_replay_demo.json."""

from topicmech import reproduce, results

if __name__ == "__main__":
    results.store("reproduction_replay_demo", reproduce.released_code_metrics, range(10),
                  command="python scripts/results/reproduction_replay.py",
                  kwargs={"attention": "uniform", "steps": 5000}, n_jobs=1)
