"""An additive vocabulary mask that is -inf in every column of the rows CrossEntropyLoss ignores: a finite first loss, NaN weights after its step, a NaN second loss.

Address: https://jkschin.com/blog/2023/cross-entropy-loss-ignore-index/
Title: Intricacies of nn.CrossEntropyLoss Ignore Index and Gradients

What went wrong: a GPT-style model's logits got an additive mask of -inf; the positions that are no
part of the target were -inf in every column, with their targets set to the ignore_index. The first
loss was a normal number, the second NaN.

Accepted answer (the author's own conclusion): ignore_index takes those rows out of the loss value,
not out of the backward. log_softmax of a row that is -inf everywhere is NaN there, and its
backward sends NaN into the weights even though the gradient arriving for that row is 0; the step
writes the NaN into the weights. Keep the -inf for the columns to mask, and use 0 (a finite value)
in the rows that are ignored.

The -inf of the mask is meant: an answer that calls it bad input data and suggests nan_to_num on
the mask would break the masking.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def ignored_rows_all_masked():
    torch.manual_seed(0)
    vocab, d = 6, 4
    body = nn.Linear(d, d)
    lm_head = nn.Linear(d, vocab)
    optimizer = torch.optim.SGD(list(body.parameters()) + list(lm_head.parameters()), lr=0.1)
    hidden_in = torch.randn(5, d)
    inf = float("inf")
    mask = torch.tensor([[0.0, 0.0, -inf, -inf, -inf, -inf], [0.0, 0.0, -inf, -inf, -inf, -inf],
                         [-inf] * 6, [-inf] * 6, [-inf] * 6])
    target = torch.tensor([1, 0, -1, -1, -1])
    losses = []
    with gl.trace() as tr:
        for _ in range(2):
            optimizer.zero_grad()
            logits = lm_head(torch.relu(body(hidden_in))) + mask
            loss = F.cross_entropy(logits, target, ignore_index=-1)
            losses.append(loss.item())
            loss.backward()
            optimizer.step()
    return lm_head, loss, losses, tr


def test_the_nan_loss_goes_back_to_the_masked_rows():
    """explain(loss, tr): the NaN came from the weights the first step wrote, whose gradient LogSoftmaxBackward0 made NaN from all -inf rows (masked_softmax); never the mask as bad data."""
    lm_head, loss, losses, tr = ignored_rows_all_masked()
    assert losses[0] == losses[0] and losses[1] != losses[1]
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "masked_softmax"),
           not_reasons=("nonfinite_input",), op="cross_entropy", line="F.cross_entropy(logits, target, ignore_index=-1)",
           says=("-inf at every position of a slice", "optimizer.step()"), never=("the input data",),
           fix=("large finite negative",), never_fix=("nan_to_num", "isfinite(mask)"))


def test_the_nan_weight_goes_back_to_the_masked_rows_too():
    """explain(lm_head.weight, tr): the same masked_softmax answer, with the step that wrote the NaN."""
    lm_head, loss, losses, tr = ignored_rows_all_masked()
    expect(gl.explain(lm_head.weight, tr), reasons=("nonfinite_parameter", "masked_softmax"), tensor="lm_head.weight",
           op="cross_entropy", says=("LogSoftmaxBackward0", "The loss of backward pass 1 was finite"),
           never_fix=("nan_to_num",))
