"""explain_error on the messages torch can raise: the table of tests/data/autograd_messages.json, and real programs.

The table lists what torch 2.13's autograd, optimizers, module hooks and checkpoint raise, with the reason code
graphlens gives (or ``unknown``); every row is run here.  The programs below produce the important errors for
real, on tiny CPU tensors, and check the facts of the answer: reason, tensor, op, line, fix.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from graphlens.explain import ERROR_REASONS, REASONS

TABLE = json.loads((Path(__file__).parent / "data" / "autograd_messages.json").read_text())
ROWS = TABLE["messages"]

#: Words of the two fixes that must stay with their own errors: an in-place change, anomaly mode.
INPLACE_FIX = ("out-of-place", "out of place", "inplace=False", "clone() it", "inplace=True")
ANOMALY_FIX = ("anomaly",)


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the program may raise any error
        return exc
    pytest.fail(f"{fn.__name__} raised nothing")


def _traced(fn):
    try:
        with gl.trace() as tr:
            fn()
    except Exception as exc:  # noqa: BLE001
        return gl.explain_error(exc, tr)
    pytest.fail(f"{fn.__name__} raised nothing inside the trace")


# -- the table -------------------------------------------------------------------------------------


def test_table_rows_are_well_formed():
    """Every row has a message, a source and a known reason code (or unknown), and ids are unique."""
    assert len(ROWS) >= 80
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["message"] and r["source"], r["id"]
        assert r["reason"] == "unknown" or r["reason"] in ERROR_REASONS, r["id"]
        assert r.get("alone", r["reason"]) == "unknown" or r.get("alone", r["reason"]) in REASONS, r["id"]
        assert r["about"] in (None, "inplace", "anomaly"), r["id"]


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_every_message_gets_its_code_or_an_honest_unknown(row):
    """A message of the table gets its reason code; one graphlens does not know says so and quotes it."""
    e = gl.explain_error(row["message"])
    want = row.get("alone", row["reason"])
    if want == "unknown":
        assert e.reasons == ("unknown_error",)
        assert "does not recognise" in str(e)
        assert row["message"].strip().splitlines()[0].strip()[:60] in str(e)  # (its first line, as quoted)
        assert e.fix is None
    else:
        assert e.reason == want, str(e)
        assert "does not recognise" not in str(e)
    # (the answer of a handler that failed would be the bare fallback, "PyTorch raised: ...")
    assert not str(e).startswith("PyTorch raised:")


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_every_message_is_answered_by_its_handler_with_a_trace_too(row, small_trace):
    """With an unrelated trace, or raised as its own exception type, each message is still answered by its handler."""
    kind = {"RuntimeError": RuntimeError, "ValueError": ValueError, "TypeError": TypeError}.get(row["exception"], RuntimeError)
    for answer in (gl.explain_error(row["message"], small_trace), gl.explain_error(kind(row["message"]))):
        assert not str(answer).startswith("PyTorch raised:"), str(answer)
        assert answer.tensor_name != "w"  # (the trace's only tensor has nothing to do with the message)


@pytest.fixture(scope="module")
def small_trace():
    with gl.trace() as tr:
        w = torch.ones(2, requires_grad=True)
        (w * 3).sum().backward()
    return tr


def test_no_inplace_or_anomaly_fix_on_an_error_about_neither():
    """Over the whole table, only errors about an in-place change or anomaly mode get those fixes."""
    wrong = []
    for row in ROWS:
        fix = gl.explain_error(row["message"]).fix or ""
        if row["about"] != "inplace" and any(w in fix for w in INPLACE_FIX):
            wrong.append((row["id"], "in-place fix", fix))
        if row["about"] is None and any(w in fix for w in ANOMALY_FIX):
            wrong.append((row["id"], "anomaly fix", fix))
    assert wrong == []


def test_table_counts():
    """The table covers at least 100 messages, most of them recognised, the rest honestly unknown."""
    known = [r for r in ROWS if r["reason"] != "unknown"]
    assert len(ROWS) >= 100 and len(known) >= 55 and len(ROWS) - len(known) >= 30


# -- real programs: optimizers -------------------------------------------------------------------


def test_optimizer_refuses_a_to_copy_and_the_fix_remakes_it_as_a_leaf():
    """A .double() copy given to an optimizer is named, with ToCopyBackward0 and a fix that makes the copy the leaf."""
    def program():
        w = torch.zeros(3, requires_grad=True).double()
        torch.optim.SGD([w], lr=0.1)

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("optimizer_nonleaf",) and e.tensor_name == "w" and e.op == "ToCopyBackward0"
    assert "w = torch.zeros(3, requires_grad=True).double()" in e.line
    assert "(torch.zeros(3).double()).requires_grad_()" in e.fix


def _two_backwards(step):
    torch.manual_seed(0)
    D = nn.Linear(3, 1)
    opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
    fake = torch.randn(4, 3, requires_grad=True)  # (a generator's output: D's weight is saved for its gradient)
    out = D(fake)
    loss_d = out.mean()
    loss_g = -out.mean()
    loss_d.backward(retain_graph=True)
    step(opt_D, D)
    loss_g.backward()


def test_a_plain_sgd_step_between_backwards_is_read_from_the_code():
    """SGD without momentum keeps no state, yet the opt_D.step() line before the backward names the step."""
    def program():
        _two_backwards(lambda opt_D, D: opt_D.step())

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("inplace_saved",)  # the step ran in a helper: no opt_D.step() line in the failing function
    assert e.tensor_name is None or "weight" in e.tensor_name

    def inline():
        torch.manual_seed(0)
        D = nn.Linear(3, 1)
        opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
        out = D(torch.randn(4, 3, requires_grad=True))
        loss_d, loss_g = out.mean(), -out.mean()
        loss_d.backward(retain_graph=True)
        opt_D.step()
        loss_g.backward()

    e = gl.explain_error(_raised(inline))
    assert e.reasons == ("inplace_saved", "optimizer_step_inplace") and e.tensor_name == "D.weight"
    assert e.line == "opt_D.step()" and "loss_g.backward() before opt_D.step()" in e.fix
    assert not any(w in e.fix for w in ("out-of-place", "clone()"))


def test_a_hand_written_update_between_backwards_is_not_blamed_on_an_optimizer():
    """A no_grad update of a parameter between two backwards: the parameter is named, no optimizer step is claimed."""
    def program():
        w = torch.ones(3, requires_grad=True)
        x = torch.randn(4, 3, requires_grad=True)
        out = x @ w
        out.sum().backward(retain_graph=True)
        with torch.no_grad():
            w -= 0.1 * w.grad
        (out * out).sum().backward()

    exc = _raised(program)
    e = gl.explain_error(exc)
    assert e.reasons == ("inplace_saved",) and e.tensor_name == "w" and e.line == "w -= 0.1 * w.grad"
    assert "no_grad" in str(e) and "graphlens read your code" in str(e) and "optimizer_step_inplace" not in e.reasons
    assert not any(w in e.fix for w in ("out-of-place", "clone()")) and "after every backward" in e.fix
    t = _traced(program)
    assert t.tensor_name == "w" and t.line == "w -= 0.1 * w.grad" and "optimizer_step_inplace" not in t.reasons


def test_a_data_tensor_changed_in_place_is_not_taken_for_a_parameter_of_its_shape():
    """x.add_(1) on data that a product with a parameter of the same shape and version saved: no parameter is blamed."""
    def program():
        w = nn.Parameter(torch.empty(3, 3))
        nn.init.ones_(w)  # (version 1, like x below)
        x = torch.ones(3, 3)
        y = x * w
        x.add_(1)
        y.sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("inplace_saved",) and e.tensor_name != "w" and "parameter" not in str(e)


# -- real programs: in-place changes -------------------------------------------------------------


def test_functional_relu_inplace_on_a_parameter_names_the_activation():
    """F.relu(p, inplace=True) on a leaf parameter: inplace_leaf + inplace_activation, op relu_, fix without inplace."""
    def program():
        p = nn.Parameter(torch.ones(2))
        F.relu(p, inplace=True)

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("inplace_leaf", "inplace_activation") and e.tensor_name == "p" and e.op == "relu_"
    assert "drop inplace=True" in e.fix and "torch.no_grad()" not in e.fix


def test_an_inplace_add_under_a_full_backward_hook_names_the_hooked_module():
    """y += 1 on the output of a module with a full backward hook: backward_hook_inplace on lin, op add_, fix a clone."""
    def program():
        lin = nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda m, gi, go: None)
        y = lin(torch.randn(1, 2))
        y += 1

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("backward_hook_inplace",) and e.op == "add_" and "lin's full backward hook" in str(e)
    assert "clone" in e.fix


def test_a_custom_function_returning_a_view_changed_in_place():
    """A Function whose forward returns a view of its input, changed in place: custom_fn_view_inplace, naming the class."""
    class Ident(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.view_as(a)

        @staticmethod
        def backward(ctx, g):
            return g

    def program():
        y = Ident.apply(torch.ones(2, requires_grad=True) * 1)
        y.mul_(2)

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("custom_fn_view_inplace",) and e.op == "mul_" and e.tensor_name == "y"
    assert "Ident.forward returns" in str(e) and "clone()" in e.fix


# -- real programs: hooks and custom Functions ----------------------------------------------------


def test_a_tensor_hook_of_another_shape_names_the_tensor_and_its_shape():
    """A tensor hook returning g.sum(0): hook_changed_gradient on y, at the hook's line, asking for y's shape."""
    def program():
        x = torch.randn(2, 3, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g.sum(0))
        y.sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("hook_changed_gradient",) and e.tensor_name == "y" and e.op == "<lambda>"
    assert "y.register_hook(lambda g: g.sum(0))" in e.line and "[2, 3]" in e.fix


def test_a_tensor_hook_of_another_dtype_says_both_types():
    """A tensor hook returning g.double(): the answer names both types."""
    def program():
        x = torch.randn(2, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g.double())
        y.sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("hook_changed_gradient",) and "torch.DoubleTensor instead of torch.FloatTensor" in str(e)


def test_a_grad_fn_hook_graphlens_cannot_place_is_said_so():
    """A hook on a grad_fn (no tensor or module holds it): recognised, and the answer says where it looked."""
    def program():
        x = torch.randn(2, 3, requires_grad=True)
        y = x @ torch.randn(3, 4)
        y.grad_fn.register_prehook(lambda go: (go[0][:1],))
        y.sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("hook_changed_gradient",) and "did not find" in str(e) and e.tensor_name is None


def test_a_full_backward_hook_returning_two_for_one():
    """A full backward hook returning two gradients for one input names the module and the count."""
    def program():
        lin = nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
        lin(torch.randn(3, 2, requires_grad=True)).sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("hook_wrong_count",) and "registered on lin" in str(e) and "1 value(s)" in e.fix


def test_a_builtin_node_with_a_wrong_gradient_shape_is_not_blamed_on_a_custom_function():
    """Function MmBackward0 returned an invalid gradient: no custom Function is claimed, a hook is named as a possibility."""
    e = gl.explain_error("Function MmBackward0 returned an invalid gradient at index 0 - got [1, 1024] but expected shape "
                         "compatible with [1, 4096]")
    assert e.reasons == ("custom_fn_grad_shape",) and e.op == "MmBackward0"
    assert "cannot see which" in str(e) and "anomaly" not in (e.fix or "")


def test_a_hook_on_a_data_tensor_lists_the_possible_causes():
    """register_hook on a plain data tensor (no no_grad block): the answer names it and says what could cause it."""
    def program():
        data = torch.ones(2)
        data.register_hook(lambda g: g)

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("hook_no_requires_grad",) and e.tensor_name == "data"
    assert "Either" in str(e) and "if data.requires_grad" in e.fix


def test_a_hook_on_an_inference_tensor_says_inference_mode():
    """register_hook on a tensor made in inference_mode says so."""
    def program():
        with torch.inference_mode():
            t = torch.ones(2)
        t.register_hook(lambda g: g)

    e = gl.explain_error(_raised(program))
    assert "created_in_no_grad" in e.reasons and "inference_mode()" in str(e)


# -- real programs: anomaly mode ----------------------------------------------------------------------


def test_anomaly_nan_of_sqrt_at_zero():
    """sqrt at 0 with the gradient masked: anomaly_nan on SqrtBackward0, naming the variable, its line and the cause."""
    def program():
        x = torch.tensor([0.0, 4.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly():
                root = torch.sqrt(x)
                root[1:].sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("anomaly_nan",) and e.op == "SqrtBackward0" and e.tensor_name == "root"
    assert e.line == "root = torch.sqrt(x)" and "at 0" in str(e) and "clamp_min" in e.fix
    assert not any(w in e.fix for w in INPLACE_FIX)


# -- real programs: graphs freed by an earlier backward ------------------------------------------


def _running_total():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total_loss = 0
    for i in range(2):
        x, y = torch.randn(4, 3), torch.randn(4, 1)
        loss = F.mse_loss(model(x), y)
        total_loss += loss
        opt.zero_grad()
        total_loss.backward()
        opt.step()


@pytest.mark.parametrize("how", ["plain", "traced"])
def test_a_running_total_across_iterations_is_named_with_its_fix(how):
    """total_loss += loss across iterations: carried_state on total_loss, its line, the .item() fix, no retain_graph."""
    e = gl.explain_error(_raised(_running_total)) if how == "plain" else _traced(_running_total)
    assert e.reasons == ("graph_freed", "carried_state") and e.tensor_name == "total_loss"
    assert e.line == "total_loss += loss" and "total_loss += loss.item()" in e.fix
    assert "retain_graph" not in e.fix and "made loss" not in str(e) and "MseLossBackward0" not in str(e)


def test_a_trace_lists_only_what_an_earlier_backward_freed():
    """With a trace, the freed nodes listed are the earlier backward's only, not those the failing call ran itself, and the tensor that links to them is named."""
    def program():
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        a = (x * x).sum()
        a.backward()
        b = (x.exp() * 2).sum() + a
        b.backward()

    traced = _traced(program)
    assert "freed: MulBackward0" in str(traced) and "ExpBackward0" not in str(traced)
    assert traced.tensor_name == "a" and "a is used by two backward passes" in str(traced)
    plain = gl.explain_error(_raised(program))
    assert "ExpBackward0" in str(plain) and "Freed by an earlier backward" not in str(plain)


def test_an_lstm_state_carried_as_a_tuple_gets_detach_not_retain_graph():
    """(h, c) fed back into an LSTM across batches: carried_state, a detach() fix, never retain_graph=True."""
    def program():
        torch.manual_seed(0)
        lstm = nn.LSTM(2, 3, batch_first=True)
        head = nn.Linear(3, 1)
        opt = torch.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.1)
        h, c = torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)
        for step in range(2):
            out, (h, c) = lstm(torch.randn(1, 4, 2), (h, c))
            loss = head(out).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    e = gl.explain_error(_raised(program))
    assert "carried_state" in e.reasons and e.tensor_name in ("h", "c") and "detach()" in e.fix
    assert "retain_graph" not in e.fix


# -- plain Python errors from a .grad that is None -----------------------------------------------------


def test_zeroing_a_grad_before_the_first_backward_outside_a_loop():
    """p.grad.zero_() before the function's only backward: backward_not_run, from the code."""
    def program():
        w = torch.ones(2, requires_grad=True)
        w.grad.zero_()
        (w * 2).sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("grad_is_none", "backward_not_run") and e.tensor_name == "w"
    assert "before (w * 2).sum().backward()" in str(e) and "if w.grad is not None" in e.fix


def test_a_none_grad_after_a_backward_is_not_blamed_on_the_order():
    """After a backward that does not reach w, w.grad.data is None for another reason: no backward_not_run."""
    def program():
        w = torch.ones(2, requires_grad=True)
        v = torch.ones(2, requires_grad=True)
        (v * 2).sum().backward()
        w.grad.data.zero_()

    e = gl.explain_error(_raised(program))
    assert e.reason == "grad_is_none" and "backward_not_run" not in e.reasons


def test_an_unknown_error_in_backward_gets_no_fix():
    """A real autograd error graphlens does not know (a complex scalar's backward) is quoted, with no fix at all."""
    def program():
        (torch.randn(2, dtype=torch.cfloat, requires_grad=True) * 2).sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("unknown_error",) and e.fix is None and "real scalar outputs" in str(e)


# -- traced answers: the trace's facts, its origins, and premises that hold ------------------------


def _cached_gradient(create_graph):
    x = torch.randn(3, 2, requires_grad=True)
    cache = {}
    try:
        with gl.trace() as tr:
            if create_graph:
                cache["g"] = torch.autograd.grad((x * 2).sum(), x, create_graph=True)[0]
            else:
                cache["g"] = torch.autograd.grad((x ** 2).sum(), x)[0]
            penalty = cache["g"].pow(2).sum()
            penalty.backward()
    except RuntimeError as exc:
        return gl.explain_error(exc, tr)
    pytest.fail("backward through a gradient without graph raised nothing")


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_traced_gradient_is_named_as_the_call_made_it_and_create_graph_is_read_from_its_line(create_graph):
    """With a trace, the gradient torch.autograd.grad returned is the cause (a traced fact), and its line tells a missing create_graph from a constant."""
    from graphlens.explain.premises import check

    e = _cached_gradient(create_graph)
    made = e.graph.node(e.cause) if e.cause is not None else None
    assert made is not None and made.made_by == "autograd.grad", (e.cause, str(e))
    assert "cache['g'] is the gradient of x that torch.autograd.grad returned" in str(e)
    want, other = ("constant_gradient", "grad_without_create_graph") if create_graph else ("grad_without_create_graph", "constant_gradient")
    assert want in e.reasons and other not in e.reasons, e.reasons
    assert (e.cause, "requires_grad", False) in e.facts and check(e) == []


def test_a_create_graph_flag_from_a_variable_is_not_read_as_missing():
    """create_graph=flag (a variable): the lead says neither that create_graph was missing nor that the gradient is a constant."""
    def program(flag=True):
        x = torch.randn(3, requires_grad=True)
        first = torch.autograd.grad((x * 2).sum(), x, create_graph=flag)[0]
        first.sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("no_grad_fn", "gradient_without_graph"), e.reasons
    assert "without create_graph=True" not in str(e) and "Pass create_graph=True" not in e.fix


def test_a_traced_no_grad_fn_answer_carries_the_facts_of_its_cut():
    """The traced answer about a loss cut by histc carries the cut's premises as facts (histc, x requires grad), and they hold."""
    from graphlens.explain.premises import check

    x = torch.tensor([0.5, -1.0, 1.5], requires_grad=True)
    try:
        with gl.trace() as tr:
            hist = torch.histc(x * 2, bins=3, min=-2, max=2)
            loss = (hist - 1).pow(2).mean()
            loss.backward()
    except RuntimeError as exc:
        e = gl.explain_error(exc, tr)
    facts = {(f[1], f[2]) for f in e.facts}
    assert ("op", "histc") in facts and ("requires_grad", True) in facts and ("requires_grad", False) in facts, e.facts
    assert check(e) == []


def test_the_fallback_fix_does_not_claim_parameters_require_grad_when_one_is_frozen():
    """No cut found, one parameter frozen: the fix does not say "(parameters do)"."""
    def program():
        frozen = nn.Linear(2, 1)
        frozen.requires_grad_(False)
        head = nn.Linear(2, 1)  # noqa: F841 - (a parameter that requires grad, not used by the loss)
        loss = (frozen.weight * 2).sum()
        loss.backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("no_grad_fn",) and "(parameters do)" not in e.fix and "unless it was frozen" in e.fix


def test_an_op_outside_the_tables_is_named_as_the_cut_not_blamed_on_its_inputs():
    """A result without grad_fn from an op graphlens has no entry for (new_empty_strided): the op is the cut, and its input is not said to need no grad."""
    from graphlens.explain.premises import check

    x = torch.rand(4, requires_grad=True)
    try:
        with gl.trace() as tr:
            buf = (x * 2).new_empty_strided((4,), (1,))
            loss = (buf ** 2).sum()
            loss.backward()
    except RuntimeError as exc:
        e = gl.explain_error(exc, tr)
    assert e.reasons == ("no_grad_fn", "cut_by_nondifferentiable_op") and e.op == "new_empty_strided", str(e)
    assert "new_empty_strided((4,), (1,))" in e.line and "do not require grad" not in str(e) and check(e) == []


# -- real programs: custom Functions written the old way, or without backward; the non-leaf .grad warning ----------


class _Doubler(torch.autograd.Function):  # the old style: instance methods, called as an object
    def forward(self, x):
        return x * 2

    def backward(self, g):
        return g * 2


def test_a_legacy_function_is_named_with_the_static_method_fix():
    """Doubler()(x) with instance methods: custom_fn_legacy names the class, its line and the .apply fix."""
    def program():
        x = torch.ones(2, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch warns about instantiating a Function first)
            _Doubler()(x)

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("custom_fn_legacy",) and e.op == "_Doubler" and e.line == "_Doubler()(x)"
    assert "class _Doubler(torch.autograd.Function)" in str(e) and "@staticmethod" in e.fix and "_Doubler.apply(x)" in e.fix


class _Misspelt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backwards(ctx, g):  # (a typo: torch looks for backward)
        return g * 2


def test_a_function_without_backward_names_the_misspelt_method():
    """backward through a Function whose backward is misspelt: custom_fn_no_backward names the class and the method to rename."""
    def program():
        _Misspelt.apply(torch.ones(2, requires_grad=True)).sum().backward()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("custom_fn_no_backward",) and e.op == "_Misspelt"
    assert "a method named backwards" in str(e) and "Rename _Misspelt.backwards to backward" in e.fix


def test_the_non_leaf_grad_warning_is_explained():
    """The UserWarning torch gives for .grad of a non-leaf, passed as caught: nonleaf_grad_access, with retain_grad() in the fix."""
    x = torch.ones(2, requires_grad=True)
    h = x * 2
    h.sum().backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert h.grad is None
    e = gl.explain_error(caught[0].message)
    assert e.reasons == ("nonleaf_grad_access",) and "retain_grad()" in e.fix and "does not recognise" not in str(e)


def test_a_no_grad_view_whose_base_changed_is_recognised():
    """A view taken under no_grad whose base is changed in place with grad on (torch's "its base ... has been modified" variant): view_inplace_no_grad."""
    def program():
        base = torch.ones(3, requires_grad=True).clone()
        with torch.no_grad():
            view = base[:2]
        base.mul_(2)
        view.sum()

    e = gl.explain_error(_raised(program))
    assert e.reasons == ("view_inplace_no_grad",) and "its base" in str(e) and "no_grad" in str(e)


def test_a_value_taken_out_and_put_back_is_told_by_what_made_each_tensor():
    """With a trace, .item() then torch.tensor(...) is said with the op that made each tensor, not as "an unnamed tensor (t1).item()"."""
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    try:
        with gl.trace() as tr:
            s = a.sum().item()
            t = torch.tensor(s) * 2
            t.backward()
    except RuntimeError as exc:
        e = gl.explain_error(exc, tr)
    assert "cut_by_python_value" in e.reasons and "an unnamed tensor" not in str(e), str(e)
    assert "item() at line" in str(e) and "took the value of the result of sum" in str(e) and "made a new tensor" in str(e)


def test_a_non_scalar_backward_names_its_failing_line():
    """backward() of an unnamed [2, 2] result: the answer carries the failing line (e.line), the fix has no placeholder variable."""
    def program():
        w = torch.ones(2, requires_grad=True)
        (w[:, None] * w[None, :]).backward()

    e = gl.explain_error(_raised(program))
    assert e.reason == "nonscalar_backward" and "(w[:, None] * w[None, :]).backward()" in (e.line or "")
    assert "out.sum()" not in e.fix and ".sum()" in e.fix


def test_an_in_place_fix_never_names_an_unknown_tensor_x():
    """A saved tensor changed in place that graphlens cannot name: the fix says 'that tensor', never x (the program has an x of its own)."""
    def helper(x):
        y = torch.relu(x * 2)
        y.add_(1)  # changes ReLU's saved output, in a frame that is gone when backward fails
        return y.sum()

    def program():
        x = torch.ones(3, requires_grad=True)
        helper(x).backward()

    e = gl.explain_error(_raised(program))
    assert e.reason == "inplace_saved" and e.tensor_name is None
    assert " x" not in e.fix and "that tensor" in e.fix


def test_a_carried_state_of_a_sequentials_layer_is_fixed_in_python_syntax():
    """A state kept on a Sequential's second layer and carried across steps: the fix writes model[1].v_mem, never model.1.v_mem."""
    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.v_mem = torch.zeros(3)

        def forward(self, x):
            self.v_mem = self.v_mem * 0.5 + x
            return self.v_mem

    def program():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 3), Leaky())
        for _ in range(2):
            loss = model(torch.randn(3)).pow(2).sum()
            loss.backward()

    e = gl.explain_error(_raised(program))
    assert e.reason == "graph_freed" and "model[1].v_mem = model[1].v_mem.detach()" in e.fix and "model.1.v_mem =" not in e.fix


def test_a_non_scalar_autograd_grad_is_said_as_autograd_grad():
    """torch.autograd.grad on a [2] output without grad_outputs: the answer names autograd.grad and grad_outputs, not backward()."""
    def program():
        w = torch.ones(2, requires_grad=True)
        activs = w * 3
        torch.autograd.grad(activs, w)

    e = gl.explain_error(_raised(program))
    assert e.reason == "nonscalar_backward" and "torch.autograd.grad() was called on activs" in str(e)
    assert "grad_outputs=torch.ones_like(activs)" in e.fix and ".backward(" not in e.fix


def test_twin_critics_both_stepped_are_both_named():
    """Two critics' weights both fit the in-place message and both were stepped: the answer names one, says the other fits too, and orders the steps after the backward."""
    from torch.optim import Adam

    def program():
        torch.manual_seed(0)
        q1, q2, policy = nn.Linear(4, 1), nn.Linear(4, 1), nn.Linear(4, 4)
        q1_optim, q2_optim, policy_optim = Adam(q1.parameters()), Adam(q2.parameters()), Adam(policy.parameters())
        states = torch.randn(8, 4)
        sampled_action = policy(states)
        policy_loss = -torch.min(q1(sampled_action), q2(sampled_action)).mean()
        q1_loss, q2_loss = q1(states).pow(2).mean(), q2(states).pow(2).mean()
        q1_optim.zero_grad(); q1_loss.backward(); q1_optim.step()  # noqa: E702
        q2_optim.zero_grad(); q2_loss.backward(); q2_optim.step()  # noqa: E702
        policy_optim.zero_grad(); policy_loss.backward()  # noqa: E702

    e = gl.explain_error(_raised(program))
    assert "optimizer_step_inplace" in e.reasons and e.tensor_name in ("q1.weight", "q2.weight")
    other = "q1.weight" if e.tensor_name == "q2.weight" else "q2.weight"
    assert f"{other} fits the message as well" in str(e) and f"The same holds for {other}" in e.fix
    assert "clone()" not in e.fix


def test_a_transformed_parameter_given_to_an_optimizer_points_at_its_leaf():
    """A constrained parameter (exp of an unconstrained leaf) given to Adam: the answer says it is computed from one leaf and gives the optimizer that leaf (named where the frame keeps it), never a detached copy as the fix."""
    store = {"mu_unconstrained": torch.zeros(2, requires_grad=True)}

    def param(name):
        return store[name + "_unconstrained"].exp() + 0.0

    def program():
        torch.optim.Adam([param("mu")], lr=0.01)

    e = gl.explain_error(_raised(program))
    assert e.reason == "optimizer_nonleaf" and "computed from one leaf that requires grad" in str(e)
    assert "Give the optimizer store['mu_unconstrained']" in e.fix and "would train a copy" in e.fix and "randn" not in e.fix
