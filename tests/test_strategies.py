"""Tests of the program strategies: drawn programs run, print as the same runnable script, and vary."""

import contextlib
import io
import warnings

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings

from graphlens.laws import Program, Step
from graphlens.strategies import OP_KINDS, leaves, programs, shapes


def _bits_equal(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(
        torch.where(torch.isnan(a), 0.0, a), torch.where(torch.isnan(b), 0.0, b)
    )


@settings(max_examples=150)
@given(program=programs(max_ops=10))
def test_printed_source_reproduces_the_run(program):
    """exec(program.source()) computes the same values and grads, bit for bit, as program.run() + backward."""
    ex = program.run()
    ex.backward()
    ns = {}
    with contextlib.redirect_stdout(io.StringIO()) as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # printing .grad of a leaf an in-place op made a non-leaf warns
        exec(compile(program.source(), "<program>", "exec"), ns)
    for name, t in ex.tensors.items():
        assert _bits_equal(t.detach(), ns[name].detach()), name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading .grad of a non-leaf warns
        for name, g in ex.grads().items():
            assert _bits_equal(g, ns[name].grad), name
    assert out.getvalue().count(".grad =") == len(program.leaves)


@settings(max_examples=50)
@given(program=programs())
def test_repr_is_the_source_and_programs_are_values(program):
    """repr(program) is its source, an equal rebuild is equal and hashes the same, and two runs agree."""
    assert repr(program) == str(program) == program.source()
    again = Program(list(program.steps), losses=program.losses)
    assert again == program and hash(again) == hash(program)
    a, b = program.run(), again.run()
    assert list(a.tensors) == list(b.tensors)
    assert all(_bits_equal(x.detach(), y.detach()) for x, y in zip(a.tensors.values(), b.tensors.values()))


def test_every_op_kind_and_feature_is_drawn():
    """In 300 drawn programs every op family of OP_KINDS, a no_grad block, a Parameter and two losses all occur."""
    seen = set()

    @settings(max_examples=300, database=None, suppress_health_check=list(HealthCheck))
    @given(programs())
    def collect(program):
        seen.update(s.kind for s in program.steps)
        if any(s.no_grad for s in program.steps):
            seen.add("no_grad")
        if len(program.losses) == 2:
            seen.add("two losses")

    collect()
    wanted = set(OP_KINDS) | {"no_grad", "two losses", "parameter", "constant", "leaf"}
    assert wanted <= seen, f"never drawn: {sorted(wanted - seen)}"


def test_a_property_shrinks_to_a_minimal_program():
    """hypothesis shrinks 'has a split/unbind/chunk' to a short program that still runs as printed."""
    p = find(programs(), lambda p: any(s.kind == "multi" for s in p.steps),
             settings=settings(max_examples=2000, database=None, derandomize=True, suppress_health_check=list(HealthCheck)))
    kinds = [s.kind for s in p.steps]
    assert kinds[0] == "leaf" and kinds[-1] == "loss" and "multi" in kinds and len(kinds) <= 6, p.source()
    exec(compile(p.source(), "<shrunk program>", "exec"), {})


@settings(max_examples=80)
@given(program=programs(allow_inplace=False, allow_no_grad=False, allow_detach=False, allow_retain_grad=False))
def test_options_leave_out_kinds(program):
    """allow_inplace / allow_no_grad / allow_detach / allow_retain_grad=False leave those statements out."""
    assert not any(s.no_grad or s.kind in ("inplace", "detach", "retain_grad") for s in program.steps)


@given(shape=shapes(max_dims=2, max_side=2), steps=leaves(max_leaves=2))
def test_shapes_and_leaves_respect_their_bounds(shape, steps):
    """shapes() stays within its bounds and leaves() makes at least one leaf that requires grad."""
    assert len(shape) <= 2 and all(1 <= s <= 2 for s in shape)
    assert 1 <= len(steps) <= 2
    ns = {"torch": torch}
    for s in steps:
        exec(s.code, ns)
    assert any(ns[s.outputs[0]].requires_grad and ns[s.outputs[0]].is_leaf for s in steps)


def test_bad_options_are_explained():
    """Invalid strategy options and malformed programs raise errors naming the argument."""
    with pytest.raises(ValueError, match="max_side"):
        shapes(max_side=0)

    @settings(max_examples=1, database=None)
    @given(programs(kinds=("bogus",)))
    def draw_bogus(p):
        pass

    with pytest.raises(ValueError, match=r"unknown op kinds \['bogus'\]"):
        draw_bogus()
    leaf = Step("w0 = torch.tensor(1.0, requires_grad=True)", "leaf", (), ("w0",))
    with pytest.raises(ValueError, match="losses must name"):
        Program([leaf], losses=["loss0"])
    with pytest.raises(ValueError, match="bind a name twice"):
        Program([leaf, leaf], losses=["w0"])
