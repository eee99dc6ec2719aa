"""A test text embedder returns an embedding's output with its graph; the dataset stores those features once, and the second step's backward goes into the freed graph.

Address: https://github.com/pyg-team/pytorch-frame/pull/229
Title: Add `detach()` to `HashTextEmbedder`

What went wrong: materialising a text column called the embedder once and kept its output, which
carried the nn.Embedding's graph; training drew mini-batches from that tensor, so every step's loss
went back into the same graph, which the first backward freed.

Accepted answer: (the pull request) the embedder is a pre-encoding, not part of the network: return
its output detached.

With the whole program traced, graphlens sees the features made once, by the materialisation line:
the fix must name the tensor the dataset object keeps, not call detach() on the dataset.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class HashTextEmbedder:
    def __init__(self, out_channels, bins=16):
        self.bins = bins
        self.embedding = nn.Embedding(bins, out_channels)

    def __call__(self, sentences):
        return self.embedding(torch.tensor([sum(map(ord, s)) % self.bins for s in sentences]))


class TextDataset:
    def __init__(self, texts, y, embedder):
        self.texts, self.y, self.embedder = texts, y, embedder

    def materialize(self):
        self.feat = self.embedder(self.texts)  # (computed once, kept for every epoch)
        return self


def test_traced_fix_detaches_the_tensor_the_dataset_keeps():
    """graph_freed + graph_built_once at the materialisation line; the fix detaches dataset.feat, never the dataset object."""
    try:
        with gl.trace(explain_errors=True) as tr:
            torch.manual_seed(0)
            texts = [f"row number {i} says {'abc'[i % 3]}" for i in range(12)]
            dataset = TextDataset(texts, torch.randn(12), HashTextEmbedder(4)).materialize()
            model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for start in (0, 6, 0, 6):
                loss = nn.functional.mse_loss(model(dataset.feat[start:start + 6]).view(-1), dataset.y[start:start + 6])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    except RuntimeError as exc:
        e = gl.explain_error(exc, tr)
    else:
        raise AssertionError("the program no longer raises")
    expect(e, reason="graph_freed", reasons=("graph_built_once",), fix=("dataset.feat = dataset.feat.detach()",),
           never_fix=("dataset = dataset.detach()",))
