"""The fast paths on CUDA give the CPU's losses to float tolerance (marked ``gpu``).

Every test here is skipped without CUDA (the CI machine and the developers' laptops have none):
run ``pytest tests/test_gpu.py -m gpu`` on a machine with a GPU.
"""

from __future__ import annotations

import pytest
import torch

import topicmech as tm
from topicmech import fast
from topicmech.utils import default_device

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU tests need one")]

D = 21  # T = 4 topics of 5 words, plus [MASK]
RTOL, ATOL = 1e-4, 1e-5   # float32 on two devices: reductions round in a different order


def _pair(attention: str, attend_to_masked: bool) -> tuple[tm.OneLayerTransformer, tm.OneLayerTransformer]:
    kw = {"attention": attention, "value": "learned", "head": "identity", "attend_to_masked": attend_to_masked,
          "seed": 1}
    return tm.OneLayerTransformer(D, **kw), tm.OneLayerTransformer(D, **kw).to("cuda")


@pytest.fixture(scope="module")
def docs():
    return tm.LDATopicModel(num_topics=4, words_per_topic=5, alpha=0.3).sample(64, 30, seed=5)


def test_full_mode_selects_cuda(monkeypatch):
    monkeypatch.setenv("TOPICMECH_MODE", "full")
    assert default_device().type == "cuda"
    monkeypatch.setenv("TOPICMECH_MODE", "quick")
    assert default_device().type == "cpu"


@pytest.mark.parametrize("attention", ["uniform", "learned"])
@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("loss", ["cross_entropy", "squared"])
def test_fast_paths_give_the_cpu_losses_on_cuda(docs, attention, attend_to_masked, loss):
    cpu, gpu = _pair(attention, attend_to_masked)
    assert fast.fast_path(cpu) == fast.fast_path(gpu) == attention
    kw = dict(steps=40, batch_size=8, loss=loss, optimizer="adam", lr=0.01, seed=2)
    h_cpu, h_gpu = tm.train.train(cpu, docs, **kw), tm.train.train(gpu, docs, **kw)
    torch.testing.assert_close(torch.tensor(h_gpu.loss), torch.tensor(h_cpu.loss), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(gpu.W_V.detach().cpu(), cpu.W_V.detach(), rtol=1e-3, atol=1e-5)


def test_selected_loss_on_cuda_matches_the_cpu(docs):
    cpu, gpu = _pair("learned", False)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():   # attention far from uniform, the same on both devices
        for name in ("W_K", "W_Q"):
            getattr(cpu, name).normal_(generator=gen)
            getattr(gpu, name).copy_(getattr(cpu, name))
    gen = torch.Generator().manual_seed(0)
    inputs = docs[:16].clone()
    selected = torch.rand(inputs.shape, generator=gen) < 0.15
    inputs[selected] = D - 1
    on_cpu = fast.selected_loss(cpu, inputs, docs[:16], selected, "cross_entropy")
    on_gpu = fast.selected_loss(gpu, inputs.cuda(), docs[:16].cuda(), selected.cuda(), "cross_entropy")
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=RTOL, atol=ATOL)


def test_adam_is_fused_on_cuda():
    p = torch.nn.Parameter(torch.zeros(3, device="cuda"))
    assert fast.TorchOptimKernels([p], "adam", 0.01).fused
