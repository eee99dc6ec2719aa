"""Records hold numbers: Summary, saved entries, precision and JSON (schema 3, reads 2 and 1)."""

import json
import math
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens.graph import FREED, HIDDEN, LIVE, Graph, SavedEntry, Summary

DATA = Path(__file__).parent / "data"


def readme_example():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    with gl.trace() as tr:
        h = w * x
        y = h.detach()  # noqa: F841 - drawn as a detach cut
        loss = (h * h).sum()
        loss.backward()
    return tr.graph()


def test_readme_example_holds_numbers():
    """The README's trace records the grad of w as the numbers (18, 64), not as text."""
    g = readme_example()
    grad = g.find("w").grad
    assert isinstance(grad, Summary)
    assert grad.head == (18.0, 64.0) and grad.shape == (2,) and grad.dtype == "float32" and grad.numel == 2
    assert (grad.min, grad.max, grad.mean) == (18.0, 64.0, 41.0)
    assert all(type(v) is float for v in grad.head)
    assert g.find("h").flowed[0].head == (6.0, 16.0)
    assert str(grad) == "[18, 64]"


def test_precision_gives_more_digits():
    """format(precision=N) shows N significant digits; the default stays 4."""
    s = gl.snapshot((torch.tensor(24.70413, requires_grad=True) * 1)).find("t0").value
    assert str(s) == "24.7"
    assert s.format(precision=6) == "24.7041"
    assert s.format(precision=2) == "25"
    assert s.head[0] == pytest.approx(24.70413)


def test_large_tensors_keep_a_head_and_stats_only_on_request():
    """A large tensor keeps its first elements in row-major order; a graph pays no reduction
    for min/max/mean (None), which summarize(t, stats=True) reads of all of it."""
    from graphlens._live.facts import summarize

    t = torch.arange(100.0).reshape(10, 10).t()  # not contiguous: row-major order of the view
    s = gl.snapshot((t.requires_grad_() * 1).sum()).find("t").value
    assert s.numel == 100 and s.head == (0.0, 10.0, 20.0, 30.0, 40.0, 50.0)
    assert (s.min, s.max, s.mean) == (None, None, None)
    full = summarize(t, stats=True)
    assert (full.min, full.max, full.mean) == (0.0, 99.0, 49.5) and full.head == s.head
    assert str(s) == "[0, 10, 20, 30, 40, 50, … (100 elements)]"
    assert s.format(max_elements=2) == "[0, 10, … (100 elements)]"


def test_dtypes_give_their_python_numbers():
    """Integer, bool and complex tensors give int, bool and complex heads; stats only where they apply."""
    from graphlens._live.facts import summarize

    i = summarize(torch.tensor([3, -1]))
    assert i.head == (3, -1) and all(type(v) is int for v in i.head) and (i.min, i.max) == (-1.0, 3.0)
    b = summarize(torch.tensor([True, False]))
    assert b.head == (True, False) and b.min is None and b.mean is None
    c = summarize(torch.tensor([1 + 2j]))
    assert c.head == (1 + 2j,) and c.min is None
    assert str(c) == "[1+2j]"
    odd = summarize(torch.zeros(2, 3).to_sparse())
    assert odd.head is None and str(odd) == "<float32[2, 3]>"


def test_json_round_trip_keeps_non_finite_and_complex_values():
    """nan, inf and complex values survive to_json/from_json, and the JSON is strict (no NaN literal)."""
    w = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], requires_grad=True)
    loss = (w * 2).sum()
    loss.backward()
    g = gl.snapshot(loss)
    text = g.to_json()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    again = Graph.from_json(text)
    assert again == g
    head = again.find("w").value.head
    assert math.isnan(head[0]) and head[1:] == (math.inf, -math.inf, 1.0)
    z = Summary((1,), "complex64", 1, (1 - 2j,))
    assert Summary.from_dict(json.loads(json.dumps(z.to_dict()))) == z


def test_saved_entries_name_the_tensor_they_saved():
    """A saved entry says its attribute, the tensor node it saved (self = x) and its state."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    a = torch.tensor([3.0, 4.0])
    with gl.trace() as tr:
        h = x * a
        y = h.exp()
        loss = y.sum()
        before = tr.graph()
        loss.backward()
    after = tr.graph()
    for g, state in ((before, LIVE), (after, FREED)):
        mul = g.find("mul")
        saved = {e.name: e for e in mul.saved}
        assert saved["other"].tensor == g.find("a").id and saved["other"].state is state
        exp = g.find("ExpBackward0")
        (result,) = exp.saved
        assert result.name == "result" and result.tensor == g.find("y").id and result.state is state
        assert result.summary.shape == (2,) and result.summary.dtype == "float32"
    sizes = next(e for e in after.find("SumBackward0").saved if e.name == "self_sym_sizes")
    assert sizes.state is LIVE and sizes.value == (2,) and not sizes.is_tensor
    assert Graph.from_json(after.to_json()) == after


def test_snapshot_saved_entries_resolve_inputs_and_results():
    """A snapshot links a saved leaf input and a saved result to their tensor nodes."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    y = w.exp()
    loss = (y * w).sum()
    g = gl.snapshot(loss)
    mul = g.find("MulBackward0")
    assert {e.name: e.tensor for e in mul.saved} == {"self": g.find("y").id, "other": g.find("w").id}
    assert g.find("ExpBackward0").saved[0].tensor == g.find("y").id


def test_saved_entry_states_are_constants_not_words():
    """Saved states are SavedState members; their text is only for display."""
    e = SavedEntry("self", FREED)
    assert e.state is FREED and str(e) == "freed" and e.is_tensor
    assert SavedEntry.from_dict(e.to_dict()) == e
    with pytest.raises(ValueError, match="unknown saved state: 'gone'"):
        SavedEntry.from_dict({"name": "self", "state": "gone"})


def test_schema_1_files_still_load():
    """A graph written by schema 1 (display strings) loads, with its numbers read back out."""
    g = Graph.from_json((DATA / "graph_v1_trace.json").read_text())
    w = g.find("w")
    assert w.grad.head == (18.0, 64.0) and w.grad.shape == (2,)
    assert g.find("h").flowed[0].head == (6.0, 16.0)
    big = g.find("big").value
    assert big.numel == 20 and big.head == (0, 1, 2, 3, 4, 5)
    mul_states = [e.state for o in g.ops if o.name == "MulBackward0" for e in o.saved]
    assert FREED in mul_states
    sizes = [e.value for o in g.ops for e in o.saved if e.name == "self_sym_sizes"]
    assert (2,) in sizes
    assert json.loads(g.to_json())["schema"] == 3
    assert Graph.from_json(g.to_json()) == g


def _two_of_five_passes():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        for k in range(5):
            h = w * 2 if k else w * 3
            h.sum().backward()
    return tr.graph()


def test_flowed_keeps_the_passes_where_something_flowed_and_reads_as_one_entry_per_pass():
    """A tensor of the first of five backward calls has five entries, four None; JSON (schema 3) holds the one that is not."""
    g = _two_of_five_passes()
    first = g.find_all("h")[0]
    assert len(first.flowed) == 5 and first.flowed[0].head == (1.0, 1.0) and list(first.flowed)[1:] == [None] * 4
    assert first.flowed == (first.flowed[0], None, None, None, None) and first.flowed[-4] is None
    assert first.flowed[torch.tensor(0).item()] is first.flowed[__import__("numpy").int64(0)] is first.flowed[0]
    with pytest.raises(IndexError):
        first.flowed[5]
    with pytest.raises(TypeError, match="Flowed indices must be integers or slices, not str"):
        first.flowed["0"]
    w = g.find("w").flowed
    assert [s.head for s in w] == [(3.0, 3.0)] + [(2.0, 2.0)] * 4
    data = json.loads(g.to_json())
    written = next(t["flowed"] for t in data["tensors"] if t["id"] == first.id)
    assert written["passes"] == 5 and [k for k, _ in written["at"]] == [0]
    assert Graph.from_json(g.to_json()) == g


def test_schema_2_files_with_an_entry_per_pass_still_load():
    """The same graph written the schema 2 way (a list with null for every pass nothing flowed) reads as equal."""
    g = _two_of_five_passes()
    data = g.to_dict()
    data["schema"] = 2
    for t in data["tensors"]:
        f = t["flowed"]
        if isinstance(f, dict):
            dense = [None] * f["passes"]
            for k, s in f["at"]:
                dense[k] = s
            t["flowed"] = dense
    assert Graph.from_dict(data) == g


@pytest.mark.parametrize("flowed, message", [
    ({"passes": 2, "at": [[2, None]]}, r"field 'flowed.at\[0\]' must be \[pass, summary\]"),
    ({"passes": 3, "at": [[1, "S"], [1, "S"]]}, "each pass once"),
    ({"passes": 3, "at": [[2, "S"], [1, "S"]]}, "in order"),
    ({"passes": 3, "at": [[3, "S"]]}, "below 3"),
    ({"passes": -1, "at": []}, r"field 'flowed' must be a list of summaries"),
    ({"passes": 1, "at": [], "extra": 1}, r"field 'flowed' must be"),
    ({"passes": 2, "at": [[0, {"shape": [1]}]]}, r"flowed.at\[0\]' is a bad summary"),
])
def test_bad_flowed_is_rejected_at_load(flowed, message):
    """A schema 3 flowed whose passes are out of range, repeated, or not summaries is a ValueError naming the field."""
    data = _two_of_five_passes().to_dict()
    good = next(t["flowed"]["at"][0][1] for t in data["tensors"] if t["flowed"])
    data["tensors"][0]["flowed"] = {**flowed, "at": [[k, good if s == "S" else s] for k, s in flowed["at"]]}
    with pytest.raises(ValueError, match=message):
        Graph.from_dict(data)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["roots"].append("t99"), "root 't99' names no tensor"),
        (lambda d: d["edges"].append({"src": "t0", "dst": "op99", "kind": "input"}), "'op99' names no op"),
        (lambda d: d["edges"].append({"src": "t0", "dst": "t1", "kind": "sideways"}), "unknown edge kind: 'sideways'"),
        (lambda d: d["tensors"][0].update(op="op42"), "its op 'op42' names no op"),
        (lambda d: d["ops"][0].update(saved=[{"name": "self", "tensor": "t77"}]), "names no tensor 't77'"),
        (lambda d: d["tensors"][0].update(value={"shape": [1]}), "bad summary"),
        (lambda d: d.update(schema=4), "unsupported graph schema: 4"),
    ],
)
def test_bad_json_is_rejected_at_load(change, message):
    """A graph file that names missing nodes or unknown kinds is a ValueError saying which, at load."""
    data = readme_example().to_dict()
    change(data)
    with pytest.raises(ValueError, match=message):
        Graph.from_json(json.dumps(data))


def test_from_json_wants_text():
    """from_json of something that is not JSON text is a TypeError or a ValueError that says so."""
    with pytest.raises(TypeError, match="text must be a str"):
        Graph.from_json({"schema": 2})
    with pytest.raises(ValueError, match="not graph JSON"):
        Graph.from_json("{nope")


def test_summary_equality_treats_nan_as_equal_to_itself():
    """Two summaries of the same NaN value compare equal (a graph equals its JSON round trip)."""
    a = Summary((1,), "float32", 1, (float("nan"),), float("nan"), float("nan"), float("nan"))
    b = Summary((1,), "float32", 1, (float("nan"),), float("nan"), float("nan"), float("nan"))
    assert a == b and hash(a) == hash(b)
    assert a != Summary((1,), "float32", 1, (1.0,))


@pytest.mark.parametrize(
    "values",
    [[float("inf"), float("-inf")], [float("inf"), 1.0], [float("nan"), 2.0], [1e308, 1e308], [-0.0, 5.0]],
)
def test_stats_of_non_finite_values_match_torch(values):
    """min, max and mean of a tensor with infinities, NaN or an overflowing sum are what
    torch computes (inf + -inf is nan, not an error)."""
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    s = gl.snapshot((t * 1).sum()).find("t").value
    want = (t.min().item(), t.max().item(), t.mean().item())
    got = (s.min, s.max, s.mean)
    assert all((a != a and b != b) or a == b for a, b in zip(got, want)), (got, want)
