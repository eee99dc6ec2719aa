"""EvolveGCN-O wraps the weight its LSTM evolved into a fresh nn.Parameter every forward: the LSTM never gets a gradient.

Address: https://github.com/benedekrozemberczki/pytorch_geometric_temporal/issues/80
Title: [Bug?] the way to set GCN.weight in EvolveGCN.

What went wrong: the model runs the GCN's weight through an LSTM and assigns the result back with
`self.conv_layer.weight = torch.nn.Parameter(W.squeeze())`. The new Parameter is a leaf made from the
LSTM's output: the loss reaches that leaf and stops, so the LSTM's weights never get a gradient.

Accepted answer: (the maintainers' fix) keep the evolved weight a plain tensor and pass it to the
graph convolution, instead of making it a module Parameter.

The trace sees the LSTM's output go nowhere and a leaf holding exactly its value in the loss's graph:
no other loss is involved, so "backpropagate the other output too" would be wrong.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class Conv(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) * 0.3)

    def forward(self, x, adj):
        return adj @ (x @ self.weight)


class EvolveGCNO(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.recurrent_layer = nn.LSTM(input_size=n, hidden_size=n, num_layers=1)
        self.conv_layer = Conv(n)

    def forward(self, x, adj):
        W, _ = self.recurrent_layer(self.conv_layer.weight[None, :, :])
        self.conv_layer.weight = torch.nn.Parameter(W.squeeze())
        return self.conv_layer(x, adj)


def test_traced_answer_names_the_new_leaf_not_another_root():
    """rewrapped_as_leaf: the LSTM output's value became model.conv_layer.weight, a new leaf; never feeds_other_root or '(loss1 + loss2)'."""
    torch.manual_seed(0)
    x, adj, y = torch.randn(5, 4), torch.eye(5), torch.randn(5, 4)
    model = EvolveGCNO(4)
    with gl.trace() as tr:
        cost = ((model(x, adj) - y) ** 2).mean()
        cost.backward()
    w = model.recurrent_layer.weight_ih_l0
    assert w.grad is None
    expect(gl.explain(w, tr), reason="not_reachable", reasons=("rewrapped_as_leaf",), not_reasons=("feeds_other_root",),
           says=("model.conv_layer.weight", "no history"), fix=("nn.Parameter",), never_fix=("loss1 + loss2",))
