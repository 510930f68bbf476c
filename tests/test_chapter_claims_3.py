"""Multi-seed checks of chapter 3's claims (*Embeddings learn topic structure*).

Setting as in the chapter (quick mode): T=5, v=4, tau=2, N=20, BERT corruption
0.15/0.1/0.1, masked positions visible as keys (``attend_to_masked=True``), attention
frozen uniform, ``W_V = I``, only the embedding trained with Adam and the step-decayed
schedule :data:`topicmech.embeddings.DEFAULT_PHASES` (batch 256).

Claims, each for 5 seeds:

1. identity head: the learned embedding matrix lands on ``W*`` and its Gram matrix on
   ``W*^T W*`` (block means within stated tolerances);
2. tied head, for every d in the chapter (d < T, d = T, d > T, d = D): same-topic inner
   products exceed different-topic ones (by at least half the predicted gap) and the
   block means are within 0.02 of the closed-form optimum; at d = T same-topic
   embeddings are identical up to training error (relative spread < 0.05, and at least
   5 times smaller than at d = D);
3. cross-entropy: the same qualitative block structure (normalised gap > 0.5) for both
   heads.
"""

from __future__ import annotations

import numpy as np
import pytest

import topicmech as tm
from topicmech import embeddings as te
from topicmech import theory as th

T, V_PER, TAU, N = 5, 4, 2, 20
V, D = T * V_PER, T * V_PER + 1
ATTEND = True
DS = (2, 3, T, T + 3, D)
SEEDS = range(5)
TOL_TIED = 0.02       # block means of the learned Gram vs the closed-form optimum
TOL_ID_E = 0.005      # block means of the learned E vs W* (identity head)
TOL_ID_GRAM = 0.01    # block means of the learned Gram vs W*^T W* (identity head)
SPREAD_MAX = 0.05     # relative within-topic spread at d = T


@pytest.fixture(scope="module")
def prediction():
    Sigma, C = th.moments(T, V_PER, TAU, N, attend_to_masked=ATTEND)
    W = th.optimal_value_matrix(T, V_PER, TAU, N, attend_to_masked=ATTEND)
    tied = {d: te.tied_embedding_blocks(Sigma, C, T, V_PER, d) for d in DS}
    return {"Sigma": Sigma, "C": C, "W": W, "tied": tied}


def _train(d, head, seed, loss="squared"):
    model = te.embedding_model(D, d, head=head, attend_to_masked=ATTEND, seed=seed)
    te.train_in_phases(model, tm.SimplifiedTopicModel(T, V_PER, TAU), doc_len=N, loss=loss, seed=seed)
    return model


def _means(M):
    b = th.orbit_means(np.asarray(M, dtype=float), T, V_PER)
    return np.array([b.diag, b.same_topic, b.diff_topic, b.mask_col])


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_identity_head_lands_on_W_star(prediction, seed):
    model = _train(D, "identity", seed)
    E = model.W_E.detach().double().numpy()
    G = model.embedding_gram().detach().double().numpy()
    W = prediction["W"]
    err_E = np.abs(_means(E) - _means(W)).max()
    err_G = np.abs(_means(G) - _means(W.T @ W)).max()
    assert err_E < TOL_ID_E, (seed, err_E)
    assert err_G < TOL_ID_GRAM, (seed, err_G)
    b = th.orbit_means(G, T, V_PER)
    assert b.same_topic - b.diff_topic > 0.5 * (_means(W.T @ W)[1] - _means(W.T @ W)[2]), seed


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_tied_head_every_d(prediction, seed):
    spreads = {}
    for d in DS:
        model = _train(d, "tied", seed)
        G = model.embedding_gram().detach().double().numpy()
        pred = prediction["tied"][d]
        got = _means(G)
        want = np.array([pred.diag, pred.same_topic, pred.diff_topic, pred.mask_col])
        assert np.abs(got - want).max() < TOL_TIED, (seed, d, got, want)
        assert got[1] - got[2] > 0.5 * pred.topic_gap > 0, (seed, d, got)
        spreads[d] = te.topic_spread(model.W_E, V_PER)
    assert spreads[T] < SPREAD_MAX, (seed, spreads)
    assert spreads[D] > 5 * spreads[T], (seed, spreads)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_same_block_structure(seed):
    for head, d in (("identity", D), ("tied", T)):
        model = _train(d, head, seed, loss="cross_entropy")
        G = te.normalized_gram(model.embedding_gram(), V_PER)
        b = th.orbit_means(G, T, V_PER)
        assert b.same_topic - b.diff_topic > 0.5, (seed, head, b)
