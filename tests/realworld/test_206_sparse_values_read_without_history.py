"""A GCN normalises a torch sparse adjacency built from learned edge weights, reading its values with _values(): the edge weights never get a gradient.

Address: https://github.com/pyg-team/pytorch_geometric/pull/6635
Title: Fix `gcn_norm` for PyTorch SparseTensor input with gradients

What went wrong: gcn_norm read the sparse adjacency's indices with _indices() and its values with
_values(), which returns them without their history (like .data); the normalised adjacency had no
graph back to the learned edge weights.

Accepted answer: (the pull request) read the values with adj.coalesce().values(), which keeps the graph.

The indices (an integer result) are structure, not values: the cut is where the values lost their history.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


def gcn_norm(adj_t):
    n = adj_t.size(0)
    loop = torch.arange(n)
    adj_t = (adj_t + torch.sparse_coo_tensor(torch.stack([loop, loop]), torch.ones(n), (n, n))).coalesce()
    row, col = adj_t._indices()
    value = adj_t._values()
    deg = torch.zeros(n).scatter_add(0, col, value)
    value = deg.pow(-0.5)[row] * value * deg.pow(-0.5)[col]
    return torch.sparse_coo_tensor(adj_t._indices(), value, (n, n))


class EdgeWeightedGCN(nn.Module):
    def __init__(self, num_edges):
        super().__init__()
        self.edge_logits = nn.Parameter(torch.zeros(num_edges))
        self.lin = nn.Linear(3, 2, bias=False)

    def forward(self, x, edge_index):
        adj = torch.sparse_coo_tensor(edge_index, torch.sigmoid(self.edge_logits), (x.size(0), x.size(0))).coalesce()
        return torch.sparse.mm(gcn_norm(adj), self.lin(x))


def test_traced_answer_names_values_not_indices():
    """The cut is _values at its line, fixed with coalesce().values(); never the integer _indices."""
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 3, 1, 2], [1, 2, 3, 0, 0, 1]])
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    model = EdgeWeightedGCN(edge_index.size(1))
    with gl.trace() as tr:
        loss = ((model(x, edge_index) - y) ** 2).mean()
        loss.backward()
    assert model.edge_logits.grad is None and model.lin.weight.grad is not None
    expect(gl.explain(model.edge_logits, tr), reason="not_reachable", op="_values", line="adj_t._values()",
           not_reasons=("cut_by_integer_op", "requires_grad_set_late"), fix=("coalesce().values()",), never=("int64",))
