"""A structure attack on a GCN backpropagates through the layer's cached edge normalisation: the cache was computed in the first step from the perturbed edge weights, and the next step's backward goes back into that freed graph.

Address: https://github.com/sigeisler/robustness_of_gnns_at_scale/issues/4
Title: self.attacked_model.train() leads to autograd error

What went wrong: the PR-BCD attack's second step raises "Trying to backward through the graph a
second time".

Accepted answer (the maintainer's, confirmed by the reporter): switch off the GCN's caching: the layer
caches its normalised edge weights, computed in the first step from the edge weights that require grad,
and reuses them in the next step.

The answer names the module's cache (model._cached_norm) as the tensor that carries the old graph and
gives the fix of turning the caching off; never logits.detach() (which would cut the attack's gradient)
and never a tensor "computed once, before the loop".
"""

import pytest
import torch
import torch.nn as nn

from _helpers import HOW, expect, explained

N = 5
EDGES = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])


class GCNConv(nn.Module):
    def __init__(self, i, o, cached=True):
        super().__init__()
        self.lin = nn.Linear(i, o)
        self.cached = cached
        self._cached_norm = None

    def forward(self, x, edge_index, edge_weight):
        if self.cached and self._cached_norm is not None:
            norm = self._cached_norm
        else:
            deg = torch.zeros(N).index_add(0, edge_index[1], edge_weight) + 1.0
            norm = edge_weight * deg[edge_index[0]].rsqrt() * deg[edge_index[1]].rsqrt()
            if self.cached:
                self._cached_norm = norm
        h = self.lin(x)
        out = torch.zeros_like(h).index_add(0, edge_index[1], h[edge_index[0]] * norm[:, None])
        return out + h


def attack(steps=2):
    torch.manual_seed(0)
    model = GCNConv(3, 2)
    x, y = torch.randn(N, 3), torch.tensor([0, 1, 0, 1, 0])
    perturbed_edge_weight = torch.full((EDGES.shape[1],), 0.5, requires_grad=True)
    for step in range(steps):
        logits = model(x, EDGES, perturbed_edge_weight)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        with torch.no_grad():
            perturbed_edge_weight += 0.1 * perturbed_edge_weight.grad
            perturbed_edge_weight.grad = None


@pytest.mark.parametrize("how", HOW)
def test_names_the_layers_cache_and_turns_it_off(how):
    """explain(err): model._cached_norm carries the first step's graph; the fix turns the caching off, never logits.detach()."""
    expect(explained(attack, how), reason="graph_freed", tensor="model._cached_norm", says=("keeps between calls",),
           fix=("caching off",), never_fix=("logits.detach()",), never=("before the loop",))
