"""Why a value or a gradient is NaN or inf: the finiteness facts of a Summary, and laws on random programs.

The laws run random programs under a trace and hold graphlens's answer against a brute-force search
over what the trace recorded: every recorded tensor's value, in program order, and every replay step's
gradients, in the engine's order.  The op graphlens names must be the op that first made a non-finite
number there, and it must be the op the program injected the 0 or the overflow into (known from the
program itself, not from graphlens).
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

import graphlens as gl
from graphlens._live.facts import finiteness, summarize
from graphlens.explain.nonfinite import NONFINITE_REASONS, explain_nonfinite, nonfinite_in
from graphlens.explain.nonfinite_causes import index
from graphlens.explain.premises import check
from graphlens.strategies import programs

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


# -- the facts: Summary.finite and Summary.nonfinite_at ------------------------------------------
def test_finiteness_of_a_large_tensor_finds_the_first_bad_element():
    """On a million elements finiteness reports False and the flat index of the first NaN or inf, True when none."""
    t = torch.zeros(1_000_000)
    assert finiteness(t) == (True, None)
    t[777_777] = float("nan")
    t[900_000] = float("inf")
    assert finiteness(t) == (False, 777_777)
    s = summarize(t)
    assert (s.finite, s.nonfinite_at) == (False, 777_777) and s.head is not None and len(s.head) < s.numel


def test_an_overflowing_sum_of_finite_elements_is_still_finite():
    """float16, bfloat16 and float32 tensors whose sum overflows, every element finite, are finite (True, None)."""
    half = torch.full((100_000,), 60_000.0, dtype=torch.float16)
    assert not torch.isfinite(half.sum())  # (the tensor's own sum overflows float16)
    assert finiteness(half) == (True, None)
    assert finiteness(torch.full((10,), 3e38, dtype=torch.bfloat16)) == (True, None)
    big = torch.full((8,), 3e38)
    assert not torch.isfinite(big.sum()) and finiteness(big) == (True, None)
    assert summarize(big).finite is True and summarize(half).finite is True


def test_positions_are_row_major_in_two_dimensions_also_for_views():
    """nonfinite_at is the row-major index of the logical tensor (a transposed view too), and index() spells it [i, j]."""
    t = torch.zeros(3, 4)
    t[2, 1] = float("-inf")
    s = summarize(t)
    assert (s.finite, s.nonfinite_at) == (False, 9) and index((3, 4), 9) == "[2, 1]"
    v = t.t()  # (4, 3): the -inf is at v[1, 2]
    assert summarize(v).nonfinite_at == 5 and index((4, 3), 5) == "[1, 2]"
    big = torch.zeros(50, 40)
    big[31, 7] = float("nan")
    assert summarize(big).nonfinite_at == 31 * 40 + 7 and index((50, 40), 31 * 40 + 7) == "[31, 7]"
    assert index((), 0) == "" and index((5,), None) == ""


def test_complex_and_integer_tensors():
    """A complex tensor with an infinite or NaN part is not finite, at its index; integer and bool tensors are not checked (None)."""
    c = torch.tensor([1 + 1j, complex(0.0, math.inf), complex(math.nan, 0.0)])
    assert (summarize(c).finite, summarize(c).nonfinite_at) == (False, 1)
    big = torch.zeros(100, dtype=torch.complex64)
    big[42] = complex(math.nan, 1.0)
    assert finiteness(big) == (False, 42)
    assert summarize(torch.ones(3, dtype=torch.complex64)).finite is True
    assert summarize(torch.tensor([1, 2, 3])).finite is None and summarize(torch.tensor([True])).finite is None


def test_reason_codes_are_documented_and_nonfinite_in_reads_each_record():
    """Every NONFINITE_REASONS code has a sentence; nonfinite_in says which record (value, grad, flowed) holds a NaN."""
    assert all(k.isidentifier() and v.strip() for k, v in NONFINITE_REASONS.items())
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with gl.trace() as tr:
        u = x * 1.0
        h = torch.sqrt(u)
        h.sum().backward()
    g = tr.graph()
    assert nonfinite_in(g.find("x")) == "grad" and nonfinite_in(g.find("u")) == "flowed" and nonfinite_in(g.find("h")) is None
    e = gl.explain("u", tr)  # (a gradient that flowed through u and was released: the same origin)
    assert e.reasons[:2] == ("nonfinite_backward", "infinite_derivative") and e.op == "sqrt" and "u[0] = 0" in str(e)
    assert explain_nonfinite(g, g.find("x").id, None, traced=False).reasons[0] == "nonfinite_backward"
    y = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr2:
        (y * 2).sum().backward()
    assert nonfinite_in(tr2.graph().find("y")) is None


# -- answers the corpus does not pin: honest where the records show nothing, precise where they do --
def test_a_value_changed_after_the_block_is_unseen_not_input_data():
    """A leaf made -inf after the trace block: nonfinite_unseen, with the finite value the trace saw; never "already held"."""
    w = torch.tensor([0.0, 1.0], requires_grad=True)
    with gl.trace() as tr:
        loss = (w * 2).sum()
        loss.backward()
    with torch.no_grad():
        w.sub_(float("inf"))
    e = gl.explain(w, tr)
    assert e.reasons == ("nonfinite_forward", "nonfinite_unseen"), e.reasons
    assert "when the trace saw w used, it held [0, 1]" in str(e) and "already held" not in str(e)


def test_the_gradient_of_one_loss_is_not_blamed_on_another():
    """Two losses: a's inf gradient is explained by its own sqrt, not by b's -inf loss; b's by b's log."""
    a = torch.tensor([0.0, 1.0], requires_grad=True)
    b = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        loss_a = torch.sqrt(a).sum()
        loss_b = torch.log(b - 1).sum()
        loss_a.backward()
        loss_b.backward()
    ea, eb = gl.explain(a, tr), gl.explain(b, tr)
    assert ea.reasons[0] == "nonfinite_backward" and ea.op == "sqrt" and "loss_b" not in str(ea), str(ea)
    assert eb.reasons == ("nonfinite_forward", "log_of_zero") and "the loss it comes from, loss_b, is -inf" in str(eb)


def test_a_grad_already_nan_before_the_traced_backward():
    """A .grad that was NaN before the traced backward added to it: nonfinite_grad_before, and no op named."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.grad = torch.tensor([float("nan"), 0.0])
    with gl.trace() as tr:
        (w * 3).sum().backward()
    e = gl.explain(w, tr)
    assert e.reasons == ("nonfinite_backward", "nonfinite_grad_before") and e.op is None


def test_detach_is_followed_to_the_op_that_made_the_values():
    """A loss computed from log(x).detach(): the -inf is named at log, not as input data of the detached copy."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([0.0, 1.0])
    with gl.trace() as tr:
        h = torch.log(x)
        d = h.detach()
        loss = (d * w).sum()
        loss.backward()
    e = gl.explain(loss, tr)
    assert e.reasons == ("nonfinite_forward", "log_of_zero") and e.op == "log" and "x[0] = 0" in str(e), str(e)


def test_adam_steps_name_the_update_that_wrote_into_the_weight():
    """Two traced Adam steps from a NaN gradient: the weight's NaN is addcdiv_'s, on the opt.step() line, from SqrtBackward0."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    with gl.trace() as tr:
        for _ in range(2):
            opt.zero_grad()
            out = model(x)
            loss = torch.sqrt((out - out.detach().mean()) ** 2 * 0).sum()
            loss.backward()
            opt.step()
    e = gl.explain(model.weight, tr)
    assert e.reasons == ("nonfinite_forward", "nonfinite_parameter", "infinite_derivative"), e.reasons
    assert e.op == "addcdiv_" and e.line == "opt.step()" and "SqrtBackward0" in str(e) and check(e) == []


def test_a_node_made_inside_a_forward_op_is_named_with_it():
    """1 / x under torch.where: ReciprocalBackward0 (inside __rdiv__) is named on the user's line, with the where trap."""
    x = torch.tensor([0.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = torch.where(x > 0, 1 / x, torch.zeros_like(x))
        y.sum().backward()
    e = gl.explain(x, tr)
    assert "where_unchosen_branch" in e.reasons and "ReciprocalBackward0 inside __rdiv__" in str(e)
    assert "x[0] = 0" in str(e) and e.line == "y = torch.where(x > 0, 1 / x, torch.zeros_like(x))"


def test_without_a_trace_the_leaves_that_hold_nan_are_listed():
    """Without a trace: the NaN loss, and the leaf that holds NaN (w at w[1]); no op is named."""
    w = torch.tensor([1.0, float("nan")], requires_grad=True)
    v = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * v).sum()
    e = gl.explain(loss)
    assert e.reasons == ("nonfinite_forward", "nonfinite_input"), e.reasons
    assert "Among the leaves of its graph, w (at w[1]) already holds NaN or inf" in str(e) and "mul" not in str(e)


# -- law: the op that first made a non-finite number is the one named ---------------------------
SAFE = ("tanh", "sigmoid", "sin", "half", "add", "mul", "sub")
#: Injections: the op, how its input is made unsafe at one element, and the op's forward name.
DANGER = ("log", "sqrt", "reciprocal", "div", "exp", "rsqrt", "pow_half", "where_log", "log2", "masked_softmax")
_OP_NAME = {"log": "log", "sqrt": "sqrt", "reciprocal": "reciprocal", "div": "div", "exp": "exp", "rsqrt": "rsqrt",
            "pow_half": "pow", "where_log": "log", "log2": "log2", "masked_softmax": "softmax"}


@st.composite
def injected_programs(draw, danger: str):
    """A chain of bounded elementwise ops on a small leaf, with one ``danger`` op whose input is 0 (or huge) at one element."""
    shape = draw(st.sampled_from([(3,), (2, 3), (4,)]))
    n = math.prod(shape)
    values = draw(st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=32), min_size=n, max_size=n))
    other = draw(st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=32), min_size=n, max_size=n))
    before = draw(st.lists(st.sampled_from(SAFE), max_size=4))
    after = draw(st.lists(st.sampled_from(SAFE), max_size=3))
    element = draw(st.integers(0, n - 1))
    return shape, values, other, tuple(before), danger, element, tuple(after)


def _safe(op: str, v: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin, "half": lambda t: t * 0.5,
            "add": lambda t: t + y, "mul": lambda t: t * y, "sub": lambda t: t - y}[op](v)


def _run(program):
    """Run the program inside a trace (backward too); return the leaf, the loss, the trace and what the
    program itself knows: the injected op's output and whether it was finite (read with torch, not graphlens)."""
    shape, values, other, before, danger, element, after = program
    x = torch.tensor(values).reshape(shape).requires_grad_(True)
    y = torch.tensor(other).reshape(shape)
    zero = torch.ones(shape).reshape(-1)
    zero[element] = 0.0
    zero = zero.reshape(shape)
    big = torch.zeros(shape).reshape(-1)
    big[element] = 200.0
    big = big.reshape(shape)
    with gl.trace() as tr:
        v = x
        for op in before:
            v = _safe(op, v, y)
        positive = (v.abs() + 0.5) * zero  # (0 at the element, >= 0.5 elsewhere)
        if danger == "div":
            out = v / positive
        elif danger == "exp":
            out = torch.exp(v + big)
        elif danger == "pow_half":
            out = positive ** 0.5
        elif danger == "where_log":
            out = torch.where(positive > 0, torch.log(positive), torch.zeros_like(positive))
        elif danger == "masked_softmax":  # (the element's whole row masked: the mask's -inf is on purpose)
            row = torch.zeros(shape, dtype=torch.bool).reshape(-1, shape[-1])
            row[element // shape[-1]] = True
            out = torch.softmax(v.masked_fill(row.reshape(shape), float("-inf")), dim=-1)
        else:
            out = getattr(torch, danger)(positive)
        injected = out
        for op in after:
            out = _safe(op, out, y)
        loss = out.sum()
        loss.backward()
    return x, loss, tr, injected


def _brute_force(g: gl.Graph, rp, *, nan: bool = False) -> tuple[str | None, str]:
    """The op that first made a non-finite number, by brute force over the records: the maker of the
    first recorded tensor (program order) whose value is not finite (``nan``: whose first non-finite
    element is NaN: a mask's -inf is written on purpose, the NaN a softmax made of it is the fault);
    else the node of the first replay step (engine order) that sent a non-finite gradient while every
    gradient it received was finite."""
    makers = {e.dst: e.src for e in g.edges if e.kind == "output"}
    for t in g.tensors:
        if t.value is not None and t.value.finite is False and t.id in makers:
            if nan and not (type(t.value.nonfinite_value) is float and math.isnan(t.value.nonfinite_value)):
                continue
            return makers[t.id], "forward"
    for s in rp.steps:
        if any(x is not None and x.finite is False for x in s.grads_out) and not any(
                x is not None and x.finite is False for x in s.grads_in):
            return s.op, "backward"
    return None, "finite"


@pytest.mark.parametrize("danger", DANGER)
@settings(max_examples=300 if THOROUGH else 25)
@given(data=st.data())
def test_the_named_op_is_the_first_that_made_a_nonfinite_number(danger, data):
    """For the loss (when NaN/inf) and for x (when x.grad is): the named op is the brute-force first maker, and the injected op."""
    program = data.draw(injected_programs(danger))
    x, loss, tr, injected = _run(program)
    g, rp = tr.graph(), tr.replay()
    shape, danger, element = program[0], program[4], program[5]
    cause, where = _brute_force(g, rp, nan=danger == "masked_softmax")
    if danger == "masked_softmax":  # (softmax's first NaN: the first element of the masked row)
        element = element // shape[-1] * shape[-1]
    event(f"{danger}: {where}")
    asked = []
    if not torch.isfinite(loss):
        asked.append((loss, "nonfinite_forward"))
    if not torch.isfinite(x.grad).all():
        asked.append((x, "nonfinite_forward" if not torch.isfinite(loss) else "nonfinite_backward"))
    if not asked:
        e = gl.explain(x, tr)
        assert not e.reasons[0].startswith("nonfinite") and "NaN" not in str(e), str(e)
        return
    for t, reason in asked:
        e = gl.explain(t, tr)
        assert e.reason == reason, (e.reasons, str(e))
        assert e.cause == cause, (cause, e.cause, str(e))
        assert g.node(e.cause).forward == _OP_NAME[danger], (danger, g.node(e.cause).forward, str(e))
        assert index(shape, element) in str(e) or shape == (), (index(shape, element), str(e))
        assert check(e) == [], check(e)


# -- law: on the project's random programs, every non-finite answer is the brute-force one ----------
@settings(max_examples=3000 if THOROUGH else 300)
@given(program=programs(max_ops=10, kinds=("unary", "binary", "unary", "binary", "reduce", "inplace", "detach", "view")))
def test_random_programs_name_the_first_nonfinite_maker(program):
    """On random programs (sqrt, log, division of literals that may be 0 or negative): a NaN loss is explained by the
    first non-finite recorded tensor it was computed from (its maker, or that it was an input; a target copy_, fill_
    or zero_ wrote over is not one); premises hold."""
    with gl.trace() as tr:
        ex = program.run()
        ex.backward()
    g = tr.graph()
    leaves = {n: t for n, t in ex.leaves.items() if t.is_leaf}
    if all(torch.isfinite(l).all() for l in ex.losses) and all(
            t.grad is None or torch.isfinite(t.grad).all() for t in leaves.values()):
        event("all finite")
        return
    makers = {e.dst: e.src for e in g.edges if e.kind == "output"}
    # (copy_, fill_ and zero_ write every element of their target: what it held before reaches nothing)
    overwrites = {o.id for o in g.ops if (o.forward or "").rsplit(".", 1)[-1] in ("copy_", "fill_", "zero_")}
    inputs: dict[str, list[str]] = {}
    for e in g.edges:
        if e.kind == "input" and not (e.dst in overwrites and e.input_nr == 0):
            inputs.setdefault(e.dst, []).append(e.src)
        elif e.kind == "detach":
            inputs.setdefault(f"detach:{e.dst}", []).append(e.src)
    for loss in ex.losses:
        if torch.isfinite(loss).all():
            continue
        e = gl.explain(loss, tr)
        assert e.reason == "nonfinite_forward", (e.reasons, str(e), program)
        node = g.node(e.tensor_id)
        seen, stack = set(), [node.id]
        while stack:  # (brute force: every tensor the loss's value was computed from, by the recorded edges)
            t = stack.pop()
            if t not in seen:
                seen.add(t)
                stack += inputs.get(makers.get(t, ""), []) + inputs.get(f"detach:{t}", [])
        first = next(t for t in g.tensors if t.id in seen and t.value is not None and t.value.finite is False)
        if first.id in makers:
            assert e.cause == makers[first.id], (first.id, e.cause, str(e), program)
        else:
            assert set(e.reasons) & {"nonfinite_input", "nonfinite_parameter", "nonfinite_unseen"}, (e.reasons, str(e))
        assert check(e) == [], (check(e), program)
        event("loss explained")
    for name, leaf in leaves.items():
        if leaf.grad is not None and not torch.isfinite(leaf.grad).all():
            e = gl.explain(leaf, tr)
            assert e.reason.startswith("nonfinite"), (e.reasons, str(e), program)
            assert check(e) == [], (check(e), program)
            event("leaf gradient explained")


# -- what is read, and what is known without reading (issue 25's price) ----------------------------
def test_elements_within_reads_memory_only():
    """A transpose, an expand or a slice of a dense tensor holds only its elements; another storage or a gap does not."""
    from graphlens._live.finite import elements_within

    storage = torch.randn(300)
    t = storage[:128].view(8, 16)
    assert elements_within(t.t(), t) and elements_within(t[2:5, 3:9], t) and elements_within(t[:1].expand(4, 16), t)
    assert elements_within(t.view(-1)[5:70].view(5, 13), t.t())  # (the transpose is dense too, in another order)
    assert not elements_within(t.clone(), t) and not elements_within(t.double(), t)
    gapped = t[:, ::2]
    assert not elements_within(t, gapped) and elements_within(gapped[:, 1:], gapped) is False
    assert not elements_within(storage[120:140], t) and not elements_within(torch.as_strided(t, (2,), (200,)), t)
    assert elements_within(torch.as_strided(t, (2,), (100,)), t)  # (inside t's run of addresses)


def _engine_finiteness(root: torch.Tensor) -> list:
    """What each backward node sent, finite or not, in the engine's order: read by the test's own hooks
    (clones of nothing: torch.isfinite on the live gradients), never by graphlens."""
    seen, stack, handles, out = set(), [root.grad_fn], [], []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        handles.append(fn.register_hook(
            lambda gi, go, name=fn.name().split("::")[-1]: out.append((name, tuple(None if g is None else bool(torch.isfinite(g).all()) for g in gi)))))
        stack += [c for c, _ in fn.next_functions]
    return out, handles


@st.composite
def linear_programs(draw):
    """A small linear layer on a batch whose input may hold one huge, infinite or NaN element; then
    views (transpose, slice, expand) and a reduction, so backward sends views of what it received."""
    batch, d_in, d_out = draw(st.integers(1, 4)), draw(st.integers(3, 9)), draw(st.integers(3, 9))
    poison = draw(st.sampled_from([None, 1e30, float("inf"), float("-inf"), float("nan")]))
    where = (draw(st.integers(0, batch - 1)), draw(st.integers(0, d_in - 1)))
    tail = draw(st.lists(st.sampled_from(["t", "slice", "expand", "relu", "square"]), max_size=4))
    return batch, d_in, d_out, poison, where, tuple(tail)


@settings(max_examples=200 if THOROUGH else 40, deadline=None)
@given(program=linear_programs())
def test_every_recorded_gradient_is_as_finite_as_torch_says(program):
    """Gradients known finite without a reduction (views of finite ones, a leaf's .grad that is the very gradient it got)
    are flagged exactly as torch.isfinite says, step by step, and so is every weight's .grad."""
    batch, d_in, d_out, poison, where, tail = program
    torch.manual_seed(0)
    layer = torch.nn.Linear(d_in, d_out)
    x = torch.randn(batch, d_in)
    if poison is not None:
        x[where] = poison
    with gl.trace() as tr:
        y = layer(x)
        for op in tail:
            y = {"t": lambda v: v.transpose(0, -1), "slice": lambda v: v[..., 1:], "expand": lambda v: v.unsqueeze(0).expand(2, *v.shape),
                 "relu": torch.relu, "square": lambda v: v * v}[op](y)
        loss = y.sum()
        truth, handles = _engine_finiteness(loss)
        try:
            loss.backward()
        finally:
            for h in handles:
                h.remove()
    rp = tr.replay()
    recorded = [(rp.graph.node(s.op).name, tuple(None if g is None else g.finite for g in s.grads_out)) for s in rp.steps]
    assert recorded == truth, (recorded, truth)
    g = tr.graph()
    for p in (layer.weight, layer.bias):
        node = next(t for t in g.tensors if t.is_parameter and tuple(t.shape) == tuple(p.shape))
        assert node.grad.finite == bool(torch.isfinite(p.grad).all()), (node.grad, p.grad)


def test_a_parameter_is_checked_when_what_it_made_is_not_finite():
    """A NaN weight is found, with its position, when a value made from it is not finite, even after the weight changed."""
    layer = torch.nn.Linear(8, 8)
    with torch.no_grad():
        layer.weight[3, 5] = float("nan")
    with gl.trace() as tr:
        loss = layer(torch.randn(2, 8)).sum()
    with torch.no_grad():
        layer.weight.zero_()  # (a new version: the graph shows the record, not the live weight)
    w = next(t for t in tr.graph().tensors if t.is_parameter and tuple(t.shape) == (8, 8))
    assert (w.value.finite, w.value.nonfinite_at) == (False, 3 * 8 + 5)
    assert gl.explain(loss, tr).reasons[0].startswith("nonfinite"), str(gl.explain(loss, tr))


def test_a_parameter_nothing_made_nan_from_is_unknown_never_finite():
    """A NaN weight that only masked ops read, changed after the block, is shown as not checked (None), never as finite."""
    w = torch.randn(8, 8, requires_grad=True)
    with torch.no_grad():
        w[1, 1] = float("nan")
    with gl.trace() as tr:
        loss = torch.where(torch.isfinite(w), w, torch.zeros(())).sum()
        loss.backward()
    with torch.no_grad():
        w.add_(1.0)
    node = next(t for t in tr.graph().tensors if t.is_leaf and t.requires_grad and tuple(t.shape) == (8, 8))
    assert node.value.finite is None and node.value.head is not None
    assert torch.isfinite(loss)


def test_a_head_shows_nan_and_inf_of_any_number_kind():
    """The recorder's check of a head: NaN, +inf, -inf and complex infinities are non-finite; ints, bools, finite numbers are not."""
    from graphlens._live.recorder import _not_finite

    inf, nan = float("inf"), float("nan")
    cases = [((1.0, 2.0), False), ((inf, 1.0), True), ((-inf,), True), ((nan,), True), ((inf, -inf), True),
             ((True, False), False), ((1, 2), False), ((1 + 2j,), False), ((complex(inf, 0),), True),
             ((complex(0, nan),), True), ((), False)]
    for values, expected in cases:
        assert _not_finite(((len(values),), torch.float32, len(values), values)) is expected, values


# -- what is known finite without a reduction: calls and nodes that cannot make NaN or inf ----------
_KEEP = {
    "relu": torch.relu, "F.relu": torch.nn.functional.relu, "ReLU()": torch.nn.ReLU(), "sigmoid": torch.sigmoid,
    "tanh": lambda v: v.tanh(), "gelu": torch.nn.functional.gelu, "relu6": torch.nn.functional.relu6,
    "hardsigmoid": torch.nn.functional.hardsigmoid,
    "softmax": lambda v: torch.nn.functional.softmax(v, dim=-1), "neg": lambda v: -v, "abs": torch.abs,
    "clone": torch.clone, "flip": lambda v: v.flip(0), "transpose twice": lambda v: v.t().contiguous().t(),
    "where": lambda v: torch.where(v > 0, v, v.relu()), "cat": lambda v: torch.cat([v[:2], v[2:]]),
    "where inf": lambda v: torch.where(v > 0, v, float("inf")),
}
_MAKE = {"scale": lambda v: v * 1e30, "exp": torch.exp, "square": lambda v: v * v, "log": torch.log,
         "reciprocal": torch.reciprocal, "mean": lambda v: v - v.mean()}


@st.composite
def keeping_programs(draw):
    """A 4x8 leaf that may hold one huge, infinite or NaN element, then calls that keep finite values finite
    (relu, softmax, where, cat...) mixed with calls that can make NaN or inf (a scale, exp, log, 1/x)."""
    poison = draw(st.sampled_from([None, 3e38, float("inf"), float("-inf"), float("nan")]))
    where = (draw(st.integers(0, 3)), draw(st.integers(0, 7)))
    ops = draw(st.lists(st.sampled_from(sorted(_KEEP) + sorted(_MAKE) * 2), min_size=1, max_size=7))
    return poison, where, tuple(ops)


def _arrivals(root: torch.Tensor) -> tuple[list, list]:
    """What arrived at each backward node, finite or not, in the engine's order: read by the test's own
    pre-hooks (which leave the nodes' post-hooks alone), never by graphlens."""
    seen, stack, handles, out = set(), [root.grad_fn], [], []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        handles.append(fn.register_prehook(
            lambda go, name=fn.name().split("::")[-1]: out.append((name, tuple(None if g is None else bool(torch.isfinite(g).all()) for g in go)))))
        stack += [c for c, _ in fn.next_functions]
    return out, handles


@settings(max_examples=500 if THOROUGH else 100, deadline=None)
@given(program=keeping_programs())
def test_what_is_known_finite_without_a_reduction_is_what_torch_says(program):
    """Values of calls that keep finite values finite, and gradients of nodes that do, are recorded exactly as
    torch.isfinite says (never None), step by step, though most of them are never reduced."""
    poison, where, ops = program
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    if poison is not None:
        with torch.no_grad():
            x[where] = poison
    with gl.trace() as tr:
        vals = [x * 1]  # (made in the block: checked, so what follows can be known from it)
        for op in ops:
            vals.append({**_KEEP, **_MAKE}[op](vals[-1]))
        loss = vals[-1].sum()
        truth, handles = _arrivals(loss)
        try:
            loss.backward()
        finally:
            for h in handles:
                h.remove()
    finite = [bool(torch.isfinite(v).all()) for v in vals]
    del vals  # (a graph reads a live tensor again: what is tested is the record of each value as made)
    g = tr.graph()
    for k, ok in enumerate(finite):
        node = g.find(f"vals[{k}]")
        assert node.value.finite is ok, (ops[:k], node.value, ok)
    recorded = [(g.node(s.op).name, tuple(None if h is None else h.finite for h in s.grads_in)) for s in tr.replay().steps]
    assert recorded == truth, (ops, recorded, truth)
    event(f"poison {poison}, finite loss {bool(torch.isfinite(loss))}")


def test_finite_values_of_keeping_calls_and_nodes_are_not_reduced(monkeypatch):
    """relu of a finite value, a detach of it, the gradients ReLU's and mean's nodes send: known finite, not reduced."""
    from graphlens._live import capture, facts

    reduced = []
    real, real_sum = facts.finiteness, capture._sum
    monkeypatch.setattr(facts, "finiteness", lambda t: reduced.append(tuple(t.shape)) or real(t))
    monkeypatch.setattr(capture, "_sum", lambda t: reduced.append(tuple(t.shape)) or real_sum(t))  # (head's own read)
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    with gl.trace() as tr:
        h = x @ w          # reduced: a product can overflow
        a = torch.relu(h)  # known: relu of a finite value
        d = a.detach()     # known: the same memory
        loss = a.mean()
        loss.backward()    # MeanBackward0 and ReluBackward0 send known-finite gradients; MmBackward0's is reduced
    assert reduced == [(8, 16), (16, 16)], reduced
    del h, a, d
    g = tr.graph()
    assert g.find("a").value.finite is True and g.find("d").value.finite is True and g.find("w").grad.finite is True


def test_a_users_post_hook_before_graphlens_is_never_trusted():
    """A Python post-hook the user put on ReLU's node first makes its gradient inf: recorded as not finite."""
    x = torch.randn(8, 16, requires_grad=True)
    with gl.trace() as tr:
        a = torch.relu(x * 2)
        a.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (torch.full_like(grad_inputs[0], float("inf")),))
        a.sum().backward()
    step = next(s for s in tr.replay().steps if tr.graph().node(s.op).name == "ReluBackward0")
    assert step.grads_out[0].finite is False and not torch.isfinite(x.grad).all()
    assert tr.graph().find("x").grad.finite is False


def test_a_users_modes_or_a_float_argument_disable_the_shortcut():
    """relu is not trusted to keep values finite under a user's dispatch mode that changes what it returns,
    nor where(…, inf); a user's function mode (always above graphlens's) hands graphlens a new call instead."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class InfDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return torch.full_like(out, float("inf")) if func is torch.ops.aten.relu.default else out

    class InfFunction(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return torch.full_like(out, float("inf")) if func is torch.relu else out

    for mode in (InfDispatch, InfFunction):
        with mode():
            with gl.trace() as tr:
                x = torch.randn(8, 16) * 1  # (made in the block: known finite)
                a = torch.relu(x)
                assert not torch.isfinite(a).all()
                del a  # (a graph reads a live tensor again: what is tested is the record made)
        g = tr.graph()
        assert g.find("x").value.finite is True and g.find("a").value.finite is False, mode
    with gl.trace() as tr:
        x = torch.randn(8, 16) * 1
        b = torch.where(x > 0, x, float("inf"))
        total = b.sum()
        del b
    assert tr.graph().find("b").value.finite is False and not torch.isfinite(total)


def test_calls_that_can_overflow_finite_values_are_always_checked():
    """exp, sums and products, hardswish, selu and the magnitude of a complex number make inf of finite values
    (3.3e38 in float32): recorded not finite, as is a detach of one; gelu, silu and mish are checked too (whether
    they overflow there depends on the CPU's kernel: gelu does with some vector units, not with others)."""
    big = torch.zeros(8, 16)
    big[5, 7] = 3.3e38  # (past the head: only a check can see what becomes of it)
    F = torch.nn.functional
    calls = {"exp": torch.exp, "mul": lambda v: v * v, "add": lambda v: v + v, "mul 2": lambda v: v * 2, "gelu": F.gelu,
             "hardswish": F.hardswish, "selu": F.selu, "complex abs": lambda v: torch.complex(v, v).abs(),
             "sum 0": lambda v: torch.cat([v, v]).sum(0, keepdim=True), "silu": F.silu, "mish": F.mish}
    overflowed = set()
    for name, call in calls.items():
        with gl.trace() as tr:
            x = big * 1  # (made in the block: known finite)
            y = call(x)
            d = y.detach()
            ok = bool(torch.isfinite(y).all())
            del y, d
        g = tr.graph()
        assert g.find("x").value.finite is True, name
        assert g.find("y").value.finite is ok and g.find("d").value.finite is ok, name
        if not ok:
            overflowed.add(name)
    assert overflowed >= set(calls) - {"silu", "mish", "gelu"}, overflowed


_ACTIVATIONS = {
    torch.relu: torch.relu, torch.sigmoid: torch.sigmoid, torch.tanh: torch.tanh, torch.neg: torch.neg, torch.abs: torch.abs,
    torch.softmax: lambda v: torch.softmax(v, -1), torch.nn.functional.relu6: torch.nn.functional.relu6,
    torch.nn.functional.hardsigmoid: torch.nn.functional.hardsigmoid,
    torch.nn.functional.softmax: lambda v: torch.nn.functional.softmax(v, dim=0),
}


@settings(max_examples=200 if THOROUGH else 50, deadline=None)
@given(dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
       values=st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-30, 1e4, -6e4, 3e38, -3e38, 1.7e308, -1.7e308, 5e-324]), min_size=1, max_size=12))
def test_the_activations_trusted_to_keep_values_finite_do_in_this_torch(dtype, values):
    """Every activation in KEEPS_FINITE gives finite numbers on finite inputs as extreme as the dtype holds (the
    largest, the smallest, negative zero), in float16, bfloat16, float32 and float64, with the installed torch."""
    from graphlens._live.finite import KEEPS_FINITE

    info = torch.finfo(dtype)
    v = torch.tensor([max(min(x, info.max), -info.max) for x in values], dtype=torch.float64).to(dtype)
    assert torch.isfinite(v).all()
    for f in KEEPS_FINITE:
        if f in _ACTIVATIONS or getattr(f, "__name__", "") in {"relu", "sigmoid", "tanh", "neg", "negative", "abs", "absolute", "softmax", "relu6", "hardsigmoid"}:
            call = _ACTIVATIONS.get(f) or (lambda v, f=f: f(v, -1) if f.__name__ == "softmax" else f(v))
            out = call(v)
            assert torch.isfinite(out).all(), (f, v, out)


# -- fresh cases: a probe of 50 programs graphlens had not seen (2026-12-04) ------------------------
def test_the_first_nonfinite_element_is_read_also_beyond_the_head():
    """A large tensor's first non-finite element is read whole (NaN or inf), kept in the JSON, and named as such."""
    t = torch.zeros(40, 30)
    t[20, 7] = float("-inf")
    s = summarize(t)
    assert (s.nonfinite_at, s.nonfinite_value) == (20 * 30 + 7, float("-inf")) and len(s.head) < 20 * 30
    assert gl.Summary.from_dict(s.to_dict()) == s and s.to_dict()["nonfinite_value"] == "-inf"
    x = torch.ones(4, 3, requires_grad=True)
    data = torch.ones(4, 3)
    data[2, 1] = float("nan")
    with gl.trace() as tr:
        loss = (x * data).sum()
    assert "data is NaN at data[2, 1]" in str(gl.explain(loss, tr)) or "NaN at data[2, 1]" in str(gl.explain(loss, tr))


def test_a_nan_loss_does_not_make_a_finite_gradient_look_changed_through_data():
    """Two reads of a NaN tensor hold the same values: a NaN loss that does not reach w's gradient is no '.data' change."""
    w = torch.tensor([1.0], requires_grad=True)
    with gl.trace() as tr:
        loss = (w * 2).sum() + torch.log(torch.tensor(-1.0))
        loss.backward()
    e = gl.explain(w, tr)
    assert e.reason == "grad_ok" and ".data" not in str(e) and "silently wrong" not in str(e), str(e)


def test_a_float16_gradient_that_overflows_in_backward_is_an_overflow():
    """CPU autocast float16: the weight's gradient overflows 65504 in AddmmBackward0 from finite values: overflow, with the float16 fixes."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 2)
    with torch.no_grad():
        lin.weight.mul_(300.0)
    x = torch.randn(3, 8) * 100
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.float16):
            out = lin(x)
            loss = out.float().pow(2).mean()
        loss.backward()
    assert torch.isfinite(loss) and not torch.isfinite(lin.weight.grad).all()
    e = gl.explain(lin.weight, tr)
    assert e.reasons[:2] == ("nonfinite_backward", "overflow") and "infinite_derivative" not in e.reasons, e.reasons
    assert "float16" in str(e) and "65504" in str(e) and "lin.weight[" in str(e) and "bfloat16" in e.fix, str(e)


def test_a_derivative_that_overflows_at_a_tiny_input_is_said_so():
    """log at 1e-40 (not 0): the answer reads the input and says 1 / x overflows float32, never 'infinite at x = 0'."""
    p = torch.tensor([1e-40, 0.3, 0.7], requires_grad=True)
    with gl.trace() as tr:
        nll = -torch.log(p).mean()
        nll.backward()
    e = gl.explain(p, tr)
    assert "overflow" in e.reasons and "1e+40" in str(e) and "not 0" in str(e), str(e)
    assert "infinite at x = 0" not in str(e), str(e)


def test_anomaly_mode_at_a_node_with_a_finite_derivative_points_before_it():
    """Without a trace, anomaly mode stopping at MulBackward0 (0 × an inf sqrt sent) never blames Mul's own derivative."""
    import warnings

    x = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            d = torch.sqrt(x * x + 0.0)
            with pytest.raises(RuntimeError) as info:
                d.sum().backward()
    e = gl.explain(info.value)
    assert e.reason == "anomaly_nan" and "MulBackward0" in str(e), str(e)
    assert "own derivative" not in str(e) and "is finite" in str(e) and "SqrtBackward0" in str(e), str(e)


def test_a_leaf_an_optimizer_step_updated_is_the_one_the_loss_reached():
    """After a traced opt.step(), w's record is a new version; its .grad is still the one loss.backward() wrote: grad_ok."""
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    x = torch.tensor([3.0, 1.0])
    opt = torch.optim.SGD([w], lr=0.01)
    with gl.trace() as tr:
        opt.zero_grad()
        loss = ((w * x).sum() - 0.5) ** 2
        loss.backward()
        opt.step()
    e = gl.explain(w, tr)
    assert e.reason == "grad_ok" and "not by loss" not in str(e) and "[3, 1]" in str(e), str(e)


def test_the_replay_step_an_answer_names_is_the_one_the_replay_prints():
    """'step N of tr.replay()' counts from 1, as the printed table and the page's #step=N do, and names that row's node."""
    import re

    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        loss = torch.sqrt(x).sum()
        loss.backward()
    e = gl.explain(x, tr)
    n = int(re.search(r"step (\d+) of tr\.replay\(\)", str(e)).group(1))
    row = next(line for line in str(tr.replay()).splitlines() if line.split()[:1] == [str(n)])
    assert "SqrtBackward0" in row and "SqrtBackward0 (step" in str(e), (row, str(e))


def test_a_backward_that_stopped_before_a_leaf_never_blames_zero_grad():
    """Anomaly mode stopped backward before x's AccumulateGrad ran: x.grad is None because it was never written."""
    import warnings

    x = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gl.trace() as tr:
            with torch.autograd.detect_anomaly():
                loss = torch.sqrt(x * x + 0.0).sum()
                with pytest.raises(RuntimeError):
                    loss.backward()
    assert x.grad is None
    e = gl.explain(x, tr)
    assert e.reason == "backward_stopped" and "zero_grad" not in str(e) and "never written" in str(e), str(e)


def test_a_line_that_ran_many_times_says_which_run_made_the_nan():
    """A NaN made on a line inside a loop names which of that line's calls made it (the 2nd of 3 blocks)."""
    torch.manual_seed(0)
    blocks = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([0.0, 0.0], requires_grad=True),
              torch.tensor([3.0, 1.0], requires_grad=True)]
    with gl.trace() as tr:
        total = torch.zeros(())
        for b in blocks:
            total = total + torch.log(b.abs()).sum()
        total.backward()
    e = gl.explain(total, tr)
    assert "the 2nd of 3 log calls the trace saw on that line" in str(e), str(e)
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    with gl.trace() as tr:
        y = w * 0  # (ran once: nothing added)
        loss = torch.log(y).sum()
    assert "calls the trace saw" not in str(gl.explain(loss, tr))


def test_poles_a_factory_mask_and_adam_without_eps_are_named_for_what_they_are():
    """lgamma(0) and atanh(1) are poles (never overflows); torch.full's -inf mask is on purpose; Adam(eps=0) divides 0 by 0."""
    raw = torch.tensor([1.0, -200.0], requires_grad=True)
    s = torch.tensor([0.5, 20.0], requires_grad=True)
    with gl.trace() as tr:
        a = torch.lgamma(torch.nn.functional.softplus(raw)).sum()
        b = torch.atanh(torch.tanh(s)).sum()
    for e in (gl.explain(a, tr), gl.explain(b, tr)):
        assert "pole" in e.reasons and "overflow" not in e.reasons and "Scale the values" not in e.fix, str(e)
    q = torch.randn(2, 2, requires_grad=True)
    with gl.trace() as tr:
        mask = torch.triu(torch.full((2, 2), float("-inf")), diagonal=1) + torch.zeros(2, 2).masked_fill(
            torch.tensor([True, False]), float("-inf"))
        loss = (q + mask).softmax(-1).sum()
    e = gl.explain(loss, tr)
    assert "masked_softmax" in e.reasons and e.op == "softmax" and "nonfinite_input" not in e.reasons, str(e)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.01, eps=0.0)
    with gl.trace() as tr:
        (w[0] ** 2).backward()
        opt.step()
    e = gl.explain(w, tr)
    assert "division_by_zero" in e.reasons and "eps" in e.fix, str(e)


# -- a third held-out probe (30 programs from public threads, 2026-12-05) --------------------------
def test_a_nonfinite_value_the_program_dropped_is_not_the_source_of_a_later_one():
    """A log(0) that where() discarded is not blamed for a NaN made later from other values (T5's bucket log)."""
    x = torch.tensor([0.0, 2.0])
    h = torch.tensor([3e38, -3e38], requires_grad=True)
    with gl.trace() as tr:
        bucket = torch.where(x > 0, torch.log(x), torch.zeros(2))  # finite: the -inf was not chosen
        big = h * 10.0  # overflows float32: +inf and -inf
        loss = (big.sum() + bucket.sum())
    e = gl.explain(loss, tr)
    assert e.op == "mul" and "overflow" in e.reasons and "log_of_zero" not in e.reasons, str(e)
    assert "learning rate" not in e.fix  # (no step was traced: nothing says a learning rate made the values)


def test_a_norm_whose_input_is_huge_overflowed_its_squares():
    """layer_norm of values near 1e23 is NaN because the variance overflowed, not because a row was constant."""
    x = torch.full((2, 64), 1e23)
    x[:, 0] = -1e23
    x.requires_grad_()
    with gl.trace() as tr:
        y = torch.nn.functional.layer_norm(x, (64,))
        loss = y.sum()
    e = gl.explain(loss, tr)
    assert e.op == "layer_norm" and "overflow" in e.reasons and "zero_variance" not in e.reasons, str(e)
    assert "eps = 0" not in str(e)


def test_a_recurrent_kernel_that_overflows_is_an_exploding_state():
    """An RNN with relu whose hidden state grows each step overflows: the answer says so and suggests tanh or gates."""
    torch.manual_seed(0)
    rnn = torch.nn.RNN(2, 4, nonlinearity="relu", batch_first=True)
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(torch.eye(4) * 3.0)
        rnn.bias_hh_l0.fill_(1.0)
    with gl.trace() as tr:
        out, _ = rnn(torch.ones(1, 100, 2))
        loss = out.sum()
    e = gl.explain(loss, tr)
    assert "overflow" in e.reasons and "hidden state" in str(e) and "tanh" in e.fix, str(e)


def test_library_losses_and_special_functions_name_their_own_cause():
    """poisson_nll_loss of a negative rate, xlogy at 0, log(ndtr) underflow, kl_div of a log-target with -inf."""
    rate = torch.tensor([0.5, -0.2], requires_grad=True)
    with gl.trace() as tr:
        loss = torch.nn.functional.poisson_nll_loss(rate, torch.tensor([1.0, 2.0]), log_input=False)
    e = gl.explain(loss, tr)
    assert "invalid_domain" in e.reasons and "log_input=True" in e.fix, str(e)
    a = torch.tensor([2.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        lp = torch.distributions.Beta(a, a).log_prob(torch.tensor([0.5, 1.0])).sum()
    e = gl.explain(lp, tr)
    assert e.op == "xlogy" and "log_of_zero" in e.reasons and "clamp" in e.fix, str(e)
    z = torch.tensor([0.0, -40.0], requires_grad=True)
    with gl.trace() as tr:
        ll = torch.log(torch.special.ndtr(z)).sum()
    e = gl.explain(ll, tr)
    assert "underflow" in e.reasons and "log_ndtr" in e.fix, str(e)
    p = torch.tensor([[0.0, 1.0]])
    q = torch.tensor([[0.2, 0.8]], requires_grad=True)
    with gl.trace() as tr:
        log_t = p.log()
        kl = torch.nn.functional.kl_div(q.log(), log_t, log_target=True, reduction="batchmean")
    e = gl.explain(kl, tr)
    assert "log_target" in str(e) and "log_target=False" in e.fix, str(e)


def test_a_division_by_a_python_zero_and_a_causal_mask_that_hides_the_diagonal():
    """x / (W - 1) with W = 1 divides by a number 0; triu(full(-inf)) at diagonal=0 masks query 0 entirely."""
    px = torch.tensor([0.0, 0.0], requires_grad=True)
    width = 1
    with gl.trace() as tr:
        gx = 2.0 * px / (width - 1)
        loss = gx.sum()
    e = gl.explain(loss, tr)
    assert "division_by_zero" in e.reasons, str(e)
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(1, 3, 4)
    with gl.trace() as tr:
        mask = torch.triu(torch.full((3, 3), float("-inf")))
        h, _ = attn(x, x, x, attn_mask=mask)
        loss = h.sum()
    e = gl.explain(loss, tr)
    assert "masked_softmax" in e.reasons and "diagonal=1" in e.fix, str(e)


class _Magnitude(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gx):
        mag = gx.abs()
        ctx.save_for_backward(gx, mag)
        return mag

    @staticmethod
    def backward(ctx, grad):
        gx, mag = ctx.saved_tensors
        return grad * gx / mag  # 0 / 0 where gx is 0


def test_a_custom_functions_backward_is_named_as_the_programs_own_code():
    """A NaN sent by a custom Function's backward names that backward, says graphlens cannot see into it, and suggests eps."""
    w = torch.tensor([0.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        loss = _Magnitude.apply(w * 1).sum()
        loss.backward()
    e = gl.explain(w, tr)
    assert "nonfinite_backward" in e.reasons and "_Magnitude.backward" in str(e) and "eps" in e.fix, str(e)


# -- a fourth held-out probe (30 programs from public threads, 2026-12-05) -------------------------
def test_a_learning_rate_is_blamed_only_for_values_a_traced_step_fed():
    """An exp overflow of a value no traced update fed says nothing of a learning rate, even when a step ran after it."""
    w = torch.tensor([100.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    with gl.trace() as tr:
        loss = torch.exp(w).sum()
        loss.backward()
        opt.step()
    assert "learning rate" not in gl.explain(loss, tr).fix
    v = torch.tensor([1.0], requires_grad=True)
    opt = torch.optim.SGD([v], lr=100.0)
    with gl.trace() as tr:
        (-v).sum().backward()
        opt.step()  # v = 101: exp overflows float32 above ~88.7
        loss = torch.exp(v).sum()
    e = gl.explain(loss, tr)
    assert "overflow" in e.reasons and "learning rate" in str(e) + e.fix, str(e)


def test_a_reflected_division_is_not_taken_for_an_in_place_write():
    """1.0 / s names its denominator s's maker, never the quotient (a __rdiv__ is not an in-place op)."""
    q = torch.tensor([[0.0, 1.0]], requires_grad=True)
    with gl.trace() as tr:
        z = 1.0 / (q * 0.0).sum(-1)
        loss = z.sum()
    e = gl.explain(loss, tr)
    assert "division_by_zero" in e.reasons and "(z + eps)" not in e.fix, str(e)


def test_logsumexp_over_a_fully_masked_row_is_a_mask_not_bad_data():
    """logsumexp of a row a -inf mask forbids entirely sends NaN backward: named as a mask, fixed with a finite negative."""
    mask = torch.zeros(2, 3)
    mask[:, 2] = float("-inf")
    w = torch.zeros(2, 3, requires_grad=True)
    with gl.trace() as tr:
        scores = w + mask
        out = torch.logsumexp(scores, dim=0)[:2].sum()
        out.backward()
    e = gl.explain(w, tr)
    assert tuple(e.reasons)[:2] == ("nonfinite_backward", "masked_softmax") and e.op == "logsumexp", str(e)
    assert "finfo" in e.fix and "nan_to_num" not in e.fix


def test_entropy_by_entr_at_zero_has_its_derivative_named():
    """torch.special.entr at p = 0 sends -inf backward: its derivative -log(p) - 1 is named, and the fix uses logits."""
    logits = torch.tensor([[0.0, -200.0]], requires_grad=True)
    with gl.trace() as tr:
        ent = torch.special.entr(torch.softmax(logits, -1)).sum()
        ent.backward()
    e = gl.explain(logits, tr)
    assert "infinite_derivative" in e.reasons and "log_softmax" in e.fix, str(e)


def test_a_loss_computed_after_the_block_is_said_to_be_unseen():
    """A NaN loss the trace never recorded gets nonfinite_unseen and a fix that moves its code into the block."""
    w = torch.tensor([0.0], requires_grad=True)
    with gl.trace() as tr:
        y = w * 1.0
    loss = torch.log(y).sum() * 0.0
    e = gl.explain(loss, tr)
    assert "nonfinite_unseen" in e.reasons and "inside the graphlens.trace() block" in e.fix, str(e)


def _nb_terms(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(x + theta) - torch.lgamma(theta) - torch.lgamma(x + 1)  # (the last one runs without grad)


def test_a_run_count_is_given_only_when_every_run_kept_the_line():
    """In the user's function a call without grad carries the block's line: the count of runs on that line is not stated."""
    theta = torch.tensor([0.0, 1.0], requires_grad=True)
    x = torch.tensor([1.0, 2.0])
    with gl.trace() as tr:
        ll = _nb_terms(x, theta).sum()
    e = gl.explain(ll, tr)
    assert e.op == "lgamma" and "calls the trace saw" not in str(e), str(e)
    with gl.trace() as tr:
        ll = (torch.lgamma(x + theta) - torch.lgamma(theta) - torch.lgamma(x + 1)).sum()
    assert "the 2nd of 3 lgamma calls the trace saw on that line" in str(gl.explain(ll, tr))


def test_zero_weights_under_weight_norm_and_spectral_norm_are_named():
    """A zero-initialised layer under weight_norm (v = 0) or spectral_norm (σ = 0) divides 0 by 0: the parametrization is named."""
    from torch.nn.utils import parametrizations

    for wrap, word in ((parametrizations.weight_norm, "weight_norm"), (parametrizations.spectral_norm, "spectral_norm")):
        torch.manual_seed(0)
        layer = torch.nn.Linear(3, 2)
        torch.nn.init.zeros_(layer.weight)
        layer = wrap(layer)
        with gl.trace() as tr:
            loss = layer(torch.randn(4, 3)).sum()
        e = gl.explain(loss, tr)
        assert "division_by_zero" in e.reasons and word in str(e) and "initialise" in e.fix, str(e)


def test_two_helpers_parameters_of_one_name_do_not_name_two_tensors_alike():
    """softmax(src) and scatter_add(src) call different tensors src: exp's result is not named src beside its input src."""
    def scatter_add(src, index, dim_size):
        return torch.zeros((dim_size,), dtype=src.dtype).index_add(0, index, src)

    def softmax(src, index, num_nodes):
        out = src.exp()
        return out / (scatter_add(out, index, num_nodes)[index] + 1e-16)

    alpha = torch.tensor([101.9, 1.0, 2.0, 3.0], requires_grad=True)
    index = torch.tensor([0, 0, 1, 1])
    with gl.trace() as tr:
        p = softmax(alpha * 1.0, index, 2)
        loss = p.sum()
    e = gl.explain(loss, tr)
    assert e.op == "exp" and "out = src.exp()" in (e.line or "")
    assert "inf at src[" not in str(e)  # (the input is src there; its result is not)


def test_a_gradient_made_with_create_graph_is_not_said_to_come_from_finite_inputs():
    """dydx from autograd.grad(create_graph=True) is inf where sqrt's derivative is: its maker is a backward node whose
    inputs the trace did not record, so no 'from finite inputs'; the call that made it is followed to SqrtBackward0."""
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with gl.trace() as tr:
        y = torch.sqrt(x)
        (dydx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        loss = (dydx * 0).sum()
    e = gl.explain(loss, tr)
    assert torch.isnan(loss) and e.op == "sqrt" and "SqrtBackward0" in str(e) and "create_graph=True" in str(e), e
    assert "from finite inputs" not in str(e)


def test_a_gradient_made_with_create_graph_is_followed_into_the_call_that_made_it():
    """u_x = autograd.grad(u, x, create_graph=True) is -inf at x = 0: the answer names the PowBackward0 of x ** 0.5 in that call."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.linspace(0, 1, 5).reshape(-1, 1).requires_grad_()
    with gl.trace() as tr:
        u = net(x) * x.pow(0.5)
        u_x = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
    assert torch.isinf(u_x[0, 0]) and torch.isfinite(u).all()
    e = gl.explain(u_x, tr)
    assert e.reasons[:2] == ("nonfinite_forward", "nonfinite_backward") and "infinite_derivative" in e.reasons, e
    assert e.op == "pow" and e.line == "u = net(x) * x.pow(0.5)" and "PowBackward0" in str(e) and "x[0, 0] = 0" in str(e)


def test_a_create_graph_gradient_times_a_nan_value_names_the_mul_that_used_it():
    """A create_graph gradient that is NaN because a detached NaN factor multiplied it names that mul and the NaN it used."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = x * torch.tensor([float("nan"), 1.0])
        g_x = torch.autograd.grad((x * x).sum() * y.sum().detach(), x, create_graph=True)[0]
    assert torch.isnan(g_x).all()
    e = gl.explain(g_x, tr)
    assert e.op == "mul" and "MulBackward0" in str(e) and "= nan" in str(e) and "create_graph=True" in str(e), e
