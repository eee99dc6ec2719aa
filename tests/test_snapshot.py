"""Tests for graphlens.snapshot: the iterative walk, naming, weak references, bad input."""

import subprocess
import sys
import textwrap
import weakref

import pytest
import torch

import graphlens as gl
from graphlens.graph import FREED, MODIFIED


def article_program(detach: bool):
    """The article's section-1 program (typo fixed), returned as a dict of its tensors."""
    p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
    x = torch.tensor([4.0, 5.0, 6.0])
    xx = x**2
    y1 = p1 + xx
    if detach:
        y1 = y1.detach()
    y2 = torch.sigmoid(y1)
    y3 = y2 + p2
    y4 = torch.sigmoid(y3)
    loss = y4.mean()
    return dict(p1=p1, p2=p2, x=x, xx=xx, y1=y1, y2=y2, y3=y3, y4=y4, loss=loss)


def plain_walk(*roots):
    """An independent walk of next_functions: (node objects in no order, edge list)."""
    seen, edges, stack = {}, [], [r.grad_fn for r in roots if r.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen[fn] = type(fn).__name__
        for i, (child, nr) in enumerate(fn.next_functions):
            if child is not None:
                edges.append((fn, i, child, nr))
                stack.append(child)
    return seen, edges


def test_article_example_leaves_and_nonleaves():
    """Without the detach, p1 and p2 are the leaves and y1..y4 and loss are named non-leaves."""
    v = article_program(detach=False)
    p1, p2, y1, y2, y3, y4, loss = (v[k] for k in ("p1", "p2", "y1", "y2", "y3", "y4", "loss"))
    g = gl.snapshot(loss)
    assert {t.name for t in g.leaves} == {"p1", "p2"}
    for name in ("y1", "y2", "y3", "y4", "loss"):
        node = g.find(name)
        assert not node.is_leaf and node.requires_grad and node.op is not None
    assert g.find("p1").is_leaf and g.find("p1").op is None
    assert [t.name for t in g.roots] == ["loss"]
    del p1, p2, y1, y2, y3, y4


def test_article_example_detach_cuts_p1_off():
    """With the article's detach, the backward graph from loss reaches p2 but not p1."""
    v = article_program(detach=True)
    p1, p2, loss = v["p1"], v["p2"], v["loss"]
    g = gl.snapshot(loss)
    names = {t.name for t in g.tensors}
    assert "p2" in names and "p1" not in names
    acc = [o for o in g.ops if o.is_accumulate_grad]
    assert len(acc) == 1 and g.node(acc[0].variable).name == "p2"
    del p1, p2


def test_ops_and_edges_equal_next_functions():
    """The snapshot's op nodes and next edges are exactly what next_functions exposes."""
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    c = a * b
    d, e = (c + a).split(2)
    loss = (d.sum() * e.sum()) + c.mean()
    g = gl.snapshot(loss)
    nodes, edges = plain_walk(loss)
    assert sorted(o.name for o in g.ops) == sorted(nodes.values())
    got = sorted((g.node(e.src).name, e.input_nr, g.node(e.dst).name, e.output_nr) for e in g.edges if e.kind == "next")
    want = sorted((nodes[f], i, nodes[c], nr) for f, i, c, nr in edges)
    assert got == want
    split_edges = [e for e in g.edges if e.kind == "next" and g.node(e.dst).name == "SplitBackward0"]
    assert sorted(e.output_nr for e in split_edges) == [0, 1]



def test_edges_keep_their_input_positions_where_some_inputs_have_no_node():
    """Next and input edges keep each input's position in next_functions, also past inputs that need no grad (no node)."""
    w = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    h = torch.ones(3) * w  # (next_functions: (None, 0) first, then w's node)
    loss = torch.addcmul(torch.zeros(3), h, b).sum()  # (the constant's slot has no node either)
    g = gl.snapshot(loss)
    nodes, edges = plain_walk(loss)
    got = sorted((g.node(e.src).name, e.input_nr, g.node(e.dst).name, e.output_nr) for e in g.edges if e.kind == "next")
    assert got == sorted((nodes[f], i, nodes[c], nr) for f, i, c, nr in edges)
    assert any(child is None for f in nodes for child, _ in f.next_functions)
    by_name = {t.name: t.id for t in g.tensors if t.name}
    inputs = {(g.node(e.src).name, g.node(e.dst).name, e.input_nr) for e in g.edges if e.kind == "input"}
    assert ("w", "MulBackward0", 1) in inputs and ("b", "AddcmulBackward0", 2) in inputs
    assert {"w", "b", "h"} <= set(by_name)
    assert ("h", "AddcmulBackward0", 1) in inputs

def test_ids_are_stable_for_the_same_program():
    """Running the same program twice gives equal graphs and byte-identical JSON."""
    def run():
        torch.manual_seed(0)
        w = torch.randn(4, 3, requires_grad=True)
        h = torch.relu(w @ torch.ones(3))
        loss = h.pow(2).sum()
        return gl.snapshot(loss)

    g1, g2 = run(), run()
    assert g1 == g2
    assert g1.to_json() == g2.to_json()


def test_names_from_locals_globals_explicit_and_module():
    """Names come from explicit names, then module parameter names, then the caller's variables."""
    model = torch.nn.Linear(2, 1)
    inp = torch.ones(1, 2)
    out = model(inp)
    g = gl.snapshot(out)
    assert {t.name for t in g.leaves} == {"model.weight", "model.bias"}
    g = gl.snapshot(out, module=model)
    assert {t.name for t in g.leaves} == {"weight", "bias"}
    g = gl.snapshot(out, names={"W": model.weight}, module=model)
    assert {t.name for t in g.leaves} == {"W", "bias"}
    assert g.find("out").op is not None


GLOBAL_W = torch.tensor([1.0, 2.0], requires_grad=True)


def test_names_from_module_globals():
    """A tensor held only by a module-level variable is named after it."""
    loss = (GLOBAL_W * 2).sum()
    g = gl.snapshot(loss)
    assert g.find("GLOBAL_W").is_leaf


def test_multi_output_nonleaves_are_named_by_output_nr():
    """Each output of a multi-output op is named after its own variable."""
    t = torch.arange(4.0, requires_grad=True)
    first, second = (t * 2).split(2)
    loss = first.sum() + 3 * second.sum()
    g = gl.snapshot(loss)
    assert g.find("first").output_nr == 0 and g.find("second").output_nr == 1
    assert g.find("first").op == g.find("second").op


def test_container_roots_and_duplicates():
    """Tuples, lists and dicts of tensors are accepted as roots; a repeated root appears once."""
    a = torch.randn(2, requires_grad=True)
    s1, s2 = a.sum(), (a * 2).sum()
    g = gl.snapshot({"first": s1, "more": [s2, s1]})
    assert [t.name for t in g.roots] == ["s1", "s2"]
    assert len(g.find_all("a")) == 1


def test_tensor_without_grad_fn_is_one_node():
    """A tensor with no grad_fn gives a one-node graph, not an error."""
    plain = torch.ones(3)
    g = gl.snapshot(plain)
    assert len(g.tensors) == 1 and not g.ops and not g.edges
    assert g.find("plain").is_leaf and not g.find("plain").requires_grad
    leaf = torch.ones(2, requires_grad=True)
    g = gl.snapshot(leaf)
    assert g.find("leaf").requires_grad and g.counts["ops"] == 0


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ((), {}, ["at least one root tensor", "snapshot(loss)"]),
        ((3,), {}, ["root must be a torch.Tensor", "not an int"]),
        ((torch.nn.Linear(2, 2),), {}, ["nn.Module (Linear)", "snapshot(model(x))"]),
        (([torch.ones(1), "x"],), {}, ["root[1] must be a torch.Tensor", "not a str"]),
        ((torch.ones(1),), {"names": ["w"]}, ["names must be a dict"]),
        ((torch.ones(1),), {"module": torch.ones(1)}, ["module must be an nn.Module"]),
    ],
)
def test_bad_input_gets_a_clear_error(args, kwargs, words):
    """Bad input raises a TypeError that names the argument and the fix."""
    with pytest.raises(TypeError) as info:
        gl.snapshot(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_snapshot_keeps_no_tensor_alive(collect):
    """A snapshot holds only weak references: deleting the tensors frees them."""
    w = torch.randn(3, requires_grad=True)
    h = w.exp()
    loss = h.sum()
    g = gl.snapshot(loss)
    refs = [weakref.ref(t) for t in (w, h, loss)]
    assert g.tensor(g.find("w").id) is w
    del w, h, loss
    collect()
    assert all(r() is None for r in refs)
    assert g.tensor("t0") is None
    assert g.find("h").value is not None  # the records survive


def test_snapshot_inside_a_function_leaves_no_frame_cache(collect):
    """Reading a function's locals for names does not keep them alive afterwards."""
    def body():
        w = torch.randn(3, requires_grad=True)
        loss = (w * w).sum()
        gl.snapshot(loss)
        ref = weakref.ref(w)
        del w, loss
        collect()
        return ref()

    assert body() is None


def test_snapshot_after_backward_shows_freed_saved_tensors_and_grads():
    """After backward the walk still works; saved tensors show as freed and leaf grads appear."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * w
    h.retain_grad()
    loss = h.sum()
    before = gl.snapshot(loss)
    mul = next(o for o in before.ops if o.name == "MulBackward0")
    assert {e.name: str(e) for e in mul.saved} == {"other": "float32[2]", "self": "float32[2]"}
    assert {e.name: e.tensor for e in mul.saved} == {"other": before.find("w").id, "self": before.find("w").id}
    loss.backward()
    after = gl.snapshot(loss)
    mul = next(o for o in after.ops if o.name == "MulBackward0")
    assert {e.name: e.state for e in mul.saved} == {"other": FREED, "self": FREED}
    assert after.find("w").grad.head == (2.0, 4.0)
    assert after.find("h").grad.head == (1.0, 1.0) and after.find("h").retains_grad
    assert after.find("loss").grad is None


def test_saved_attributes_can_be_turned_off():
    """saved=False records no saved attributes."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    assert all(o.saved == () for o in gl.snapshot(loss, saved=False).ops)
    assert any(o.saved for o in gl.snapshot(loss, saved=True).ops)


def test_snapshot_never_changes_the_users_numbers():
    """Taking a snapshot before backward leaves grads, versions and flags unchanged."""
    def run(take):
        torch.manual_seed(1)
        w = torch.randn(5, 5, requires_grad=True)
        loss = torch.tanh(w @ w).sum()
        if take:
            gl.snapshot(loss)
        loss.backward()
        return w.grad, w._version, w.requires_grad

    g1, v1, r1 = run(False)
    g2, v2, r2 = run(True)
    assert torch.equal(g1, g2) and v1 == v2 and r1 == r2


def test_deep_chain_of_100k_ops_snapshots_and_frees_safely():
    """A 100,000-op chain snapshots without RecursionError, and freeing it afterwards does not
    crash the interpreter (PyTorch's teardown recursion after a walk)."""
    script = textwrap.dedent(
        """
        import gc, torch, graphlens as gl
        x = torch.randn(2, requires_grad=True)
        y = x
        for _ in range(100_000):
            y = y * 1.0001
        g = gl.snapshot(y)
        assert len(g.ops) == 100_001, len(g.ops)
        assert g.counts["next"] == 100_000
        del y, g
        gc.collect()
        print("freed")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "freed" in proc.stdout


def test_saved_tensor_changed_in_place_is_not_called_freed():
    """A saved tensor changed in place after it was saved shows as 'modified in place', not 'freed'."""
    w = torch.randn(3, requires_grad=True)
    y = w.exp()
    z = (y * 2).sum()
    y.detach().zero_()  # the detached tensor shares y's storage and version counter
    for g in (gl.snapshot(z),):
        exp_op = next(o for o in g.ops if o.name == "ExpBackward0")
        assert {e.name: e.state for e in exp_op.saved} == {"result": MODIFIED}
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()
    with gl.trace() as tr:
        y2 = w.exp()
        z2 = (y2 * 2).sum()
        y2.detach().zero_()
    exp_op = next(o for o in tr.graph().ops if o.name == "ExpBackward0")
    assert {e.name: e.state for e in exp_op.saved} == {"result": MODIFIED}
    del z2


def _saved_walk(*roots):
    """Every node reachable from ``roots`` in snapshot's walk order."""
    seen, order, stack = set(), [], [r.grad_fn for r in roots]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        order.append(fn)
        stack.extend(c for c, _ in reversed(fn.next_functions))
    return order


@pytest.mark.parametrize("after_backward", [False, True])
def test_saved_entries_equal_the_entry_by_entry_reader(after_backward):
    """A snapshot's saved entries (read as compact rows, made into entries when asked) are exactly what saved_attributes reads, live and freed."""
    from graphlens._live.facts import StorageBook, saved_attributes

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    x = torch.randn(2, 3, 8, 8)
    loss = (model(x).softmax(-1) * 3.0).pow(2).sum()
    if after_backward:
        loss.backward()
    g = gl.snapshot(loss, saved=True)
    book = StorageBook()  # (one for the walk, as the snapshot numbers storages)
    direct = [tuple(e._replace(tensor=None) for e in saved_attributes(fn, book=book)) for fn in _saved_walk(loss)]
    got = [tuple(e._replace(tensor=None) for e in op.saved) for op in g.ops]
    assert got == direct
    states = {e.state for op in g.ops for e in op.saved}
    assert (FREED in states) == after_backward


def test_module_names_equal_named_parameters_then_plain_tensor_attributes():
    """A module in the caller's frame names its parameters as named_parameters() lists them (shared ones once), then tensors kept as attributes."""
    from graphlens.names import _items

    inner = torch.nn.Linear(2, 2)
    inner.hidden = (torch.ones(1), torch.zeros(1))
    inner.state = torch.ones(3)
    inner.sizes = (3, 4)
    model = torch.nn.Sequential(inner, torch.nn.ReLU(), inner, torch.nn.LSTM(2, 3))
    got = [(name, id(t)) for name, t in _items({"model": model})]
    params = [(f"model.{n}", id(p)) for n, p in model.named_parameters()]
    assert got[:len(params)] == params
    assert got[len(params):] == [("model.0.hidden[0]", id(inner.hidden[0])), ("model.0.hidden[1]", id(inner.hidden[1])),
                                 ("model.0.state", id(inner.state))]


def test_a_module_that_lists_its_own_parameters_is_asked_for_them():
    """A module class that overrides named_parameters() names what its override lists."""
    from graphlens.names import _items

    class Renamed(torch.nn.Linear):
        def named_parameters(self, *args, **kwargs):
            for name, p in super().named_parameters(*args, **kwargs):
                yield "renamed_" + name, p

    m = Renamed(2, 2)
    assert [n for n, _ in _items({"m": m})] == ["m.renamed_weight", "m.renamed_bias"]


def test_saved_rows_read_together_equal_entries_read_one_node_at_a_time():
    """The snapshot's column-wise reading of saved attributes gives, node for node, the entries
    and storage numbers of the careful reader of one node at a time: wrapped numbers,
    parameters, views, lists of tensors, 0-d values, a custom Function, a hooked slot, a freed
    and a modified one."""
    from graphlens._live.capture import saved_entry
    from graphlens._live.facts import saved_attributes
    from graphlens._live.saved_columns import saved_rows_of_all
    from graphlens._live.storages import StorageBook

    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    p = torch.nn.Parameter(torch.randn(4))
    idx = torch.tensor([0, 2])

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t, k):
            ctx.save_for_backward(t)
            return t * k

        @staticmethod
        def backward(ctx, g):
            return g * 2.0, None

    a = x.clone()
    modified = a.sin()
    a.mul_(2)
    freed = (x.exp() * x).sum()
    freed.backward()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        hooked = (x * x).sum()
    roots = [
        torch.cat([x * 2, x.exp()], 0)[idx].sum() + torch.stack([x, x]).sin().sum() + (p * x).sum() + p.norm(),
        (x.view(12)[3:7] * 1.5).sum() + x.max() * torch.tensor(2.0), Scale.apply(x, 3.0).sum(), modified.sum(), freed, hooked,
    ]
    fns = _saved_walk(*roots)

    def resolve_one(i):  # (a tensor of the graph gets an id naming the node and attribute; a Python number torch wrapped, none)
        return lambda value, name: f"t{i}.{name}" if value.requires_grad else None

    one_book = StorageBook(weak=False)
    alone = [saved_attributes(fn, resolve_one(i), book=one_book) for i, fn in enumerate(fns)]
    together = saved_rows_of_all(fns, lambda i, value, name: resolve_one(i)(value, name), book=StorageBook(weak=False))
    assert [tuple(map(saved_entry, rows)) for rows in together] == alone
    assert any(e.tensor for entries in alone for e in entries)
    kinds = {s.kind for entries in alone for e in entries for s in e.storages}
    assert {"number", "parameter", "activation", "untracked"} <= kinds
    assert {e.state for entries in alone for e in entries} >= {gl.graph.LIVE, gl.graph.HIDDEN, FREED, MODIFIED}
