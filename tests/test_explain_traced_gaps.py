"""Traced explanations say what the trace saw and no more: unused outputs, accumulated and tied gradients, changes after the block, custom Functions, create_graph, anomaly mode's NaN."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import graphlens as gl
from graphlens.explain.premises import check


def _holds(e):
    """The explanation states no premise its graph contradicts."""
    assert check(e) == [], check(e)
    return e


# -- an output the loss does not use ----------------------------------------------------------
def test_lstm_final_state_the_loss_does_not_use_is_named_so():
    """explain(hn, tr) for an LSTM whose loss uses only out: hn is an output the loss does not use; no advice to trace."""
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 5, batch_first=True)
    x = torch.randn(2, 3, 4)
    with gl.trace(module=lstm) as tr:
        out, (hn, cn) = lstm(x)
        loss = out[:, -1].sum()
        loss.backward()
    e = _holds(gl.explain(hn, tr))
    assert e.reasons[:2] == ("not_reachable", "unused_output"), e.reasons
    assert "an output of lstm" in str(e) and "computed from out" in str(e)
    assert "graphlens.trace()" not in str(e) and "Nothing is wrong if hn is not needed" in e.fix


# -- gradients summed over passes, and over the uses of a tied weight ----------------------------
def _two_passes(clear: bool):
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    x, y = torch.randn(3, 2), torch.randn(3, 1)
    with gl.trace() as tr:
        for _ in range(2):
            if clear:
                model.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
    return model, tr


def test_two_traced_passes_without_zero_grad_say_the_gradient_is_a_sum():
    """With a trace, two backward passes without zero_grad keep the accumulation message: a sum of 2 passes, fix zero_grad()."""
    model, tr = _two_passes(clear=False)
    e = _holds(gl.explain(model.weight, tr))
    assert e.reason == "grad_ok"
    assert "2 backward passes add to" in str(e) and "zero_grad()" in e.fix


def test_passes_with_zero_grad_between_are_not_called_a_sum():
    """zero_grad() between the passes: the traced answer does not say the gradient is a sum."""
    model, tr = _two_passes(clear=True)
    e = gl.explain(model.weight, tr)
    assert e.reason == "grad_ok" and "backward passes add to" not in str(e)


def test_tied_gpt2_embedding_and_head_are_reached_two_ways():
    """GPT-2's transformer.wte.weight is lm_head.weight: its gradient's answer names both and the two ways it is reached."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    assert model.transformer.wte.weight is model.lm_head.weight
    ids = torch.randint(0, 16, (1, 5))
    with gl.trace(module=model) as tr:
        loss = model(ids, labels=ids).loss
        loss.backward()
    for e in (gl.explain(model.lm_head.weight, tr), gl.explain(model.transformer.wte.weight, loss)):
        _holds(e)
        assert "tied_parameter" in e.reasons, e.reasons
        assert "transformer.wte.weight, lm_head.weight" in str(e) and "two ways" in str(e)
        assert "EmbeddingBackward0" in str(e) and "TBackward0" in str(e)


def test_a_parameter_used_twice_but_registered_once_is_not_tied():
    """A weight used at two steps of a loop is one registration: no tied_parameter."""
    lin = nn.Linear(2, 2)
    x = torch.ones(1, 2)
    loss = lin(lin(x)).sum()
    loss.backward()
    assert "tied_parameter" not in gl.explain(lin.weight, loss).reasons


# -- what happened after the block ----------------------------------------------------------------
def test_a_change_after_the_block_is_not_called_a_data_alias():
    """w.sub_(...) under no_grad after the block: the answer says the version moved after the trace ended, never ".data"."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    with gl.trace() as tr:
        loss = (w * x).sum()
        loss.backward()
    with torch.no_grad():
        w.sub_(0.5)
    e = _holds(gl.explain(w, tr))
    assert e.reasons == ("grad_ok", "changed_after_trace"), e.reasons
    assert "modified_through_data" not in e.reasons and ".data" not in str(e)
    assert "after the trace's block ended (its version counter went from 0 to 1)" in str(e)


def test_an_infinite_value_written_after_the_block_says_when():
    """w.sub_(inf) after the block: the value the trace saw, and that the version moved after the block ended."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        loss = (w * 3).sum()
        loss.backward()
    with torch.no_grad():
        w.sub_(float("inf"))
    e = gl.explain(w, tr)
    assert e.reasons[:2] == ("nonfinite_forward", "nonfinite_unseen"), e.reasons
    assert "it held [1, 2]" in str(e) and "after the trace's block ended" in str(e) and "or through .data" not in str(e)


def test_a_graph_asked_for_after_the_block_records_no_new_version():
    """tr.graph() after an in-place change made after the block holds one record of w, not a second one."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        loss = (w * 2).sum()
        loss.backward()
    with torch.no_grad():
        w.mul_(2)
    assert len(tr.graph().find_all("w")) == 1 and loss.grad_fn is not None


# -- custom autograd.Function ------------------------------------------------------------------
class _ScaleAndMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        scale = x.abs().max()
        ctx.mark_non_differentiable(scale)
        return x * 2, scale

    @staticmethod
    def backward(ctx, gy, gscale):
        return gy * 2


class _Sort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        vals, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return vals, idx

    @staticmethod
    def backward(ctx, gv, gi):
        idx, = ctx.saved_tensors
        return torch.zeros_like(gv).scatter_(0, idx, gv)


def test_custom_function_forward_is_its_own_region_not_no_grad():
    """The ops of a Function's forward are recorded in a region named after it; a no_grad block right after stays no_grad."""
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y, scale = _ScaleAndMax.apply(x)
        with torch.no_grad():
            z = y * 2
    g = tr.graph()
    assert g.find("scale").region.startswith("_ScaleAndMax.forward#")
    assert g.find("z").region.startswith("no_grad#")


def test_non_differentiable_output_of_a_custom_function_is_not_blamed_on_no_grad():
    """explain(scale, tr) for a ctx.mark_non_differentiable output: the Function's choice, never "out of torch.no_grad()"."""
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y, scale = _ScaleAndMax.apply(x)
        loss = (y / scale).sum()
        loss.backward()
    e = _holds(gl.explain(scale, tr))
    assert e.reasons == ("requires_grad_false", "custom_fn_non_differentiable"), e.reasons
    assert "created_in_no_grad" not in e.reasons and "outside torch.no_grad()" not in (e.fix or "")
    assert "mark_non_differentiable" in str(e) and "_ScaleAndMax" in e.fix


def test_backward_on_a_non_differentiable_output_names_the_function():
    """scale.backward() on a marked output: no_grad_fn with the Function's forward as the cut, never a no_grad block fix."""
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        with gl.trace() as tr:
            y, scale = _ScaleAndMax.apply(x)
            scale.backward()
    e = _holds(gl.explain_error(info.value, tr))
    assert e.reasons[:2] == ("no_grad_fn", "custom_fn_non_differentiable"), e.reasons
    assert "no_grad() block" not in (e.fix or "") and "mark_non_differentiable" in e.fix


def test_integer_output_of_a_custom_function_gets_no_float_copy_fix():
    """explain(idx, tr) for sort indices returned by a Function: integer and the Function's; no .float().requires_grad_() fix."""
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        vals, idx = _Sort.apply(x)
        (vals * torch.arange(3.0)).sum().backward()
    e = _holds(gl.explain(idx, tr))
    assert e.reasons == ("requires_grad_false", "custom_fn_non_differentiable", "integer_dtype"), e.reasons
    assert ".float().requires_grad_()" not in e.fix


def test_reentrant_checkpoint_region_stays_no_grad():
    """The reentrant checkpoint (itself a custom Function) computes under no_grad: its region keeps that name."""
    from torch.utils.checkpoint import checkpoint

    lin = nn.Linear(2, 2)
    x = torch.ones(1, 2, requires_grad=True)
    with gl.trace() as tr:
        out = checkpoint(lin, x, use_reentrant=True)
    regions = {o.region for o in tr.graph().ops if o.region}
    assert regions and all(r.startswith("no_grad#") for r in regions), regions


# -- create_graph, as the trace saw it ---------------------------------------------------------
def _penalty(critic, x, create):
    x = x.clone().requires_grad_(True)
    grads, = torch.autograd.grad(critic(x).sum(), x, create_graph=create)
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


def test_create_graph_passed_as_a_variable_is_read_from_the_trace():
    """create_graph=flag with flag False: the trace recorded the call's create_graph, so the answer is grad_without_create_graph."""
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(2, 3)
    use_graph = False
    with pytest.raises(RuntimeError) as info:
        with gl.trace() as tr:
            gp = _penalty(critic, x, use_graph)
            gp.backward()
    assert tr._rec.pass_created == [False, False]  # (the autograd.grad call, then the failing backward)
    e = _holds(gl.explain_error(info.value, tr))
    assert e.reasons[:2] == ("no_grad_fn", "grad_without_create_graph"), e.reasons
    assert "The trace saw the torch.autograd.grad call made without create_graph=True" in str(e)
    assert "create_graph=True" in e.fix
    plain = gl.explain_error(info.value)
    assert "gradient_without_graph" in plain.reasons  # (the code alone cannot say which)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_create_graph_is_recorded_per_pass():
    """loss.backward(create_graph=True) then a plain backward: the trace records True then False."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        (w ** 2).sum().backward(create_graph=True)
        (w * 3).sum().backward()
    assert tr._rec.pass_created == [True, False]


# -- anomaly mode's NaN, with the trace's records ---------------------------------------------
def _root_of_square():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.set_detect_anomaly(True):
            d = (x - 1) ** 2
            r = torch.sqrt(d)
            r.sum().backward()


def test_anomaly_nan_traced_names_the_node_that_first_sent_inf():
    """PowBackward0 returned NaN, but SqrtBackward0 sent inf first: the traced answer names sqrt, its line and the abs() fix."""
    with pytest.raises(RuntimeError) as info:
        with gl.trace() as tr:
            _root_of_square()
    e = _holds(gl.explain_error(info.value, tr))
    assert "PowBackward0" in str(info.value)
    assert e.reasons[:2] == ("anomaly_nan", "nonfinite_backward") and e.op == "SqrtBackward0", (e.reasons, e.op)
    assert e.line == "r = torch.sqrt(d)" and e.tensor_name == "r"
    assert "anomaly mode checks for NaN, not for inf" in str(e) and "abs()" in e.fix


def test_anomaly_nan_plain_does_not_blame_a_square():
    """Without a trace, PowBackward0 of x ** 2 is not said to have an undefined derivative: an inf came from before it."""
    with pytest.raises(RuntimeError) as info:
        _root_of_square()
    e = gl.explain_error(info.value)
    assert e.reason == "anomaly_nan" and e.op == "PowBackward0" and e.line == "d = (x - 1) ** 2"
    assert "power below 1" not in str(e) and "this node's own derivative" not in str(e)
    assert "(x ** 2) is finite" in str(e) and "graphlens.trace()" in e.fix


# -- a write through a detach() alias, which autograd does track ----------------------------------
def _view_changed_through_detach(backward: bool):
    """A view retaining its grad, changed in place through d1 = h0.detach() after tanh used it (tanh saved
    its result, not h0: backward needs no changed value and raises nothing)."""
    with gl.trace() as tr:
        w0 = torch.tensor([1.0], requires_grad=True)
        h0 = w0[0]
        d1 = h0.detach()
        h0.retain_grad()
        loss = h0.tanh().sum()
        d1.add_(1.0)
        if backward:
            loss.backward()
    return tr, h0, w0


@pytest.mark.parametrize("who", ["h0", "w0"])
def test_a_change_through_detach_is_not_called_a_silent_data_change(who):
    """The version counter moved (detach shares it): the answer never calls the change one through .data, nor the gradient wrong."""
    tr, h0, w0 = _view_changed_through_detach(backward=True)
    assert h0.grad is not None and abs(float(h0.grad) - (1 - torch.tanh(torch.tensor(1.0)) ** 2)) < 1e-6  # torch: right
    e = _holds(gl.explain(who, tr))
    assert "modified_through_data" not in e.reasons, e
    assert ".data" not in str(e) and "silently wrong" not in str(e), e


def test_the_backward_named_starts_from_an_output_that_requires_grad():
    """Before backward, the answer tells to call loss.backward(): never from d1, a detached alias the block changed in place."""
    tr, h0, w0 = _view_changed_through_detach(backward=False)
    e = _holds(gl.explain("h0", tr))
    assert "loss.backward()" in (e.fix or ""), e
    assert "d1" not in str(e), e
