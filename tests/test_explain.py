"""Tests of graphlens.explain: why a grad is None, and what a classic autograd error means."""

import importlib.util
import warnings

import pytest
import torch

import graphlens as gl
from graphlens.graph import FREED
from graphlens import names as gl_names
from graphlens.explain import ERROR_REASONS, GRAD_REASONS, REASONS, Explanation, explain, explain_error


def _raise(fn):
    """Run ``fn`` and return the RuntimeError it raises (fails the test when it does not)."""
    with pytest.raises(RuntimeError) as info:
        fn()
    return info.value


# -- why is the grad None? ----------------------------------------------------------------


def test_nonleaf_without_retain_grad():
    """A non-leaf that did not call retain_grad() is reported as such, named after the caller's variable."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = w * w
    loss = h.sum()
    loss.backward()
    e = explain(h, loss)
    assert e.reasons == ("nonleaf_not_retained",)
    assert e.tensor_name == "h"
    assert "retain_grad()" in str(e) and "MulBackward0" in str(e)
    assert e.path[0] == e.graph.find("loss").id and e.path[-1] == e.graph.find("h").id


def test_leaf_times_two_is_a_copy():
    """``w = randn(..., requires_grad=True) * 2`` is a non-leaf whose gradient lands on an unnamed leaf."""
    w = torch.randn(3, requires_grad=True) * 2
    loss = (w ** 2).sum()
    loss.backward()
    e = explain(w, loss)
    assert e.reasons == ("is_a_copy", "nonleaf_not_retained")
    assert e.tensor_name == "w"
    leaf = e.graph.node(e.path[-1])
    assert leaf.is_leaf and leaf.name is None and leaf.grad is not None  # the gradient is really there


def test_double_copy_is_a_copy():
    """``.double()`` of a fresh leaf is a ToCopyBackward0 copy, and the text says it is a conversion."""
    w = torch.randn(3, requires_grad=True).double()
    loss = (w * 3).sum()
    e = explain(w, loss)
    assert e.reasons[0] == "is_a_copy"
    assert "ToCopyBackward0" in [e.graph.node(p).name for p in e.path if p.startswith("op")]
    assert ".double()" in str(e) and "stays None after loss.backward()" in str(e)


def test_named_leaf_behind_conversion_is_plain_nonleaf():
    """A conversion of a leaf the user still holds is an ordinary non-leaf, not a lost copy."""
    x = torch.randn(3, requires_grad=True)
    w = x.double()
    loss = (w * 3).sum()
    assert explain(w, loss).reasons == ("nonleaf_not_retained",)


def test_requires_grad_false():
    """A plain tensor made without requires_grad is reported as not requiring grad."""
    v = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    loss = (x * v).sum()
    e = explain(x, loss)
    assert e.reasons == ("requires_grad_false",) and e.tensor_name == "x"


def test_integer_tensor():
    """An integer tensor gets the extra reason that its dtype can never require grad."""
    v = torch.randn(3, requires_grad=True)
    idx = torch.tensor([0, 1])
    loss = v[idx].sum()
    assert explain(idx, loss).reasons == ("requires_grad_false", "integer_dtype")


def test_created_in_no_grad_with_trace():
    """In a trace, a tensor made inside no_grad is reported with the region and the input that required grad."""
    with gl.trace() as tr:
        v = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            n = v * 2
        loss = (n * v).sum()
        loss.backward()
    e = explain("n", tr)
    assert e.reasons == ("requires_grad_false", "created_in_no_grad")
    assert "no_grad" in str(e) and e.graph.find("v").id in e.path


def test_cut_by_detach_with_trace():
    """In a trace, a leaf whose only path to the loss goes through detach() is cut by that detach, named."""
    with gl.trace() as tr:
        w = torch.randn(3, requires_grad=True)
        y = w.sigmoid()
        d = y.detach()
        u = torch.randn(3, requires_grad=True)
        loss = (d * u).sum()
        loss.backward()
    e = explain(w, tr)
    assert e.reasons == ("not_reachable", "cut_by_detach")
    g = e.graph
    assert "d = y.detach()" in str(e)
    assert (g.find("y").id, g.find("d").id) in e.edges  # the cut edge is highlighted


def test_cut_by_no_grad_with_trace():
    """In a trace, a leaf whose path to the loss runs through a no_grad op is cut by that region."""
    with gl.trace() as tr:
        v = torch.randn(3, requires_grad=True)
        u = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            n = v * 2
        loss = (n * u).sum()
        loss.backward()
    e = explain("v", tr)
    assert e.reasons == ("not_reachable", "cut_by_no_grad")
    assert "made n inside torch.no_grad()" in str(e)


def test_cut_by_detach_live():
    """Without a trace, a detached copy among the caller's variables is named as the likely cut."""
    a = torch.randn(3, requires_grad=True)
    y = a.exp()
    d = y.detach()
    b = torch.randn(3, requires_grad=True)
    loss = (d * b).sum()
    e = explain(a, loss)
    assert e.reasons == ("not_reachable", "cut_by_detach")
    assert "d shares memory with y" in str(e)


def test_feeds_other_root():
    """A leaf used only by a second loss is reported as feeding that loss, named."""
    v = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    loss1 = (v * 2).sum()
    loss2 = (b * 2).sum()
    e = explain(b, loss1)
    assert e.reasons == ("not_reachable", "feeds_other_root")
    assert "loss2" in str(e) and e.graph.find("loss2")  # the graph is enriched with the other loss


def test_backward_not_run_then_grad_ok():
    """Before backward a reachable leaf is 'backward_not_run'; after it, 'grad_ok' with the path from the root."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * 3).sum()
    before = explain(w, loss)
    assert before.reasons == ("backward_not_run",) and before.ok
    loss.backward()
    after = explain(w, loss)
    assert after.reasons == ("grad_ok",)
    g = after.graph
    assert after.path[0] == g.find("loss").id and after.path[-1] == g.find("w").id
    assert "AccumulateGrad" in [g.node(p).name for p in after.path if p.startswith("op")]
    assert "[3, 3]" in str(after)


def test_grad_from_an_earlier_backward_is_reported_with_the_condition():
    """A leaf that holds a grad while the root's saved tensors are live: graphlens says it
    cannot tell whether this root's backward ran, and what the next one would do."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    loss = (w * w).sum()
    e = explain(w, loss)
    assert e.reasons == ("grad_ok",)
    assert "cannot tell" in str(e) and "If it has not, loss.backward() will add" in str(e)


def test_after_backward_with_retain_graph_graphlens_does_not_claim_backward_has_not_run():
    """After loss.backward(retain_graph=True) the saved tensors are still there, as before any
    backward: the answer neither says backward has not run nor calls for zero_grad()."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    e = explain(w, loss)
    assert e.reason == "grad_ok" and "will_accumulate" not in e.reasons
    assert "has not run" not in str(e).replace("If it has not", "") and "zero_grad" not in str(e)
    assert "[2, 4]" in str(e)


def test_zero_grad_set_none_with_optimizer():
    """After backward and optimizer.zero_grad(), a parameter's None grad is blamed on zero_grad."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    e = explain(w, loss, optimizer=opt)
    assert e.reasons == ("zero_grad_set_none",)
    assert "optimizer" in str(e)


def test_not_in_optimizer():
    """A leaf the optimizer does not hold gets the extra reason 'not_in_optimizer'."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    other = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([other], lr=0.1)
    loss = (w * w).sum()
    loss.backward()
    assert explain(w, loss, optimizer=opt).reasons == ("grad_ok", "not_in_optimizer")


def test_zero_grad_seen_by_trace():
    """In a trace, a grad that flowed into a leaf but was reset afterwards is 'zero_grad_set_none'."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        loss = (w + 1).sum()  # saves nothing: only the trace can tell backward ran
        loss.backward()
        w.grad = None
    assert explain("w", tr).reasons == ("zero_grad_set_none",)


def test_retained_nonleaf_is_ok():
    """A non-leaf that called retain_grad() before backward has its grad."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    h.retain_grad()
    loss = (h * h).sum()
    loss.backward()
    assert explain(h, loss).reasons == ("grad_ok",)


def test_root_guessed_from_caller_variables():
    """Without a root, the caller's scalar output that reaches the tensor is used and named."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    total = (w * 3).sum()
    e = explain(w)
    assert e.reasons == ("backward_not_run",)
    assert "total" in str(e) and [r.name for r in e.graph.roots] == ["total"]


def test_name_string_and_graph_root():
    """A tensor can be named by string with a Graph as root, and a live tensor is found in a Graph."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    loss = h.sum()
    g = gl.snapshot(loss)
    assert explain("h", g).reasons == ("nonleaf_not_retained",)
    assert explain(w, g).reasons == ("backward_not_run",)
    assert explain("h", loss).tensor_name == "h"  # a name among the caller's variables
    with pytest.raises(KeyError, match="'nope'"):
        explain("nope", g)


def test_snapshot_inside_explain_names_from_user_frame():
    """explain's internal snapshot takes names from the user's frame, not from graphlens's own."""
    assert gl_names.is_internal("graphlens.explain.grad") and not gl_names.is_internal("graphlens.claims.leaf")
    weights = torch.tensor([1.0, 2.0], requires_grad=True)
    hidden = weights * 2
    total = hidden.sum()
    g = explain(hidden, total).graph
    assert {t.name for t in g.tensors} >= {"weights", "hidden", "total"}


def test_bad_arguments_are_clear():
    """Wrong argument types raise TypeErrors that name the argument."""
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="tensor must be"):
        explain(3, w)
    with pytest.raises(TypeError, match="root must be"):
        explain(w, "loss")
    with pytest.raises(TypeError, match="optimizer must be"):
        explain(w, w.sum(), optimizer=[w])


def test_explain_changes_nothing():
    """explain reads grads, flags, versions, hooks and retains_grad of the tensors it inspects without changing any."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    h = w * x
    h.retain_grad()
    y = h.exp()
    d = y.detach()
    w.register_hook(lambda g: None)
    loss = (y * d).sum()
    loss.backward(retain_graph=True)
    tensors = {"w": w, "x": x, "h": h, "y": y, "d": d, "loss": loss}

    def state():
        out = {}
        for k, t in tensors.items():
            grad = t.grad if (t.is_leaf or t.retains_grad) else None
            out[k] = (
                None if grad is None else grad.clone(), t.requires_grad, t.is_leaf, bool(t.retains_grad),
                t._version, t.grad_fn, len(t._backward_hooks or {}), t.clone(),
            )
        return out

    before = state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading a non-leaf's .grad would warn
        for name in tensors:
            explain(tensors[name], loss)
            explain(name, loss)
    after = state()
    for k in tensors:
        b, a = before[k], after[k]
        assert (b[0] is None) == (a[0] is None) and (b[0] is None or torch.equal(b[0], a[0])), k
        assert b[1:7] == a[1:7], k
        assert torch.equal(b[7], a[7]), k


def test_explanation_holds_no_tensor(collect):
    """An Explanation keeps no tensor alive."""
    import weakref

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * 2).sum()
    e = explain(w, loss)
    ref = weakref.ref(w)
    del w, loss
    collect()
    assert ref() is None and e.reasons == ("backward_not_run",)


def test_reason_codes_are_documented():
    """Every code an explanation gives is one of the documented codes, and the two tables do not overlap."""
    assert not set(GRAD_REASONS) & set(ERROR_REASONS)
    w = torch.randn(2, requires_grad=True) * 2
    loss = w.sum()
    for e in (explain(w, loss), explain(loss, loss), explain_error(RuntimeError("odd"))):
        assert set(e.reasons) <= set(REASONS)


# -- what does the error mean? --------------------------------------------------------------


def test_backward_twice_names_freed_ops():
    """A second backward through a freed graph is 'graph_freed' and names the ops whose saved tensors were freed."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (w.sigmoid() * w).sum()
    loss.backward()
    exc = _raise(loss.backward)
    e = explain(exc)
    assert e.reasons == ("graph_freed",) and e.tensor_name == "loss"
    assert "SigmoidBackward0" in str(e) and "retain_graph=True" in str(e)
    freed = [e.graph.node(p) for p in e.path if p.startswith("op")]
    assert freed and all(any(e.state is FREED for e in op.saved) for op in freed)


def test_backward_twice_with_trace():
    """With a trace, the freed-graph error names the traced tensors."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = w.sigmoid()
        loss = (y * w).sum()
        loss.backward()
        exc = _raise(loss.backward)
    e = explain_error(exc, tr)
    assert e.reasons == ("graph_freed",)
    assert "made y" in str(e)


def test_inplace_on_saved_output():
    """Changing a saved output in place is 'inplace_saved', naming the tensor, its op, the saver and the versions."""
    w = torch.randn(3, requires_grad=True)
    y = w.sigmoid()
    z = (y * 2).sum()
    y.mul_(2)
    exc = _raise(z.backward)
    e = explain_error(exc)
    assert e.reasons == ("inplace_saved",) and e.tensor_name == "y"
    text = str(e)
    assert "output 0 of Sigmoid" in text and "version 0" in text and "version 1" in text
    assert "saved for backward by SigmoidBackward0" in text and e.op == "SigmoidBackward0"


def test_inplace_through_detached_alias_with_trace():
    """In a trace, an in-place change through a detached alias names the alias and the in-place op."""
    with gl.trace() as tr:
        w = torch.randn(3, requires_grad=True)
        y = w.exp()
        z = (y * 2).sum()
        dd = y.detach()
        dd.zero_()
        exc = _raise(z.backward)
    e = explain_error(exc, tr)
    assert e.reasons == ("inplace_saved",) and e.tensor_name == "y"
    assert "dd" in str(e) and "zero_" in str(e) and "ExpBackward0" in str(e)
    assert e.graph.find("y").id in e.path


def test_inplace_on_leaf():
    """An in-place op on a leaf that requires grad is 'inplace_leaf', naming the leaf from the failing line."""
    p = torch.randn(3, requires_grad=True)
    q = torch.randn(3, requires_grad=True)  # another candidate, not on the failing line
    exc = _raise(lambda: p.add_(1))
    e = explain(exc)
    assert e.reasons == ("inplace_leaf",) and e.tensor_name == "p"
    assert "torch.no_grad()" in str(e)
    assert q.requires_grad


def test_requires_grad_on_nonleaf():
    """Changing requires_grad of a non-leaf is 'requires_grad_nonleaf', naming it."""
    w = torch.randn(3, requires_grad=True)
    y = w * 2

    def clear():
        y.requires_grad = False

    e = explain_error(_raise(clear))
    assert e.reasons == ("requires_grad_nonleaf",)
    assert "detach()" in str(e)


def test_nonscalar_backward():
    """backward() on a vector is 'nonscalar_backward', naming the output and its shape."""
    w = torch.randn(3, requires_grad=True)
    out = w * 2
    e = explain(_raise(out.backward))
    assert e.reasons == ("nonscalar_backward",) and e.tensor_name == "out"
    assert "[3]" in str(e) and "ones_like" in str(e)


def test_backward_on_tensor_without_grad_fn():
    """backward on a tensor made in no_grad is 'no_grad_fn'; a trace adds that it was made inside no_grad."""
    p = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        with torch.no_grad():
            r = (p * 2).sum()
        exc = _raise(r.backward)
    assert explain_error(exc).reasons == ("no_grad_fn",)
    e = explain_error(exc, tr)
    assert e.reasons == ("no_grad_fn", "created_in_no_grad") and e.tensor_name == "r"


@pytest.mark.parametrize(
    "code, program",
    [
        ("requires_grad_dtype", lambda: torch.tensor([1, 2]).requires_grad_(True)),
        ("retain_grad_no_requires_grad", lambda: torch.ones(2).retain_grad()),
        ("input_not_requiring_grad", lambda: torch.autograd.grad((torch.ones(2, requires_grad=True) * 2).sum(), [torch.ones(2)])),
        ("unused_input", lambda: torch.autograd.grad((torch.ones(2, requires_grad=True) * 2).sum(), [torch.ones(2, requires_grad=True)])),
        ("grad_shape_mismatch", lambda: (torch.ones(3, requires_grad=True) * 2).backward(torch.ones(2))),
        ("view_inplace_multi_output", lambda: (torch.ones(2, requires_grad=True) * 1).unbind()[0].mul_(2)),
    ],
)
def test_more_autograd_errors(code, program):
    """Further real autograd errors map to their own codes."""
    assert explain_error(_raise(program)).reasons == (code,)


def test_unknown_error_quotes_message():
    """An error graphlens does not know is 'unknown_error' and quotes the message."""
    e = explain(ValueError("the flux capacitor is empty"))
    assert e.reasons == ("unknown_error",)
    assert "the flux capacitor is empty" in str(e)


def test_explain_error_never_raises():
    """explain_error answers for odd inputs: a string, an unrelated object as graph, an unfinished trace."""
    assert explain_error("Trying to backward through the graph a second time").reasons == ("graph_freed",)
    assert explain_error(RuntimeError("grad can be implicitly created only for scalar outputs"), object()).reasons == (
        "nonscalar_backward",
    )
    unfinished = gl.trace()  # never entered: graph() raises
    assert explain_error(RuntimeError("boom"), unfinished).reasons == ("unknown_error",)
    assert isinstance(explain_error(None), Explanation)


def test_trace_explain_errors_adds_note():
    """With trace(explain_errors=True) the explanation is attached to the escaping error as a note."""
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        with gl.trace(explain_errors=True):
            out = w * 2
            out.backward()
    notes = getattr(info.value, "__notes__", [])
    assert any("single number" in n for n in notes)


class _NoAddNote(RuntimeError):
    """An error without ``add_note``, as every exception is on Python 3.10."""

    def __getattribute__(self, name):
        if name == "add_note":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_trace_explain_errors_adds_the_note_where_add_note_is_missing():
    """On a Python without BaseException.add_note (3.10) the note still lands in __notes__."""
    w = torch.randn(3, requires_grad=True)
    tr = gl.trace(explain_errors=True)
    with pytest.raises(_NoAddNote) as info:
        with tr:
            try:
                (w * 2).backward()
            except RuntimeError as exc:
                raise _NoAddNote(str(exc)) from None
    assert not hasattr(info.value, "add_note")
    assert any("single number" in n for n in info.value.__notes__)


# -- the highlighted path renders -----------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("graphlens.render") is None, reason="graphlens.render is not available")
def test_to_dot_highlights_path():
    """Explanation.to_dot draws the graph with the path highlighted (every highlighted id exists in the graph)."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    loss = h.sum()
    e = explain(h, loss)
    plain = e.graph.to_dot()
    lit = e.to_dot()
    assert lit.source != plain.source
    assert e.to_dot(view="function").source
    assert all(p in e.graph for p in e.path)


def test_a_grad_that_is_already_there_is_reported_with_its_value():
    """With no root, a leaf holding .grad is answered grad_ok with the accumulated value, not a guess."""
    other = (torch.tensor([5.0], requires_grad=True) * 2).sum()
    p = torch.tensor([1.0], requires_grad=True)
    (p * 2).sum().backward()
    (p * 2).sum().backward()
    e = explain(p)
    assert e.reasons == ("grad_ok",) and e.tensor_name == "p"
    assert "p.grad is set: [4]" in str(e) and "zero_grad" in str(e)
    assert torch.equal(p.grad, torch.tensor([4.0]))
    del other


def test_no_guess_among_several_unrelated_outputs():
    """With no root and several scalar outputs that do not use the tensor, explain does not pick one."""
    q = torch.tensor([1.0], requires_grad=True)
    s1 = (torch.ones(1, requires_grad=True) * 2).sum()
    s2 = (torch.ones(1, requires_grad=True) * 3).sum()
    e = explain(q)
    assert "s1" not in str(e) and "s2" not in str(e)
    assert "no root was given" in str(e)


class _KeepsCtx(torch.autograd.Function):
    """Multiplies by a tensor it keeps as a ctx attribute (not save_for_backward)."""

    @staticmethod
    def forward(ctx, x, other):
        ctx.other = other
        return x * other

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.other, None


def test_ctx_attribute_is_blamed_only_when_it_is_the_input_changed_since():
    """A ctx tensor is blamed when it is an input of the call changed in place after it, never for a tensor graphlens cannot place."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    other = w * 2                                   # an input of the call, changed after it: blamed
    loss = _KeepsCtx.apply(w, other).sum()
    other.mul_(5)
    assert "ctx_attribute_changed" in explain(w, loss).reasons

    w2 = torch.tensor([1.0, 2.0], requires_grad=True)
    base = w2 * 2
    kept = base + 1                                 # not an input: the call gets `base`
    loss2 = _KeepsCtx.apply(w2, base).sum()
    loss2.grad_fn.next_functions[0][0].other = kept  # (what a closure over `kept` would do)
    kept.mul_(5)
    assert "ctx_attribute_changed" not in explain(w2, loss2).reasons

    w3 = torch.tensor([1.0, 2.0], requires_grad=True)
    leaf = torch.tensor([3.0, 4.0])                 # no history: before and after look alike
    loss3 = _KeepsCtx.apply(w3, leaf).sum()
    leaf.mul_(5)
    assert "ctx_attribute_changed" not in explain(w3, loss3).reasons


def test_a_tensor_the_trace_could_not_see_being_made_gets_a_code_lead():
    """A legacy torch.FloatTensor([...]) built from .tolist() values bypasses the mode; the traced answer reads the code that made it."""
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with gl.trace() as tr:
        signs = torch.FloatTensor([float(v > 0) for v in w.tolist()])
        penalty = (signs * 2.0).sum()
    e = explain(penalty, tr)
    assert e.reasons[:2] == ("requires_grad_false", "cut_by_python_value")
    assert "signs = torch.FloatTensor(" in e.line and "signs" in str(e)


def test_data_from_outside_the_block_gets_no_code_lead():
    """A tensor made before the trace by an ordinary factory is not blamed as a cut: the answer stays the general one."""
    data = torch.randn(3)
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def scaled(t):
        return t * 2.0

    with gl.trace() as tr:
        target = scaled(data)
        loss = ((w - target) ** 2).sum()
    e = explain(target, tr)
    assert e.reason == "requires_grad_false" and "cut_by_python_value" not in e.reasons
    assert "read your code" not in str(e)


def test_inplace_on_a_view_of_a_leaf_names_the_view_and_its_leaf():
    """v = p[:2]; v.mul_(2) is explained as an in-place change of v, a view of the leaf p (not 'a view of v')."""
    p = torch.ones(3, requires_grad=True)
    v = p[:2]
    try:
        v.mul_(2)
    except RuntimeError as exc:
        e = explain_error(exc)
    assert e.reasons == ("inplace_leaf",) and e.tensor_name == "v"
    assert "v, a view of p" in str(e) and "a view of v" not in str(e)


def test_copy_fix_example_uses_the_tensors_shape():
    """The example fix for a non-leaf copy uses the tensor's own shape, not a fixed one."""
    w = torch.randn(4, 5, requires_grad=True) * 0.01
    loss = (w * 2).sum()
    e = explain(w, loss)
    assert "is_a_copy" in e.reasons and "torch.randn(4, 5)" in e.fix


@pytest.mark.parametrize("block", ["torch.no_grad()", "torch.set_grad_enabled(False)", "torch.inference_mode()"])
def test_a_loss_computed_with_gradients_off_gets_a_code_lead(block, tmp_path):
    """Without a trace, a root computed inside a with-block that turns gradients off is named from the code: the block, the line, a lead."""
    src = tmp_path / "prog.py"
    src.write_text(
        "import torch\nimport graphlens as gl\n\n"
        "def run():\n"
        "    p = torch.ones(2, requires_grad=True)\n"
        f"    with {block}:\n"
        "        out = (p * 3).sum()\n"
        "    return gl.explain(p, out)\n"
    )
    spec = importlib.util.spec_from_file_location("prog_grad_off", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    e = mod.run()
    assert e.reasons[:2] == ("not_reachable", "cut_by_no_grad")
    assert e.lineno == 7 and "out = (p * 3).sum()" in e.line and f"with {block}:" in str(e) and "read your code" in str(e)


def test_enable_grad_inside_no_grad_is_not_blamed():
    """A root computed under torch.enable_grad() nested in no_grad is not said to be made without gradients."""
    p = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        with torch.enable_grad():
            out = (p * 3).sum()
    w = torch.ones(2, requires_grad=True)
    e = explain(w, out)
    assert "cut_by_no_grad" not in e.reasons


# -- never state what the given trace or graph cannot know ----------------------------------


def test_a_tensor_from_another_trace_keeps_its_live_grad():
    """explain(w1, tr2) for a w1 made and backpropagated in another trace says w1.grad is set (its value) and that tr2 never recorded it, never that it is None."""
    with gl.trace() as tr1:
        w1 = torch.ones(2, requires_grad=True)
        loss1 = (w1 * 3).sum()
        loss1.backward()
    w2 = torch.ones(2, requires_grad=True)
    with gl.trace() as tr2:
        loss2 = (w2 * 5).sum()
        loss2.backward()
    e = explain(w1, tr2)
    text = str(e)
    assert e.reasons == ("not_reachable", "grad_set_elsewhere", "not_recorded") and e.tensor_name == "w1"
    assert "w1.grad is set ([3, 3])" in text and "never recorded w1" in text
    assert "is None" not in text and "will be None" not in text
    assert explain(w1, tr1).reasons == ("grad_ok",)  # the trace that recorded it answers as before


def test_a_tensor_made_outside_any_trace_is_not_answered_from_the_trace():
    """A tensor made outside the trace, with a .grad from a backward outside it: its value and that the trace did not record it, whether or not the trace's root is still alive."""
    w0 = torch.ones(2, requires_grad=True)
    (w0 * 3).sum().backward()
    w2 = torch.ones(2, requires_grad=True)
    with gl.trace() as tr2:
        loss2 = (w2 * 5).sum()
        loss2.backward()
    alive = explain(w0, tr2)
    assert "not_recorded" in alive.reasons and "w0.grad is set ([3, 3])" in str(alive) and "is None" not in str(alive)
    del loss2  # the trace's root is gone: only the live tensor is left to answer from
    gone = explain(w0, tr2)
    assert gone.reasons == ("grad_ok", "not_recorded") and gone.tensor_name == "w0"
    assert "w0.grad is set: [3, 3]" in str(gone) and "never recorded w0" in str(gone)
    fresh = torch.ones(2, requires_grad=True)
    unknown = explain(fresh, tr2)
    assert unknown.reasons == ("no_root", "not_recorded") and "no root was given" not in str(unknown)


def test_a_root_that_does_not_reach_a_tensor_with_a_grad_does_not_say_it_is_none():
    """explain(w, loss2) where loss2 does not use w but an earlier backward gave w a .grad: the grad is set, and loss2's backward adds nothing to it."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    v = torch.tensor([1.0, 2.0], requires_grad=True)
    loss2 = (v * 5).sum()
    e = explain(w, loss2)
    assert e.reasons[:2] == ("not_reachable", "grad_set_elsewhere")
    assert "w.grad is set ([3, 3]), but not by loss2" in str(e) and "is None" not in str(e)


def test_a_failing_root_the_trace_never_saw_is_not_answered_with_another_record():
    """backward on a tensor made outside the trace: explain_error(err, tr) does not describe another tensor of the trace (one made under no_grad) as the culprit."""
    w = torch.ones(2, requires_grad=True)
    with gl.trace() as tr:
        with torch.no_grad():
            y = w * 2
        (w * 3).sum().backward()
    err = _raise(lambda: torch.ones(2).sum().backward())
    e = explain_error(err, tr)
    assert e.reasons == ("no_grad_fn", "not_recorded") and e.tensor_id is None
    assert e.tensor_name != "y" and "created_in_no_grad" not in e.reasons and "made by mul" not in str(e)
    assert y.requires_grad is False  # (the trace's record that the old answer described instead)


def test_an_error_message_alone_names_no_tensor_of_the_trace():
    """explain_error(message, tr) without a traceback names no tensor: the trace's last leaf would be a guess."""
    with gl.trace() as tr:
        w = torch.ones(2, requires_grad=True)
        (w * 3).sum().backward()
    e = explain_error("a leaf Variable that requires grad is being used in an in-place operation.", tr)
    assert e.reasons == ("inplace_leaf",) and e.tensor_name is None and " w," not in str(e)


def test_a_scripts_own_error_gets_no_autograd_reading():
    """A ValueError, even one quoting a PyTorch message, is unknown_error with no fix; a RuntimeError raised outside backward gets no anomaly-mode fix."""
    try:
        raise ValueError("Trying to backward through the graph a second time, says my config checker")
    except ValueError as exc:
        e = explain_error(exc)
    assert e.reasons == ("unknown_error",) and e.fix is None
    assert "PyTorch" not in str(e) and "anomaly" not in str(e) and "ValueError" in str(e)
    err = _raise(lambda: torch.ones(2, 2) @ torch.ones(3, 2))
    e = explain_error(err)
    assert e.reasons == ("unknown_error",) and "anomaly" not in (e.fix or "") and "PyTorch said" not in str(e)


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_a_none_grad_of_a_nonleaf_is_not_blamed_on_an_update_that_cannot_have_made_it():
    """w = randn(..., requires_grad=True) - 1 before a loop whose update reads w.grad: w is named as a non-leaf, but the update is not blamed (w's first value is made by the same op)."""
    x = torch.ones(4, 3)

    def train():
        w = torch.randn(3, requires_grad=True) - 1
        for step in range(2):
            loss = (x @ w).sum()
            loss.backward()
            w = w - w.grad * 0.1

    try:
        train()
    except TypeError as exc:
        e = explain_error(exc)
    assert e.reasons == ("grad_is_none", "nonleaf_not_retained") and e.tensor_name == "w" and e.op == "SubBackward0"
    assert "rebound_leaf" not in e.reasons and "earlier iteration" not in str(e) and "not a leaf" in str(e)


def test_a_result_computed_from_an_unseen_leaf_gets_a_fix_that_keeps_its_values():
    """x_adv computed from a leaf no visible variable holds (an attack's): the fix detaches it into a new leaf, and nothing claims the leaf was never stored."""
    def fgsm(img):
        x = img.clone().requires_grad_()
        return (x + 0.1 * torch.sign(x.detach())).clamp(0, 1)

    x_adv = fgsm(torch.rand(3))
    loss = (x_adv * 2).sum()
    loss.backward()
    e = gl.explain(x_adv, loss)
    assert "is_a_copy" in e.reasons and "x_adv = x_adv.detach().requires_grad_()" in e.fix
    assert "was never stored)" not in str(e)


def test_an_explanation_reads_a_trace_once_and_keeps_nothing():
    """Within one explanation a trace's graph and replay are each built once and handed out again; outside it, and after explain(), each call reads the tensors afresh."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        loss = (w * 3).sum()
        loss.backward()
    assert tr.graph() is not tr.graph()
    from graphlens.explain.context import one_reading

    with one_reading(tr):
        graph = tr.graph()
        assert tr.graph() is graph and tr.replay() is tr.replay() and tr.replay().graph is graph
    assert tr.graph() is not graph
    assert explain(w, tr).reasons == ("grad_ok",)
    assert tr._read_once is None
    w.grad = None
    assert tr.graph().find("w").grad is None  # (read afresh: the explanation's reading is gone)
