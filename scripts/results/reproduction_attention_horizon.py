"""The three Adam rows of the authors' attention table in the page's three settings (replay, no
embedding block, clean), stopped at step 500 instead of 1,000, to check the verdicts at a
second horizon; 10 seeds, the same seeds as reproduction_attention.py, so each run is the
first 500 steps of a stored 1,000-step run: results/reproduction_attention_<setting>_h500.json."""

from topicmech import reproduce, results

ADAM_ROWS = [["adam", 0.003], ["adam", 0.01], ["adam", 0.03]]

if __name__ == "__main__":
    for setting in ("replay", "no_embedding_block", "clean"):
        results.store(f"reproduction_attention_{setting}_h500", reproduce.attention_table_metrics, range(10),
                      command="python scripts/results/reproduction_attention_horizon.py",
                      kwargs={"setting": setting, "steps": 500, "rows": ADAM_ROWS}, n_jobs=1)
