"""The benchmark scripts' floors run against this graphlens (their speed is measured in benchmarks/, not here)."""

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def floors():
    sys.path.insert(0, str(BENCH))
    try:
        import floors as module
        import run  # noqa: F401 - floors imports from it
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_every_walk_floor_records_the_ordered_edges_of_the_graph(floors):
    """The ordered walk, the flat saved walk and the facts floor agree on every node's ordered edges."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    loss = model(torch.randn(2, 3)).pow(2).mean()
    loss.backward(retain_graph=True)
    ordered = floors.ordered_walk(loss)
    assert floors.flat_saved_walk(loss) == ordered
    assert floors.facts_walk(loss) == ordered == floors.facts_walk(loss, saved=True)
    assert len(ordered) == len({id(r) for r in ordered}) > 5


def test_the_finiteness_price_runs_with_the_switches_it_turns_off(floors):
    """The NaN/inf price (issue 25) switches graphlens's checks off by name and puts them back."""
    from graphlens._live import facts, recorder

    before = (facts.finiteness, recorder._not_finite, facts._finite_head)
    import run

    rows = floors._finiteness_cost(run.interleaved, run.ratio, 1, 0.0, run.tiny_chain_step(20))
    assert {r["workload"] for r in rows} and all(r["with_checks"] > 0 and r["without_checks"] > 0 for r in rows)
    assert (facts.finiteness, recorder._not_finite, facts._finite_head) == before



def test_the_lean_trace_parts_time_the_walk_and_put_every_switched_part_back(floors):
    """The lean trace's parts switch the attribution and time the backward walk, then put both back as they were."""
    import importlib

    import run
    from graphlens._live.recorder import Recorder

    module = importlib.import_module("graphlens.trace")
    before = (module.call_from, Recorder.complete)
    parts = floors._lean_parts(run.interleaved, 1, 0.0, run.tiny_chain_step(20))
    assert parts["lean"] > 0 and parts["walk"] > 0  # (the walk ran, and was timed, in the lean samples)
    assert (module.call_from, Recorder.complete) == before

def test_the_collapse_floor_finds_the_chain_to_dot_draws(floors):
    """The collapse floor of a chain counts the same ops in its one chain node as to_dot's picture, and draws nothing more."""
    import re


    g = floors.chain_graph(700)
    text = floors.collapse_floor(g)
    drawn = g.to_dot().source
    assert re.search(r"MulBackward0 x700\b", text)
    assert re.search(r"MulBackward0 <B>×700</B>", drawn)
    assert text.count("[label=") == 1 + len(g.tensors)


def test_the_dot_floor_writes_the_same_text_with_or_without_saved_records(floors):
    """The floor of snapshot + to_dot reads saved records only when asked, and writes one line per node and edge either way."""
    import graphlens as gl

    x = torch.randn(3, requires_grad=True)
    y = (x * 2).exp().sum()
    g = gl.snapshot(y)
    text = floors.dot_floor(y, g)
    assert text == floors.dot_floor(y, g, saved=False)
    assert text.count("->") == len(g.edges) and text.count("[label=") == len(g.tensors) + len(g.ops)


def test_a_ratio_spread_is_the_quartiles_of_the_per_repeat_ratios(floors):
    """A target's spread pairs the sides within each repeat and gives the quartiles of those ratios."""
    res = {"a": {"times": [2.0, 9.0, 4.0, 6.0, 8.0]}, "b": {"times": [1.0, 3.0, 1.0, 1.0, 1.0]}}
    assert floors.iqr(res, "a", "b") == [3.0, 6.0]
    row = {"ops": 10, "to_dot_vs_text": 4.0, "iqr": {"to_dot_vs_text": floors.iqr(res, "a", "b")}}
    verdicts = floors.verdicts_f({"snapshot": [], "dot": [], "to_dot": [row], "trace": [], "models": []})
    assert verdicts["to_dot_vs_text[10]"].startswith("4.00 [quartiles 3.00–6.00] (target <= 2.0): missed")


def test_the_records_floor_reads_what_a_snapshot_keeps_of_saved_tensors(floors):
    """The records floor finds the graph's ordered edges, the same storage kinds as the
    snapshot's saved entries, and leaves a slot with a saved-tensor hook packed."""
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    unpacked = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(1) or t):
        hidden = (x * w).sin()
    y = (hidden * 2.0).exp().sum()
    read: list = []
    assert floors.records_walk(y, read) == floors.ordered_walk(y)
    assert unpacked == [] and "hidden" in read
    kinds = sorted(f[4] for f in read if isinstance(f, tuple) and len(f) == 6 and isinstance(f[4], str))
    import graphlens as gl

    shown = sorted(s.kind for op in gl.snapshot(y).ops for e in op.saved for s in e.storages)
    assert kinds == shown and "number" in kinds and "activation" in kinds


def test_no_verdict_against_a_walk_that_read_slower_than_a_floor_doing_more(floors):
    """A snapshot row whose ordered walk read slower than the facts floor (which does all the walk
    does and more) gets no met/missed verdict, and is read against the records floor instead."""
    row = {"graph": "g", "ordered_ms": 2.0, "flat_saved_vs_ordered": 1.4, "facts_vs_ordered": 0.43, "facts_saved_vs_ordered": 0.85,
           "records_vs_ordered": 1.89, "snapshot_nosaved_vs_ordered": 0.31, "snapshot_vs_ordered": 2.04}
    verdicts = floors.verdicts_f({"snapshot": [row], "dot": [], "to_dot": [], "trace": [], "models": []})
    assert "met" not in verdicts["snapshot_vs_ordered[g]"] and "not measured" in verdicts["snapshot_vs_ordered[g]"]
    assert "records floor 1.08" in verdicts["snapshot_vs_ordered[g]"]
    row["facts_vs_ordered"] = 1.9
    assert "(target <= 3.0): met" in floors.verdicts_f({"snapshot": [row], "dot": [], "to_dot": [], "trace": [], "models": []})["snapshot_vs_ordered[g]"]


def test_the_trace_records_floor_keeps_saved_tensors_and_lets_go_of_their_storages(floors):
    """The trace's records floor records each saved tensor with its storage's number, size and kind,
    and lets go of torch's weak references to the storages when its block ends."""
    x = torch.randn(4, requires_grad=True)
    mode = floors.FactsFloorMode(grads=False, records=True)
    with mode:
        y = (x * 2.0).exp()
        y.sum().backward()
    kinds = [r[4] for r in mode.recs if isinstance(r, tuple) and len(r) == 6 and isinstance(r[4], str)]
    assert "number" in kinds and "activation" in kinds
    assert mode.weak == [] and len(mode.storages) >= 2
    assert torch.equal(x.grad, 2.0 * (x * 2.0).exp().detach())


def test_steps_in_a_row_count_the_full_collections_each_side_makes_due(floors):
    """A side that keeps many tracked objects alive across young collections makes full collections due;
    a side that allocates nothing lasting makes none; the means are given against the plain side."""
    import gc

    kept: list = []

    def hoard():
        kept.append([[] for _ in range(30_000)])  # (lists: tracked for good; alive until the next step)
        if len(kept) > 1:
            kept.pop(0)

    def plain():
        sum(range(1000))

    was = gc.isenabled()
    gc.enable()
    try:
        out = floors.consecutive({"plain": plain, "hoard": hoard}, steps=8, rounds=1)
    finally:
        kept.clear()
        if not was:
            gc.disable()
    assert out["plain"]["full_per_step"] == 0 and out["plain"]["vs_plain"] == 1.0
    assert out["hoard"]["full_per_step"] > 0 and out["hoard"]["gc_ms_per_step"] > 0 and out["hoard"]["vs_plain"] > 1


def test_the_unrolled_lstm_cell_workload_has_its_rows_planned(floors):
    """The workload the row planner's growth is measured on (drawn with repeats=False) is wide enough to have its rows planned, and nothing collapses."""
    from graphlens.render import rows, to_dot

    g = floors.lstm_cell_graph(40)
    planned = []
    original = rows._plan
    rows._plan = lambda nodes, *a: planned.append(len(nodes)) or original(nodes, *a)
    try:
        source = to_dot(g, repeats=False).source
    finally:
        rows._plan = original
    assert planned and planned[0] == source.count("label=") - 1 > len(g.ops) // 2  # (every node but the legend)
    assert "weight_ih" in source and "chain of" not in source
    assert "repeating stretch" in to_dot(g).source  # (by default the stretch folds: what the row is not about)


def test_the_growth_part_flags_a_call_that_grows_faster_than_its_program():
    """Part (g) reads about 2 for a call linear in its size and flags one that is quadratic."""
    sys.path.insert(0, str(BENCH))
    try:
        import growth
    finally:
        sys.path.remove(str(BENCH))

    def linear(size):
        data = list(range(size * 2000))  # (milliseconds a call: long enough that caches don't skew the ratio)
        return lambda: sum(data)

    def quadratic(size):
        data = list(range(size))
        return lambda: sum(1 for a in data for b in data if a == b)

    # (this machine's neighbours can slow one size for a while: each call gets three tries, and a
    # growth() that timed the wrong thing would read wrong in every one)
    linear_ok = quadratic_ok = False
    for _ in range(3):
        rows = {r["call"]: r for r in growth.growth({"linear": linear, "quadratic": quadratic}, 600, samples=3)}
        linear_ok |= not rows["linear"]["superlinear"] and 1.5 < rows["linear"]["growth"] < growth.SUPERLINEAR
        quadratic_ok |= rows["quadratic"]["superlinear"] and rows["quadratic"]["growth"] > 3
        if linear_ok and quadratic_ok:
            break
    assert linear_ok and quadratic_ok


def test_the_model_split_times_each_side_and_puts_the_recorder_back(floors):
    """The model split times forward and backward on every side and leaves Recorder.record as it was."""
    pytest.importorskip("transformers")
    import model_split
    from graphlens._live.recorder import Recorder

    before = Recorder.record
    out = model_split.main(["--repeats", "1"])
    assert len(out) == 6 and all(fwd > 0 and bwd > 0 for fwd, bwd, _ in out.values())
    assert Recorder.record is before


def test_the_promises_floor_calls_from_the_users_line_and_walks_every_node_once(floors):
    """The promises floor makes a warning torch raises name the calling line, and records each node's ordered edges at backward."""
    import warnings

    x = torch.randn(3, requires_grad=True)
    mode = floors.FactsFloorMode(grads=False, saved=False, promises=True)
    with mode, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = torch.tensor(x) * x  # (copy-constructing from a tensor warns, from C++)
        line = sys._getframe().f_lineno - 1
        loss = (y * 2).sum()
        loss.backward()
    assert caught and caught[0].filename == __file__ and caught[0].lineno == line
    fns, stack = [], [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in fns:
            fns.append(fn)
            stack.extend(c for c, _ in fn.next_functions)
    for fn in fns:
        want = tuple((-1, 0) if c is None else (c._sequence_nr(), nr) for c, nr in fn.next_functions)
        assert mode.edges[fn._sequence_nr()] == want
    with_grads = floors.FactsFloorMode(promises=True)  # (one walk puts the hooks on too: each node's sends are read)
    with with_grads:
        loss = (x * 3).sum()
        loss.backward()
    assert len(with_grads.flowed) == 3 and len(with_grads.edges) == 3  # (SumBackward0, MulBackward0, x's AccumulateGrad)


def test_the_wide_programs_fit_in_a_picture_but_the_tree():
    """Part (h)'s wide programs, at 200 items, each draw within ``max_nodes`` in both views (each
    drew hundreds of nodes, seconds of layout, before alike leaves folded); the pairwise sum tree,
    which no fold finds yet, does not, and is what the part flags."""
    sys.path.insert(0, str(BENCH))
    try:
        import wide
    finally:
        sys.path.remove(str(BENCH))
    from graphlens.render import to_dot
    from graphlens.render.style import MAX_NODES

    for name, make in wide.programs().items():
        torch.manual_seed(0)
        g = make(200)
        drawn = {view: wide._nodes(to_dot(g, view=view).source) for view in ("data", "function")}
        if name.startswith("pairwise sum tree"):
            assert min(drawn.values()) > MAX_NODES, drawn
        else:
            assert max(drawn.values()) <= 20, (name, drawn)
