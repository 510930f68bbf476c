"""The authors' two SGD rows of the attention table (SGD 0.01 and 0.03, cross-entropy) in the
replay, started from the released code's default initialisation (PyTorch's, without
zero_init_attn) rather than the small one, and run for 5,000 steps (the released code's
default length: 20 epochs of 250 batches), with the attention also read at steps 1,000 and
3,000; 10 seeds: results/reproduction_attention_sgd_torch_init.json (about 10 minutes on 2
cores)."""

from topicmech import reproduce, results

if __name__ == "__main__":
    results.store("reproduction_attention_sgd_torch_init", reproduce.attention_table_metrics, range(10),
                  command="python scripts/results/reproduction_attention_sgd.py",
                  kwargs={"setting": "replay", "steps": 5000, "rows": [["sgd", 0.01], ["sgd", 0.03]],
                          "zero_init_noise": None, "attention_at": [1000, 3000]}, n_jobs=1)
