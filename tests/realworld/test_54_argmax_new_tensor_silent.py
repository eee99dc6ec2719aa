"""A penalty built from argmax predictions and a new FloatTensor has no path to the model: it silently does nothing.

Address: https://github.com/Ugenteraan/Deep_Hierarchical_Classification/issues/6
Title: Gradient unable to backprop if we use argmax or torch.where

What went wrong: the hierarchical loss adds a dependency term dloss computed from argmax
predictions and from a freshly built FloatTensor (check_hierarchy). dloss is therefore a constant
with no path to the network; total = closs + beta * dloss trains exactly as if beta were 0,
silently, and the reporter saw identical updates for any beta.

Accepted answer (author agreed): argmax and the new tensor are not differentiable; the penalty must
be built from the probabilities with differentiable ops.

How D_l was built is seen by a trace; without one graphlens sees only that dloss has no history,
and must not propose backpropagating a sum of losses (total already is one) or making dloss a leaf.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def argmax_new_tensor_silent():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    labels = torch.tensor([0, 1, 2, 1, 0])
    logits = model(x)
    closs = nn.functional.cross_entropy(logits, labels)
    prev_lvl_pred = torch.argmax(logits, dim=1)
    D_l = torch.FloatTensor([float(p != l) for p, l in zip(prev_lvl_pred.tolist(), labels.tolist())])
    dloss = (D_l * 2.0).mean()
    beta = 0.8
    total = closs + beta * dloss
    total.backward()
    return model, dloss, total


def test_plain_answer_says_dloss_does_not_reach_the_weight():
    """explain(model.weight, dloss) says dloss does not depend on model.weight (the program: dloss has no grad_fn)."""
    model, dloss, total = argmax_new_tensor_silent()
    assert dloss.grad_fn is None
    expect(gl.explain(model.weight, dloss), reason="not_reachable", tensor="model.weight")


def test_plain_answer_on_dloss_says_it_does_not_require_grad():
    """explain(dloss, total) says dloss does not require grad."""
    model, dloss, total = argmax_new_tensor_silent()
    expect(gl.explain(dloss, total), reason="requires_grad_false", tensor="dloss")


def test_plain_answer_does_not_propose_summing_the_losses():
    """Without a trace, the fix does not propose backpropagating a sum of losses."""
    model, dloss, total = argmax_new_tensor_silent()
    expect(gl.explain(model.weight, dloss), never_fix=("(loss1 + loss2).backward()",), not_reasons=("feeds_other_root",))


def test_plain_fix_does_not_make_dloss_a_leaf():
    """Without a trace, the fix for dloss does not propose requires_grad on dloss itself."""
    model, dloss, total = argmax_new_tensor_silent()
    expect(gl.explain(dloss, total), never_fix=("dloss.requires_grad_()",))


def test_traced_answer_names_the_new_floattensor():
    """With a trace, explain(dloss, tr) names the values that left the graph (tolist) and came back in torch.FloatTensor."""
    with gl.trace() as tr:
        model, dloss, total = argmax_new_tensor_silent()
    expect(gl.explain(dloss, tr), reason="requires_grad_false", reasons=("cut_by_python_value",),
           op=("tolist", "FloatTensor", "torch.FloatTensor", "tensor"), line="torch.FloatTensor(")


def test_traced_lead_is_only_a_lead_and_names_d_l():
    """The traced answer says it read the code (a lead, not the graph), names D_l and gives the FloatTensor line."""
    with gl.trace() as tr:
        model, dloss, total = argmax_new_tensor_silent()
    e = gl.explain(dloss, tr)
    expect(e, says=("read your code", "D_l"), fix=("torch operations",), never_fix=("dloss.requires_grad_()",))
    assert e.lineno is not None and "FloatTensor" in e.line
