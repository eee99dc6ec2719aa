"""Loops of programs people write fold whole: a training loop whose first step differs (its
iterations start where the body does), a loop over the slices of a tensor (each slice goes
with its iteration), a target also fed in next (teacher forcing), and a loop whose body holds
blocks that fold among themselves (checkpointed layers); a long no_grad step (an optimizer's
update) is one box in a picture too large to draw it op by op."""

from __future__ import annotations

import re

import pytest
import torch

import graphlens as gl
from graphlens.render import to_dot
from graphlens.render.loops import _aligned
from graphlens.render.output import layout
from traced_loops import node_count as _nodes

F = torch.nn.functional


def _frames(source: str) -> list[str]:
    return re.findall(r'label="(× \d+: a loop[^"]*)"', source)


def _adamw_clipped(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    history = []
    with gl.trace(module=model) as tr:
        for _ in range(steps):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            history.append(loss.item())
    return tr.graph()


def test_iterations_start_where_the_body_starts():
    """A stretch found starting inside the body is moved to start at the body's lowest line,
    back when the items before it hold that start, else on by one repeat."""
    body = [(1, "a"), (2, "b"), (3, "c")]
    # found from "b": the "a" before it is the body's start, so the stretch moves back to it
    seq = [(9, "z"), *body * 4, (1, "a")]
    assert _aligned(seq, 2, 3, 4, 3) == (1, 4)
    # nothing before it: moved on, and the trailing "b", "c" complete the last repeat
    seq = [*body[1:], *body * 4]
    assert _aligned(seq, 0, 3, 4, 3) == (2, 4)
    # moved on, one repeat fewer, unless too few would be left
    seq = [*body[1:], *body * 3, (1, "a")]
    assert _aligned(seq, 0, 3, 4, 3) == (2, 3)
    assert _aligned(seq, 0, 3, 4, 4) == (0, 4)
    # a one-line body tells nothing: left as found
    seq = [(5, "a"), (5, "b")] * 4
    assert _aligned(seq, 1, 2, 3, 3) == (1, 3)


def test_training_loop_whose_first_step_differs_folds():
    """AdamW (its state made in the first step) with gradient clipping: the clipping and the
    update are one no_grad region, and the loop folds with that region inside its frame,
    as many nodes at 8 steps as at 16 (the iterations were cut inside the region and no two
    matched: 10 steps drew 1,157 nodes, 40 steps 4,547, more than Graphviz lays out)."""
    small, large = (to_dot(_adamw_clipped(n)).source for n in (8, 16))
    assert _nodes(small) == _nodes(large)
    (frame,) = _frames(large)
    assert frame.startswith("× 14: a loop") and "iteration 2 drawn" in frame


def test_slices_of_a_tensor_go_with_their_iteration():
    """``for x, y in zip(xs, ys)``: each slice (an output of ``unbind``, made before the loop)
    is drawn in its iteration's frame; 40 and 80 samples draw the same picture's size (each
    slice was drawn outside the frame: 160 samples, 340 nodes)."""
    def per_sample(n: int) -> str:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        xs, ys = torch.randn(n, 3), torch.randn(n, 1)
        with gl.trace(module=model) as tr:
            loss = 0
            for x, y in zip(xs, ys):
                loss = loss + (model(x) - y).pow(2).sum()
            loss.backward()
        return to_dot(tr.graph()).source

    small, large = per_sample(40), per_sample(80)
    assert _nodes(small) == _nodes(large) < 60
    assert len(_frames(large)) == 1


def test_target_fed_in_next_goes_with_the_first_iteration_using_it():
    """Teacher forcing: each target is compared in its step and fed as the next step's input
    (used by two iterations in a row); it is drawn in the first one's frame, and the decoder
    loop folds to one picture size at any length."""
    def seq2seq(n: int) -> str:
        torch.manual_seed(0)
        dec, out = torch.nn.GRUCell(3, 6), torch.nn.Linear(6, 3)
        tgt = torch.randn(n, 1, 3)
        with gl.trace() as tr:
            h, inp, loss = torch.zeros(1, 6), torch.zeros(1, 3), 0
            for y in tgt:
                h = dec(inp, h)
                loss = loss + F.mse_loss(out(h), y)
                inp = y
            loss.backward()
        return to_dot(tr.graph()).source

    small, large = seq2seq(30), seq2seq(60)
    assert _nodes(small) == _nodes(large) < 60


def test_loop_folds_past_blocks_folded_inside_each_iteration():
    """Four checkpointed Linear layers run in every step of a loop: layers 1 and 2 alike fold
    into one frame in each iteration, which kept the iterations from folding (160 steps drew
    1,447 nodes); the loop alone folds them when it draws fewer."""
    from torch.utils.checkpoint import checkpoint

    def looped(n: int) -> str:
        torch.manual_seed(0)
        layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(4)])
        x = torch.randn(2, 4)
        with gl.trace(module=layers) as tr:
            for _ in range(n):
                h = x
                for layer in layers:
                    h = checkpoint(layer, h, use_reentrant=False)
                loss = h.pow(2).mean()
                loss.backward()
        return to_dot(tr.graph()).source

    small, large = looped(40), looped(80)
    assert _nodes(small) == _nodes(large) < 40
    assert any(f.startswith("× 80: a loop") for f in _frames(large))


def _gan(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    D = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
    real, ones, zeros = torch.randn(8, 2), torch.ones(8, 1), torch.zeros(8, 1)
    with gl.trace() as tr:
        for _ in range(steps):
            fake = G(torch.randn(8, 2))
            opt_d.zero_grad()
            d_loss = (F.binary_cross_entropy_with_logits(D(real), ones)
                      + F.binary_cross_entropy_with_logits(D(fake.detach()), zeros))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
            g_loss.backward()
            opt_g.step()
    return tr.graph()


def test_long_no_grad_step_is_one_box_in_a_large_picture():
    """A GAN's loop with two Adam optimizers (32 ops a step each, under no_grad) folded still
    drew 522 nodes; each update is now one box in its no_grad frame, naming its ops, and
    the parameters' new versions stay drawn beside it: the same size at 6 and 12 steps."""
    small, large = (to_dot(_gan(n)).source for n in (6, 12))
    assert _nodes(small) == _nodes(large) < 120
    assert "no_grad step: 32 ops" in large and "add_ ×8" in large
    assert "collapsed submodule / chain / no_grad step" in large  # (the legend says what the box is)
    for name in ("D.0.weight", "D.2.bias", "G.0.weight", "G.2.bias"):
        assert f"<B>{name}</B>" in large


def test_step_box_only_where_the_picture_is_too_large():
    """A picture that fits keeps every op of its no_grad steps (one Adam step on a small
    model); one above ``max_nodes`` (a deeper model, no loop) draws its step as a box (the
    update and the evaluation after it ran under no_grad one after the other: one region), and
    with ``max_nodes`` raised it is drawn op by op again.  What the program evaluated under
    no_grad and kept in a variable (``preds``) stays drawn beside the box, and no loop frame
    is drawn around the gradients the box reads (its ops, one group per parameter, are in it)."""
    def adam_step(layers: int) -> gl.Graph:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(layers)])
        opt = torch.optim.Adam(model.parameters())
        x = torch.randn(2, 3)
        with gl.trace() as tr:
            model(x).sum().backward()
            opt.step()
            with torch.no_grad():
                preds = model(x)
        assert preds.shape == (2, 3)
        return tr.graph()

    assert "no_grad step" not in to_dot(adam_step(1)).source
    big = adam_step(8)
    boxed, open_ = to_dot(big).source, to_dot(big, max_nodes=10_000).source
    assert boxed.count("no_grad step:") == 1 and "no_grad step" not in open_
    assert _nodes(boxed) < 150 < _nodes(open_)
    assert "<B>preds</B>" in boxed and not _frames(boxed)


@pytest.mark.needs_dot
def test_gan_picture_lays_out_quickly():
    """Graphviz lays the GAN's picture out within its time limit (it stopped at 10 s)."""
    svg = layout(to_dot(_gan(6)).source, "svg").decode()
    assert "no_grad step" in svg


def test_iterations_are_numbered_as_the_loop_counts_them():
    """A loop whose first step differs (Adam makes its state, and the step evaluates under
    no_grad in a branch on other lines) is folded from its second step on, and the frame
    numbers its iterations from 2, as the loop ran them (it said 1: it counted from the
    stretch it found)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    with gl.trace(module=model) as tr:
        for step in range(10):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if step == 0:
                with torch.no_grad():
                    first = F.mse_loss(model(x), y)
    assert first.ndim == 0
    (frame,) = _frames(to_dot(tr.graph()).source)
    assert re.search(r"iterations 2 … 9 \(the same graph each; iteration 2 drawn\)", frame)


def test_replay_page_reads_the_modules_once(monkeypatch):
    """The replay's sentences on module steps read each op's module from one scoped graph,
    made once per replay (it was made again for each gradient crossing a module: the page of
    a GAN trained 40 steps took 25 s, 15 of them there)."""
    import graphlens.scopes

    calls = []
    real = graphlens.scopes.infer_scopes
    monkeypatch.setattr(graphlens.scopes, "infer_scopes", lambda g: calls.append(1) or real(g))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    with gl.trace(module=model) as tr:
        for _ in range(3):
            model(torch.randn(2, 2)).sum().backward()
    rp = tr.replay()
    modules = rp.by_module()
    texts = [rp.describe_module(ms) for ms in modules]
    assert len(modules) > 3 and all(texts)
    assert len(calls) == 1


def test_parameters_before_the_first_update_stay_outside_the_loop():
    """A loop whose every iteration makes its own input (a gradient penalty on a fresh batch)
    and updates the parameters: the parameters as they were before the first update are what
    the loop starts from, drawn outside its frame (they were drawn in the first iteration,
    which then matched no other), so the frame starts at iteration 1."""
    torch.manual_seed(0)
    D = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(D.parameters(), lr=0.01)
    with gl.trace(module=D) as tr:
        for _ in range(8):
            x = torch.randn(4, 2, requires_grad=True)
            out = D(x)
            (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            loss = out.mean() + ((g.norm(dim=1) - 1) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    source = to_dot(tr.graph()).source
    (frame,) = _frames(source)
    assert re.search(r"iterations 1 … 7 ", frame)


def test_hook_in_every_step_is_one_note_on_the_folded_step():
    """A gradient hook registered in every step of a loop puts a note on each step's tensor;
    folded, the loop's drawn tensor carries the note once, saying for how many it stands
    (160 stacked notes made a picture Graphviz took 1.7 s to lay out)."""
    def hooked(n: int) -> str:
        x = torch.randn(4, requires_grad=True)
        norms = []
        with gl.trace() as tr:
            y = x
            for _ in range(n):
                y = y * 1.01
                y.register_hook(lambda g: norms.append(float(g.norm())))
            y.sum().backward()
        assert len(norms) == n
        return to_dot(tr.graph()).source

    small, large = hooked(80), hooked(160)
    assert _nodes(small) == _nodes(large) < 15
    notes = re.findall(r'note\d+ \[label="([^"]*)"', large)
    assert len(notes) == 2  # (the loop's drawn step, and the last step's y: named, drawn apart)
    assert any("a gradient hook registered" in t and "(× 159)" in t for t in notes)


def test_step_that_updates_many_parameters_holds_them():
    """An optimizer step over a transformer's two dozen weights draws one box that holds each
    weight's new version and the gradient it read (drawn beside it, they were 50 nodes a
    step, and the loop's iterations were not joined through them): the training loop folds
    to the same picture size at 6 and 10 steps (GPT-2 with AdamW, 6 steps: 262 nodes and a
    10 s layout before; 91 nodes, 0.13 s)."""
    def train(steps: int) -> str:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), torch.nn.Linear(8, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(2, 5, 8)
        with gl.trace(module=model) as tr:
            for _ in range(steps):
                opt.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
        return to_dot(tr.graph()).source

    small, large = train(6), train(10)
    assert _nodes(small) == _nodes(large) < 100
    assert re.search(r"no_grad step: \d+ ops.*?; updates 26 parameters<", large)
    (frame,) = _frames(large)
    assert "iterations 2 … 9 " in frame


def test_each_leaf_accumulate_grad_folds_with_its_iteration():
    """In the function view, an unnamed leaf that one iteration of a loop reads goes with that
    iteration, and so does its AccumulateGrad: ``sum((v * 2).sum() for v in d.values())`` over 100
    leaves draws one AccumulateGrad inside the loop's frame (it drew 99 beside it: 111 nodes)."""
    torch.manual_seed(0)
    d = {f"k{i}": torch.randn(3, requires_grad=True) for i in range(100)}
    with gl.trace() as tr:
        loss = sum((v * 2).sum() for v in d.values())
        loss.backward()
    g = tr.graph()
    data, fn = to_dot(g).source, to_dot(g, view="function").source
    assert len(_frames(fn)) == 1 and _frames(fn) == _frames(data)
    assert fn.count("[label=<AccumulateGrad>") == 2  # (the loop's one, and the last leaf's after it)
    assert _nodes(fn) < 20
