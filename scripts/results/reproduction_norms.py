"""The two switches that move the replay's weight norms towards the authors' two-stage figure,
1,000 steps, 10 seeds: the squared loss (the released code's no_softmax switch) with Adam at
0.003, results/reproduction_norms_squared.json; plain SGD at a large rate (1.0; 2.0 and 3.0 diverge on some seeds) with
cross-entropy, results/reproduction_norms_sgd_large.json. Pass "squared" or "sgd_large" to run
only one."""

import sys

from topicmech import reproduce, results

RUNS = {"squared": {"loss": "squared", "rows": [["adam", 0.003]]},
        "sgd_large": {"loss": "cross_entropy", "rows": [["sgd", 1.0]]}}

if __name__ == "__main__":
    for name in sys.argv[1:] or RUNS:
        results.store(f"reproduction_norms_{name}", reproduce.attention_table_metrics, range(10),
                      command=f"python scripts/results/reproduction_norms.py {name}",
                      kwargs={"setting": "replay", "steps": 1000, **RUNS[name]}, n_jobs=1)
