"""The authors' attention table and norm curves in three settings (the replay of the released
code, the replay without its embedding block, our clean setting), 1,000 steps, 10 seeds:
results/reproduction_attention_{replay,no_embedding_block,clean}.json. Pass setting names to
run only some."""

import sys

from topicmech import reproduce, results

if __name__ == "__main__":
    for setting in sys.argv[1:] or ("replay", "no_embedding_block", "clean"):
        results.store(f"reproduction_attention_{setting}", reproduce.attention_table_metrics, range(10),
                      command=f"python scripts/results/reproduction_attention.py {setting}",
                      kwargs={"setting": setting, "steps": 1000}, n_jobs=1)
