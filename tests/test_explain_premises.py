"""No explanation states a premise its recorded graph contradicts.

Every explanation the real-world corpus (``tests/realworld``) and the explain tests
(``tests/test_explain.py``, ``tests/test_explain_errors.py``) produce is collected while those tests run (in a child pytest
process, so that this file stays one test among others) and held against its graph by
:func:`graphlens.explain.premises.check`: each structured fact (``Explanation.facts``) and
each premise its sentences state ("w does not require grad", "loss does not depend on w",
"x is not a leaf") must agree with the graph's ``TensorNode.requires_grad`` / ``is_leaf``,
with what the roots' backward graph reaches, and with the op names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens.explain import Explanation
from graphlens.explain.premises import FACTS, check, stated

ROOT = Path(__file__).resolve().parent.parent


class Collector:
    """A pytest plugin for the child process: every Explanation made while a test runs is
    checked the moment it is made (its graph's live tensors are still as it saw them), and
    what was found is written to ``path`` as JSON at the end of the session."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.current = "<collection>"
        self.seen: list[dict] = []
        self._init = None

    def pytest_sessionstart(self, session) -> None:
        original = Explanation.__init__
        collector = self

        def recording_init(e, *args, **kwargs):
            original(e, *args, **kwargs)
            try:
                problems = check(e)
                n = len(stated(e))
            except Exception as exc:  # noqa: BLE001 - a checker failure is a finding too
                problems, n = [f"the checker raised {type(exc).__name__}: {exc}"], 0
            collector.seen.append({
                "test": collector.current, "reasons": list(e.reasons), "text": str(e)[:600], "graph": e.graph is not None,
                "premises": n, "facts": [list(map(str, f)) for f in getattr(e, "facts", ())], "problems": problems,
            })

        self._init = original
        Explanation.__init__ = recording_init

    def pytest_runtest_setup(self, item) -> None:
        self.current = item.nodeid

    def pytest_sessionfinish(self, session) -> None:
        if self._init is not None:
            Explanation.__init__ = self._init
        Path(self.path).write_text(json.dumps(self.seen))


_CHILD = """
import sys, importlib.util, pytest
spec = importlib.util.spec_from_file_location("premise_plugin", {plugin!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-x", *{paths!r}], plugins=[mod.Collector({out!r})]))
"""


@pytest.fixture(scope="module")
def corpus_explanations(tmp_path_factory) -> list[dict]:
    out = str(tmp_path_factory.mktemp("premises") / "seen.json")
    paths = [str(ROOT / "tests" / "realworld"), str(ROOT / "tests" / "test_explain.py"),
             str(ROOT / "tests" / "test_explain_errors.py")]
    code = _CHILD.format(plugin=str(Path(__file__).resolve()), paths=paths, out=out)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"the corpus did not pass in the child process:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(Path(out).read_text())


def test_every_corpus_explanation_states_only_premises_the_graph_holds(corpus_explanations):
    """Across the corpus and the explain tests, no explanation states a premise its graph contradicts."""
    checked = [s for s in corpus_explanations if s["graph"]]
    assert len(checked) > 150, f"only {len(checked)} explanations with a graph were collected"
    bad = [s for s in corpus_explanations if s["problems"]]
    report = "\n".join(f"{s['test']}: {p}\n    {s['text'][:300]!r}" for s in bad for p in s["problems"])
    assert not bad, f"{len(bad)} explanation(s) state premises the graph contradicts:\n{report}"


def test_the_corpus_states_premises_as_structured_facts(corpus_explanations):
    """Explanations of the corpus carry structured facts, and only of the kinds the checker knows."""
    with_facts = [s for s in corpus_explanations if s["facts"]]
    assert len(with_facts) > 100
    kinds = {f[1] for s in with_facts for f in s["facts"]}
    assert kinds <= set(FACTS), kinds - set(FACTS)
    assert {"requires_grad", "reached", "is_leaf", "op"} <= kinds


def _histc_trace():
    x = torch.tensor([0.5, -1.0, 1.5, 0.2], requires_grad=True)
    try:
        with gl.trace() as tr:
            hist = torch.histc(x * 2, bins=4, min=-2, max=2)
            loss = (hist - 1).pow(2).mean()
            loss.backward()
    except RuntimeError as exc:
        return x, tr, exc
    pytest.fail("backward through torch.histc raised nothing")


def test_checker_flags_the_false_premise_about_histc_inputs():
    """The sentence graphlens used to give for a histc cut ("the tensors it was computed from ... do not require grad") is flagged: x requires grad."""
    x, tr, _ = _histc_trace()
    g = tr.graph()
    loss = next(t for t in g.tensors if t.name == "loss")
    old = Explanation(
        ["no_grad_fn"],
        ["backward was called on loss, which does not require grad and has no grad_fn: no graph leads back from it.",
         "The tensors it was computed from, as far as the trace saw them, do not require grad."],
        tensor_name="loss", tensor_id=loss.id, graph=g,
    )
    problems = check(old)
    assert len(problems) == 1 and "requires_grad=False" in problems[0] and "(x): True" in problems[0], problems


def test_checker_flags_a_false_structured_fact():
    """A structured fact the graph contradicts (x does not require grad; loss reaches x) is flagged, a true one is not."""
    x, tr, _ = _histc_trace()
    g = tr.graph()
    xid = next(t.id for t in g.tensors if t.name == "x")
    histc = next(o.id for o in g.ops if o.forward == "histc")
    wrong = Explanation(["no_grad_fn"], ["..."], graph=g, facts=[(xid, "requires_grad", False), (xid, "reached", True)])
    right = Explanation(["no_grad_fn"], ["..."], graph=g, facts=[(xid, "requires_grad", True), (xid, "reached", False),
                                                                 (histc, "op", "histc")])
    assert len(check(wrong)) == 2 and check(right) == []


def test_checker_flags_parameters_do_when_every_parameter_is_frozen():
    """A fix that says "(parameters do)" [require grad] is flagged when every parameter in the graph is frozen."""
    net = torch.nn.Linear(3, 1)
    net.requires_grad_(False)
    try:
        with gl.trace(module=net) as tr:
            net(torch.ones(2, 3)).sum().backward()
    except RuntimeError:
        pass
    e = Explanation(["no_grad_fn"], ["backward was called on a tensor without grad_fn."], graph=tr.graph(),
                    fix="Make sure the leaves the loss is computed from require grad (parameters do).")
    assert any("requires_grad=True" in p for p in check(e))


def test_today_histc_answer_states_no_false_premise():
    """graphlens's own answers about the histc program (explain_error and explain, traced) pass the checker and name histc."""
    x, tr, exc = _histc_trace()
    for e in (gl.explain_error(exc, tr), gl.explain(x, tr)):
        assert check(e) == [], (str(e), check(e))
        assert e.op == "histc", str(e)


_CALLS = {  # how to call each op of NONDIFFERENTIABLE on a float tensor
    "histc": lambda x: torch.histc(x, bins=3), "full_like": lambda x: torch.full_like(x, 2.0),
    "randint_like": lambda x: torch.randint_like(x, 5), "new_zeros": lambda x: x.new_zeros(2),
    "new_ones": lambda x: x.new_ones(2), "new_empty": lambda x: x.new_empty(2), "new_full": lambda x: x.new_full((2,), 1.0),
    "_values": lambda x: x.to_sparse()._values(),  # (the sparse tensor requires grad: its raw values have no history)
}


def test_the_op_tables_graphlens_states_facts_from_hold_on_this_torch():
    """Each op graphlens calls non-differentiable gives a result without grad_fn from an input that requires grad, and each zero-derivative node gives a zero gradient."""
    from graphlens.explain.cuts import NONDIFFERENTIABLE, ZERO_DERIVATIVE, _differentiable

    x = torch.tensor([0.3, -1.2, 2.5], requires_grad=True)
    with torch.random.fork_rng():
        for name in NONDIFFERENTIABLE:
            out = _CALLS.get(name, lambda t: getattr(torch, name)(t))(x)
            assert out.grad_fn is None and not out.requires_grad and out.is_floating_point(), name
    ops = {"RoundBackward": torch.round, "FloorBackward": torch.floor, "CeilBackward": torch.ceil,
           "SignBackward": torch.sign, "SgnBackward": torch.sgn, "TruncBackward": torch.trunc}
    assert set(ops) == ZERO_DERIVATIVE
    for node, fn in ops.items():
        y = fn(x * 1.5)
        assert type(y.grad_fn).__name__.startswith(node), node
        (g,) = torch.autograd.grad(y.sum(), x)
        assert g.abs().sum() == 0, node
    assert _differentiable("exp") and _differentiable("__rsub__") and not _differentiable("histc")
