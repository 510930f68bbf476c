"""Embeddings with every component trained, in the four (loss, optimizer) settings, 1,000 steps,
each seed on a fresh corpus, 10 seeds: results/reproduction_embeddings.json."""

from topicmech import reproduce, results

if __name__ == "__main__":
    results.store("reproduction_embeddings", reproduce.all_trained_metrics, range(10),
                  command="python scripts/results/reproduction_embeddings.py",
                  kwargs={"steps": 1000}, n_jobs=1)
