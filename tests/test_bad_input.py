"""Bad and hostile input gets a clear error naming the argument, at the call."""

import pytest
import torch

import graphlens as gl


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda y: gl.snapshot(y, saved="no"), TypeError, "saved must be True, False or None"),
        (lambda y: gl.snapshot(y, max_elements=None), TypeError, "max_elements must be an int"),
        (lambda y: gl.snapshot(y, max_elements=-1), ValueError, "max_elements must be an int >= 0"),
        (lambda y: gl.trace(max_elements=None), TypeError, "max_elements must be an int"),
        (lambda y: gl.trace(grads="yes"), TypeError, "grads must be True or False"),
    ],
)
def test_options_are_checked_when_given(call, error, words):
    """A wrong option raises at the call that takes it, naming the option."""
    y = (torch.ones(2, requires_grad=True) * 2).sum()
    with pytest.raises(error, match=words):
        call(y)


def test_trace_option_errors_come_before_the_block_runs():
    """trace(max_elements=None) fails before the user's block runs, not from inside it."""
    ran = []
    with pytest.raises(TypeError, match="max_elements"):
        with gl.trace(max_elements=None):
            ran.append(1)
    assert ran == []


def test_graph_lookups_name_a_wrong_argument():
    """g.node(["t0"]) and friends raise a TypeError that names the argument; unknown ids a KeyError."""
    g = gl.snapshot((torch.ones(2, requires_grad=True) * 2).sum())
    with pytest.raises(TypeError, match="id must be a str"):
        g.node(["t0"])
    with pytest.raises(TypeError, match="op must be a node id"):
        g.inputs(["op0"])
    with pytest.raises(KeyError, match="nosuch"):
        g.inputs("nosuch")
    with pytest.raises(ValueError, match="'t0' is a tensor of this graph, not an op"):
        g.inputs("t0")
    with pytest.raises(TypeError, match="name must be a str"):
        g.find(3)


def test_saved_name_cache_is_bounded():
    """Defining a new autograd.Function per step does not keep every backward class alive."""
    import gc
    import weakref

    from graphlens import _facts

    refs = []
    for i in range(_facts._SAVED_NAMES_LIMIT + 50):
        cls = type(f"F{i}", (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, x: x * 2),
            "backward": staticmethod(lambda ctx, g: g * 2),
        })
        y = cls.apply(torch.ones(1, requires_grad=True))
        _facts.saved_attributes(y.grad_fn)
        refs.append(weakref.ref(type(y.grad_fn)))
        del y, cls
    gc.collect()
    assert len(_facts._SAVED_NAMES) <= _facts._SAVED_NAMES_LIMIT
    assert sum(r() is not None for r in refs) < len(refs) // 2
