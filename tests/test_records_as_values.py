"""Records behave like values: graphs and explanations pickle and deep-copy as plain records,
and a bad graph document is a ValueError that says, in a sentence, which record and field."""

import copy
import json
import pickle

import pytest
import torch

import graphlens as gl
from graphlens import Graph
from graphlens.values import SavedEntry, Summary

PROTOCOLS = list(range(pickle.HIGHEST_PROTOCOL + 1))


def _snapshot():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * 3).sum()
    return w, loss, gl.snapshot(loss, names={"w": w, "loss": loss})


def _traced():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    with gl.trace() as tr:
        h = w * x
        y = h.detach()
        with torch.no_grad():
            z = y * 2  # noqa: F841 - a no_grad region
        loss = (h * h).sum()
        loss.backward()
    return w, tr.graph()


def _copies():
    yield "deepcopy", copy.deepcopy
    yield "copy", copy.copy
    for p in PROTOCOLS:
        yield f"pickle{p}", lambda v, p=p: pickle.loads(pickle.dumps(v, protocol=p))


COPIES = dict(_copies())
DEEP_COPIES = {k: v for k, v in COPIES.items() if k != "copy"}  # (a shallow copy of an Explanation shares its graph)


def _same_record(a: Graph, b: Graph) -> None:
    assert b == a and b is not a
    assert b.to_json() == a.to_json()
    assert b.to_dot().source == a.to_dot().source
    assert b.to_dot(view="function").source == a.to_dot(view="function").source


@pytest.mark.parametrize("how", COPIES)
def test_a_snapshot_copies_as_an_equal_plain_record(how):
    """A snapshot's copy (deepcopy, copy, pickle at every protocol) is equal in content but links no live tensor."""
    w, loss, g = _snapshot()
    again = COPIES[how](g)
    _same_record(g, again)
    wid = g.find("w").id
    assert g.tensor(wid) is w  # the original still reaches the live tensor
    assert again.tensor(wid) is None  # the copy behaves as for a freed tensor
    assert again.find("w").grad is None and again.counts == g.counts
    assert again.annotate({"w": "a note"}).notes[wid] == ("a note",)


@pytest.mark.parametrize("how", COPIES)
def test_a_traced_graph_copies_as_an_equal_plain_record(how):
    """A traced graph (detach, no_grad region, flowed grads) copies equal, without its weak references to tensors."""
    w, g = _traced()
    again = COPIES[how](g)
    _same_record(g, again)
    wid = g.find("w").id
    assert g.tensor(wid) is w and again.tensor(wid) is None
    assert again.find("h").flowed == g.find("h").flowed
    assert again.adjacency == g.adjacency


def test_copies_of_a_graph_stay_equal_after_pickling_twice():
    """Pickling an unpickled graph gives the same bytes: a copy is a record, nothing is left to resolve."""
    _, g = _traced()
    once = pickle.dumps(g)
    assert pickle.dumps(pickle.loads(once)) == once


@pytest.mark.parametrize("how", DEEP_COPIES)
def test_an_explanation_copies_with_its_graph(how):
    """An Explanation (with its graph) pickles and deep-copies: same sentences, reasons, path and diagram."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    loss = (h * h).sum()
    ex = gl.explain(h, loss)
    again = DEEP_COPIES[how](ex)
    assert str(again) == str(ex) and again.reasons == ex.reasons
    assert again.path == ex.path and again.edges == ex.edges and again.tensor_name == ex.tensor_name
    assert again.graph == ex.graph and again.graph.to_json() == ex.graph.to_json()
    assert again.to_dot().source == ex.to_dot().source
    assert again.to_html() == ex.to_html()


@pytest.mark.parametrize("how", DEEP_COPIES)
def test_an_error_explanation_copies(how):
    """An Explanation of an autograd error (no graph) pickles at every protocol and deep-copies."""
    w = torch.tensor([1.0], requires_grad=True)
    y = (w * w).sum()
    y.backward()
    with pytest.raises(RuntimeError) as info:
        y.backward()
    ex = gl.explain_error(info.value)
    again = DEEP_COPIES[how](ex)
    assert str(again) == str(ex) and again.reasons == ex.reasons and again.message == ex.message


# -- a bad graph document is a sentence naming the record and the field ---------------------------
def _doc(change) -> str:
    """The JSON of a small snapshot (t0 = loss, t1 = w; op0 sum, op1 mul, op2 AccumulateGrad), changed."""
    _, _, g = _snapshot()
    data = g.to_dict()
    change(data)
    return json.dumps(data)


def _set(path, value):
    def change(data):
        *keys, last = path
        for k in keys:
            data = data[k]
        data[last] = value
    return change


def _deep(n: int):
    out: list = []
    for _ in range(n):
        out = [out]
    return out


BAD = {
    "shape is a number": (_set(["tensors", 1, "shape"], 5),
                          r"^bad tensor 't1': field 'shape' must be a list of sizes .*, not int 5$"),
    "name is a number": (_set(["tensors", 1, "name"], 7), r"^bad tensor 't1': field 'name' must be a text or null, not int 7$"),
    "a flag is a text": (_set(["tensors", 1, "is_leaf"], "yes"),
                         r"^bad tensor 't1': field 'is_leaf' must be true or false, not str 'yes'$"),
    "a version is a float": (_set(["tensors", 1, "version"], 1.5), r"^bad tensor 't1': field 'version' must be an integer, not float 1.5$"),
    "the id is a list": (_set(["tensors", 1, "id"], ["t1"]), r"^bad tensor #1: field 'id' must be a text, not list \['t1'\]$"),
    "a field is missing": (lambda d: d["tensors"][1].pop("dtype"), r"^bad tensor 't1': field 'dtype' is missing"),
    "a root is a list": (_set(["roots"], [["t0"]]), r"^bad roots: root #0 must be a tensor id \(a text\), not list \['t0'\]$"),
    "a duplicate id": (_set(["tensors", 1, "id"], "t0"), r"duplicate node id 't0'"),
    "an op id that is a tensor's": (_set(["ops", 2, "id"], "t1"), r"duplicate node id 't1'"),
    "an edge number is a text": (_set(["edges", 0, "input_nr"], "0"),
                                 r"^bad edge #0 \('op0' -> 'op1'\): field 'input_nr' must be an integer >= 0, not str '0'$"),
    "a saved name is a list": (_set(["ops", 1, "saved", 0, "name"], [1]),
                               r"^bad op 'op1': field 'saved\[0\]' is a bad saved entry: field 'name' must be a text, not list \[1\]$"),
    "a saved value is a list": (_set(["ops", 1, "saved", 0, "value"], [1, 2]),
                                r"^bad op 'op1': field 'saved\[0\]' is a bad saved entry: field 'value' must be .*, not list \[1, 2\]$"),
    "a summary head item is a text": (_set(["tensors", 1, "value", "head", 1], "x"),
                                      r"^bad tensor 't1': field 'value' is a bad summary: field 'head\[1\]' must be a number .*, not str 'x'$"),
    "a complex number nests": (_set(["tensors", 1, "value", "min"], {"re": {"re": 1, "im": 2}, "im": 0}),
                               r"^bad tensor 't1': field 'value' is a bad summary: field 'min' must be a number .*, not dict"),
    "a flowed entry is a number": (_set(["tensors", 1, "flowed"], [3]),
                                   r"^bad tensor 't1': field 'flowed\[0\]' is a bad summary: a summary must be a JSON object, not int 3$"),
    "a shape nests deeply": (_set(["tensors", 1, "shape"], _deep(500)), r"^bad tensor 't1': field 'shape' must be a list of sizes"),
    "a note is a number": (_set(["notes"], {"t1": [1]}), r"^bad notes: the notes of 't1' must be a list of texts, not list \[1\]$"),
    "an edge end is a number": (_set(["edges", 0, "dst"], 1), r"^bad edge #0: field 'dst' must be a text, not int 1$"),
    "an unknown top-level field": (_set(["colour"], float("nan")), r"^bad graph: unknown field\(s\) \['colour'\]"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_graph_document_names_the_record_and_field(case):
    """Each wrong field type is a ValueError at load that names the node (or edge) and the field in a sentence."""
    change, message = BAD[case]
    text = _doc(change)
    with pytest.raises(ValueError, match=message) as info:
        Graph.from_json(text)
    assert len(str(info.value)) < 400  # a deep or long value is shown cut short


LITERALS = {
    "NaN in a summary": (lambda t: t.replace('"mean": 1.5', '"mean": NaN'),
                         r"^bad tensor 't1': field 'value' is a bad summary: field 'mean' must be a number .*, not the bare JSON literal NaN"),
    "Infinity as a version": (lambda t: t.replace('"version": 0', '"version": Infinity', 1),
                              r"^bad tensor 't0': field 'version' must be an integer, not the bare JSON literal Infinity"),
    "-Infinity as a line": (lambda t: t.replace('"line": null', '"line": -Infinity', 1),
                            r"field 'line' must be an integer or null, not the bare JSON literal -Infinity"),
}


@pytest.mark.parametrize("case", LITERALS)
def test_non_finite_literals_are_rejected_with_the_schema_spelling(case):
    """NaN / Infinity literals (which json.loads takes) are a ValueError naming the field and the schema's "nan"/"inf" strings."""
    change, message = LITERALS[case]
    text = change(_doc(lambda d: None))
    with pytest.raises(ValueError, match=message) as info:
        Graph.from_json(text)
    assert '"nan"' in str(info.value) and '"-inf"' in str(info.value)


def test_a_deeply_nested_document_is_a_value_error():
    """A document nested far deeper than any graph is a ValueError, not a RecursionError."""
    text = _doc(lambda d: None)[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError, match="not graph JSON: .*nested too deeply"):
        Graph.from_json(text)


def test_a_document_that_is_not_an_object_is_a_value_error():
    """JSON text that is a list or a number, not a graph object, is a ValueError (from_json's argument was text)."""
    for text in ("[1, 2]", "3", "null", "NaN"):
        with pytest.raises(ValueError, match="not graph JSON: the document must be a JSON object"):
            Graph.from_json(text)


def test_a_bad_version_1_document_names_the_record_and_field():
    """A schema-1 file (display strings) with a saved entry that is not a (name, value) pair names the op and the field."""
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "graph_v1_trace.json").read_text())
    data["ops"][0]["saved"][0] = ["other", "freed", "extra"]
    with pytest.raises(ValueError, match=r"^bad op 'op0': field 'saved\[0\]' must be a pair of texts \(name, value\), not list \['other'"):
        Graph.from_json(json.dumps(data))
    data["ops"][0]["saved"][0] = ["other", "freed"]
    data["tensors"][0]["grad"] = 5
    with pytest.raises(ValueError, match=r"^bad tensor 't0': field 'grad' must be a text or null, not int 5$"):
        Graph.from_json(json.dumps(data))


def test_records_read_alone_name_their_field():
    """Summary.from_dict and SavedEntry.from_dict name the bad field too."""
    with pytest.raises(ValueError, match=r"^bad summary: field 'shape' must be a list of sizes .*, not int 5$"):
        Summary.from_dict({"shape": 5, "dtype": "float32", "numel": 1})
    with pytest.raises(ValueError, match=r"^bad saved entry: field 'name' must be a text, not int 3$"):
        SavedEntry.from_dict({"name": 3})
    with pytest.raises(ValueError, match=r"^bad saved entry: field 'tensor' must be a text or null, not list \['t0'\]$"):
        SavedEntry.from_dict({"name": "self", "tensor": ["t0"]})
