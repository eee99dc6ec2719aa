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


def test_saved_name_cache_keeps_no_backward_class_alive():
    """Defining a new autograd.Function per step keeps none of their backward classes alive
    (the cache of their saved attributes is weakly keyed), while torch's own classes stay cached."""
    import gc
    import weakref

    from graphlens._live import facts as _facts

    refs = []
    for i in range(200):
        cls = type(f"F{i}", (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, x: x * 2),
            "backward": staticmethod(lambda ctx, g: g * 2),
        })
        y = cls.apply(torch.ones(1, requires_grad=True))
        _facts.saved_attributes(y.grad_fn)
        refs.append(weakref.ref(type(y.grad_fn)))
        del y, cls
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    _facts.saved_attributes((torch.ones(1, requires_grad=True) * 2).grad_fn)
    assert any(cls.__name__ == "MulBackward0" for cls in _facts._SAVED_NAMES)


# -- hostile graphs and names: escaped, never injected ------------------------------------------
def _small_graph():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    return w, (w * 3).sum()


def test_ids_from_json_are_quoted_everywhere_in_the_dot():
    """A crafted node id from a JSON file stays one quoted DOT id (also in the rank line): no attribute injection."""
    import json

    w, loss = _small_graph()
    crafted = 'x" URL="javascript:alert(1)'
    text = json.dumps(gl.snapshot(loss).to_dict()).replace('"t0"', json.dumps(crafted))
    source = gl.Graph.from_json(text).to_dot().source
    assert 'URL="javascript' not in source
    assert '{rank=max; "x\\" URL=\\"javascript:alert(1)"}' in source


@pytest.mark.needs_dot
def test_svg_of_a_crafted_graph_has_no_link():
    """The SVG of a graph with a crafted id holds the id as text, never as a link."""
    import json

    from graphlens.render import svg

    w, loss = _small_graph()
    text = json.dumps(gl.snapshot(loss).to_dict()).replace('"t0"', json.dumps('x" URL="javascript:alert(1)'))
    out = svg(gl.Graph.from_json(text))
    assert "href" not in out and "javascript:" in out  # (as escaped text in titles only)


@pytest.mark.needs_dot
@pytest.mark.parametrize("name", ["", "a\x00b", "bell\x07esc\x1b", "x" * 20_000, "<b>&amp;", "\ud800"])
def test_names_graphviz_cannot_take_still_render(name):
    """Empty names, NUL and control characters, lone surrogates and 20,000-character names render (escaped, shortened)."""
    from graphlens.render import svg

    w, loss = _small_graph()
    g = gl.snapshot(loss, names={name: w})
    out = svg(g)
    assert out.startswith("<?xml") or "<svg" in out
    assert len(g.to_dot().source) < 10_000  # a long name is cut, not copied into every label


def test_submodules_whose_names_differ_only_in_punctuation_stay_separate_boxes():
    """Submodules named a-b, a_b and a+b collapse into three boxes, not one."""
    m = torch.nn.Module()
    for n in ("a-b", "a_b", "a+b"):
        m.add_module(n, torch.nn.Linear(2, 2))
    x = torch.randn(1, 2)
    out = sum(getattr(m, n)(x).sum() for n in ("a-b", "a_b", "a+b"))
    source = gl.snapshot(out, module=m).to_dot(depth=1).source
    boxes = {line.split()[0] for line in source.splitlines() if line.strip().startswith("scope_")}
    assert len(boxes) == 3, boxes
    for n in ("a-b", "a_b", "a+b"):
        assert f"<B>{n}</B>" in source


def test_render_to_an_empty_path_says_the_path_is_empty(tmp_path):
    """render('') names the problem: the path is empty."""
    w, loss = _small_graph()
    with pytest.raises(ValueError, match="path is empty"):
        gl.snapshot(loss).render("")


def test_notebook_display_falls_back_to_text_when_layout_fails(monkeypatch):
    """When the layout program fails, a Graph and a to_dot() Digraph show text in a notebook, not a traceback."""
    from graphlens.render import output

    def broken(*_a, **_k):
        raise RuntimeError("the layout program crashed")

    monkeypatch.setattr(output, "layout", broken)
    w, loss = _small_graph()
    g = gl.snapshot(loss)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain"} and "layout program crashed" in bundle["text/plain"]
    dot_bundle = g.to_dot(view="function")._repr_mimebundle_()
    assert set(dot_bundle) == {"text/plain"} and "digraph" in dot_bundle["text/plain"]


@pytest.mark.needs_dot
def test_to_dot_result_displays_without_system_graphviz(monkeypatch):
    """What to_dot returns draws itself in a notebook through graphlens's own layout program
    (graphviz-pure when no dot is installed), not only through a system 'dot'."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no system dot: only the pip-installed program
    w, loss = _small_graph()
    bundle = gl.snapshot(loss).to_dot(view="function")._repr_mimebundle_()
    assert "<svg" in bundle["image/svg+xml"]


def test_explanation_markdown_and_html_escape_names_and_error_text():
    """A name or an error message with HTML or Markdown in it stays text in a notebook."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    e = gl.explain(w, (w * 2).sum(), names={"<img src=x onerror=alert(1)>": w})
    assert "<img" not in e.to_markdown() and "<img" not in e.to_html()
    assert "&lt;img" in e.to_html()
    err = gl.explain_error(RuntimeError("boom <script>alert(1)</script> [x](javascript:y)"))
    assert "<script>" not in err.to_markdown() and "<script>" not in err.to_html()
    assert "](javascript" not in err.to_markdown()
