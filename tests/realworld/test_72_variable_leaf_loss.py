"""Variable(loss, requires_grad=True) silences the error but makes the loss a leaf: the model never learns.

Address: https://github.com/huggingface/torchMoji/issues/21
Title: loss don't go down when finetune and about requires_grad option in backward()

What went wrong: fine-tuning failed with "element 0 of tensors does not require grad and does not have
a grad_fn", so the poster wrapped the loss in Variable(loss, requires_grad=True). The error went away
but the validation loss stayed the same epoch after epoch: the model's outputs had been taken with
outputs.data, so the loss had no graph, and the wrapper only made a new leaf.

Accepted answer (tomgun132): remove the `outputs = outputs.data` lines in the model; the loss then
keeps its graph and the model trains (the Variable wrapper is not needed).

The loss is a leaf that requires grad: backward from it reaches nothing but itself. That is a fact of
the graph, said even without a trace; how it became one (the wrapper) and where the graph was cut
(.data) are read from the code.
"""

import pytest
import torch
from torch import nn
from torch.autograd import Variable

import graphlens as gl
from _helpers import expect


def finetune_step():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    outputs = model(x)
    outputs = outputs.data
    loss = nn.functional.cross_entropy(outputs, y)
    loss = Variable(loss, requires_grad=True)
    loss.backward()
    return model, loss


def test_program_runs_and_the_model_gets_nothing():
    """The program itself: backward runs, loss.grad is 1, the model's weight gets no gradient."""
    model, loss = finetune_step()
    assert loss.grad is not None and model.weight.grad is None


def test_says_the_loss_is_a_leaf():
    """explain(model.weight, loss): not_reachable + leaf_root, saying the loss is a leaf whose backward reaches only itself."""
    model, loss = finetune_step()
    expect(gl.explain(model.weight, loss), reason="not_reachable", tensor="model.weight", reasons=("leaf_root",),
           says=("loss is a leaf", "reaches nothing but loss"))


def test_names_the_wrapper_and_the_data_cut():
    """The answer reads the wrapper line (a new leaf) and blames .data, and its fix removes .data."""
    model, loss = finetune_step()
    expect(gl.explain(model.weight, loss), reasons=("cut_by_detach",), says=("Variable(loss, requires_grad=True)", "data"),
           fix=(".data",))


def test_traced_answer_agrees():
    """With a trace, the loss is still a leaf (leaf_root) and the .data cut is seen, not read."""
    with gl.trace() as tr:
        model, loss = finetune_step()
    expect(gl.explain(model.weight, tr), reason="not_reachable", reasons=("leaf_root", "cut_by_detach"),
           says=("leaf",), fix=(".data",))
