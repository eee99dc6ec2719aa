"""Link prediction on node embeddings: the score is rounded before the BCE loss, so the 80-element embedding table gets an all-zero gradient and the loss never moves.

Address: https://go-mk-websites.co.uk/post/the-loss-in-gnn-doesnt-decrease
Title: Why Your GNN Training Isn't Working: Understanding Gradient Flow and Edge Embeddings

What went wrong: score = sigmoid(dot(emb[u], emb[v])).round() feeds BCELoss; the loss stays the same
epoch after epoch. round() is a step function: its derivative is 0, so every gradient that reaches
the embedding is 0.

Accepted answer: (the post) remove round() from the training path and give the loss the
probabilities; round only to measure accuracy.

The gradient is all zeros, but the table has 80 elements: more than a record's head shows. The
answer must still say it is zero and why (it once said only "grad is set").
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def train(emb, optimizer, edges, labels, epochs=3):
    for _ in range(epochs):
        optimizer.zero_grad()
        score = torch.sum(emb(edges[0]) * emb(edges[1]), dim=1)
        score = torch.sigmoid(score).round()
        loss = nn.functional.binary_cross_entropy(score, labels)
        loss.backward()
        optimizer.step()
    return loss


def setup():
    torch.manual_seed(0)
    edges, labels = torch.randint(0, 10, (2, 12)), (torch.rand(12) > 0.5).float()
    emb = nn.Embedding(10, 8)
    return emb, torch.optim.SGD(emb.parameters(), lr=0.1), edges, labels


@pytest.mark.parametrize("how", ("plain", "traced"))
def test_says_the_gradient_is_zero_because_of_round(how):
    """Both ways: zero_derivative at RoundBackward0; traced, also the line that rounds."""
    emb, optimizer, edges, labels = setup()
    if how == "plain":
        loss = train(emb, optimizer, edges, labels)
        e = gl.explain(emb.weight, loss)
    else:
        with gl.trace() as tr:
            train(emb, optimizer, edges, labels, epochs=1)
        e = gl.explain(emb.weight, tr)
    assert emb.weight.numel() == 80 and not emb.weight.grad.any()
    expect(e, reasons=("zero_derivative",), op=("RoundBackward0", "round"), says=("zero",), fix=("straight-through",))
    if how == "traced":
        expect(e, line=".round()")


def test_a_nonzero_gradient_is_not_called_zero():
    """Without round() the same table gets a real gradient: no zero_derivative is claimed."""
    emb, optimizer, edges, labels = setup()
    optimizer.zero_grad()
    loss = nn.functional.binary_cross_entropy(torch.sigmoid(torch.sum(emb(edges[0]) * emb(edges[1]), dim=1)), labels)
    loss.backward()
    expect(gl.explain(emb.weight, loss), reason="grad_ok", not_reasons=("zero_derivative",))
