"""The module view of real models: collapsed by module, repeated blocks and loop bodies drawn once, buffers and frozen parts."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import torch
import torch.nn as nn

import graphlens as gl
from graphlens.render import to_dot
from graphlens.render.draw import build_scene
from graphlens.render.scene import graph_buffers
from graphlens.render.output import LayoutTimeout, find_layout_program, layout
from graphlens.render.style import MODULE_NODES


def scene(g, **kw):
    """The collapsed scene's nodes, as to_dot() draws them."""
    args = dict(view="data", direction="forward", legend=True, values=True, grads=True, saved=False, highlight=None,
                max_elements=4, precision=4, max_nodes=150, depth=None)
    args.update(kw)
    _, nodes, edges, _, _ = build_scene(g, *args.values())
    return nodes, edges


def gpt2_graph(layers: int):
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0, n_layer=layers, n_embd=32, n_head=2,
                                  vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 50, (2, 8))
    with gl.trace(module=model) as tr:
        loss = model(ids, labels=ids).loss
        loss.backward()
    return tr.graph()


class Block(nn.Module):
    def __init__(self, c: int, act=nn.ReLU):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.act = act()
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + x
        return self.act(out)


class Net(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.layer1 = nn.Sequential(*blocks)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.layer1(self.stem(x)).mean((2, 3)))


def resnet_graph(blocks=None, *, freeze_stem=False):
    torch.manual_seed(0)
    model = Net(blocks or [Block(4), Block(4), Block(4)])
    if freeze_stem:
        for p in model.stem.parameters():
            p.requires_grad_(False)
    x = torch.randn(2, 3, 6, 6)
    with gl.trace(module=model) as tr:
        loss = model(x).pow(2).mean()
        loss.backward()
    return tr.graph()


def test_gpt2_opens_by_module_with_its_blocks_drawn_once():
    """A 6-layer GPT-2 opens collapsed to modules, within MODULE_NODES nodes, its six blocks drawn once as '× 6'."""
    g = gpt2_graph(6)
    nodes, _ = scene(g)
    assert len(nodes) <= MODULE_NODES
    assert any(n.kind == "box" for n in nodes)
    source = to_dot(g).source
    assert source.count("× 6") == 1 and "transformer.h.0 … transformer.h.5" in source
    assert "transformer.h.3" not in source  # blocks 1-5 are not drawn
    assert not re.search(r"<B>transformer\.h\.[1-5]", source)


def test_every_drawn_op_stands_in_one_node_after_folding():
    """Folding keeps every op of the full drawing in exactly one drawn node's members (what pages map steps to)."""
    g = gpt2_graph(3)
    full, _ = scene(g, depth=99, repeats=False)
    ops = {n.id for n in full if n.kind == "op"}
    for kw in ({}, {"depth": 3}, {"depth": 4}):
        nodes, _ = scene(g, **kw)
        seen = [m for n in nodes for m in n.members if m in ops]
        assert sorted(seen) == sorted(ops), kw


def test_depth_opens_further_and_repeats_false_draws_each_block():
    """depth= opens deeper levels (attn inside the block), and repeats=False draws every block."""
    g = gpt2_graph(3)
    deep = to_dot(g, depth=4).source
    assert "transformer.h.0.attn" in deep and "× 3" in deep
    every = to_dot(g, depth=3, repeats=False).source
    for i in range(3):
        assert f"<B>transformer.h.{i}</B>" in every
    assert "× 3" not in every
    one_box = to_dot(g, depth=3).source  # a block that is one box: the box is relabelled
    assert "transformer.h.0 … transformer.h.2" in one_box and "× 3" in one_box


def test_blocks_that_differ_are_not_folded():
    """Blocks with different ops (ReLU against Tanh) are drawn apart; the alike run before them folds."""
    g = resnet_graph([Block(4), Block(4), Block(4, nn.Tanh)])
    source = to_dot(g, depth=2).source
    assert "layer1.0 … layer1.1" in source and "× 2" in source
    assert "<B>layer1.2</B>" in source


def test_module_buffers_are_left_out_unless_asked():
    """BatchNorm's running statistics are not drawn by default (the legend counts them); buffers=True draws them."""
    g = resnet_graph()
    names = {t.name for t in g.tensors if t.name}
    assert "layer1.0.bn1.running_mean" in names
    plain = to_dot(g, depth=99, repeats=False).source
    assert "running_mean" not in plain and "num_batches_tracked" not in plain
    assert "21 module buffers not drawn" in plain  # 7 BatchNorms x 3 buffers
    shown = to_dot(g, depth=99, repeats=False, buffers=True).source
    assert "layer1.0.bn1.running_mean" in shown and "num_batches_tracked" in shown
    # the gradients are untouched: every parameter is still drawn and the loss still reaches them
    for t in g.tensors:
        if t.is_parameter:
            assert t.name in plain


def test_a_frozen_module_is_drawn_frozen():
    """A box none of whose parameters requires grad is drawn grey and dashed and says it is frozen."""
    g = resnet_graph(freeze_stem=True)
    source = to_dot(g, depth=1).source
    stem = next(line for line in source.splitlines() if "<B>stem</B>" in line)
    assert "frozen" in stem and "dashed" in stem
    layer = next(line for line in source.splitlines() if "<B>layer1.0 … layer1.2</B>" in line or "<B>layer1</B>" in line)
    assert "frozen" not in layer
    assert "frozen submodule" in source  # the legend


def test_a_user_variable_between_modules_stays_visible_and_one_inside_a_block_does_not():
    """A tensor the program names between two modules is drawn; 'out' used only inside a block's forward is boxed."""
    g = resnet_graph()
    torch.manual_seed(0)
    model = Net([Block(4), Block(4)])
    x = torch.randn(2, 3, 6, 6)
    with gl.trace(module=model) as tr:
        feats = model.layer1(model.stem(x))
        loss = model.fc(feats.mean((2, 3))).sum()
        loss.backward()
    g = tr.graph()
    source = to_dot(g, depth=1).source
    assert g.find("feats").id in source
    assert not any(n.name == "out" and n.id in re.findall(r"\t(\w+) \[", source) for n in g.tensors)


def test_small_models_stay_open():
    """A model graph under MODULE_NODES drawn nodes is drawn op by op, with no boxes."""
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    with gl.trace(module=model) as tr:
        loss = model(torch.ones(2, 3)).sum()
        loss.backward()
    nodes, _ = scene(tr.graph())
    assert not any(n.kind == "box" for n in nodes)


def unrolled_lstm(steps: int):
    torch.manual_seed(0)
    cell = nn.LSTMCell(4, 8)
    xs = torch.randn(steps, 2, 4)
    with gl.trace(module=cell) as tr:
        h = torch.zeros(2, 8)
        c = torch.zeros(2, 8)
        for t in range(steps):
            h, c = cell(xs[t], (h, c))
        loss = h.sum()
        loss.backward()
    return tr.graph()


def test_a_loop_body_is_drawn_once_with_its_count():
    """An LSTMCell unrolled 60 times is drawn as one iteration marked '× 60', within a few dozen nodes."""
    g = unrolled_lstm(60)
    nodes, edges = scene(g)
    assert len(nodes) < 40
    source = to_dot(g).source
    assert "× 60" in source and "iterations 1 … 60" in source
    # the loss is still drawn from the loop's last h (drawn as iteration 1's)
    loss = g.find("loss")
    assert loss.id in source


def test_a_short_loop_is_drawn_whole():
    """A loop that fits in max_nodes is drawn step by step, not folded."""
    g = unrolled_lstm(4)
    assert "× 4" not in to_dot(g).source


@pytest.mark.slow
def test_every_model_diagram_lays_out_quickly():
    """The default diagrams of GPT-2 (12 blocks), the ResNet and a 150-step LSTMCell loop lay out in a few seconds pip-only or with dot."""
    find_layout_program()
    for g in (gpt2_graph(12), resnet_graph(), unrolled_lstm(150)):
        t0 = time.perf_counter()
        svg = layout(to_dot(g).source, "svg")
        assert svg.startswith(b"<?xml") or b"<svg" in svg[:400]
        assert time.perf_counter() - t0 < 10


def test_a_layout_over_its_time_limit_is_stopped_with_advice():
    """A layout that runs past timeout= is stopped, and the error says how to draw less."""
    g = unrolled_lstm(40)
    source = to_dot(g, repeats=False).source  # the whole unrolled loop: slow to lay out
    with pytest.raises(LayoutTimeout, match=r"depth=1.*to_html.*timeout=None"):
        layout(source, "svg", timeout=0.05)
    with pytest.raises(ValueError, match="timeout must be"):
        layout(source, "svg", timeout=0)


def test_the_same_model_gives_the_same_bytes():
    """The module view is deterministic: the same program gives byte-identical DOT."""
    assert to_dot(resnet_graph()).source == to_dot(resnet_graph()).source
    assert to_dot(unrolled_lstm(30)).source == to_dot(unrolled_lstm(30)).source


def test_names_come_from_the_users_frames_not_the_librarys():
    """In a traced GPT-2 step only the user's variables and qualified parameter names name tensors (not transformers' locals such as shift_labels)."""
    g = gpt2_graph(2)
    names = {t.name for t in g.tensors if t.name}
    assert {"loss"} <= names
    assert all(n in ("loss", "ids") or n.startswith(("transformer.", "lm_head.")) for n in names), names


def test_an_open_modules_work_on_tensors_needing_no_grad_is_one_box():
    """BERT's attention-mask preparation (ops on tensors that need no grad, at BertModel's own level) is drawn as one 'needs no grad' box, not a dozen leaves."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    ids = torch.randint(1, 60, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    with gl.trace(module=model) as tr:
        loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2])).loss
        loss.backward()
    g = tr.graph()
    nodes, _ = scene(g)
    side = [n for n in nodes if n.kind == "box" and n.id.startswith("side_")]
    assert side and all("needs no grad" in n.label for n in side)
    # no unnamed tensor of a module's own no-grad work is left loose (the user's top-level values may be)
    loose = [g.node(n.id) for n in nodes if n.kind == "tensor" and n.id in g]
    stray = [t.id for t in loose if not (t.requires_grad or t.name or t.scope is None)]
    assert not stray, stray
    assert "× 2" in to_dot(g).source  # the two encoder layers, drawn once


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(16, 16)
        self.g = nn.Linear(16, 16)

    def forward(self, x):
        return x + self.g(torch.tanh(self.f(x)))


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(*[Residual() for _ in range(4)])
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.enc, x, use_reentrant=False))


def test_checkpointed_and_autocast_regions_are_marked():
    """A non-reentrant checkpoint is a 'checkpoint' frame (recomputed in backward) and boxes of ops run under autocast say so; the gradients are the plain ones."""
    torch.manual_seed(0)
    model = Checkpointed()
    x = torch.randn(2, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(x).float().sum()
    plain.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with gl.trace(module=model) as tr:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().sum()
        loss.backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(expected, model.parameters()))
    g = tr.graph()
    inside = {o.scope.split(".")[0] for o in g.ops if o.region and o.region.startswith("checkpoint#") and o.scope}
    assert inside == {"enc"}  # the head ran outside the checkpoint
    source = to_dot(g, depth=2).source
    assert "checkpointed: recomputed in backward" in source  # the legend
    assert "autocast: 2 ops in bfloat16" in source
    assert "enc.0 … enc.3" in source and "× 4" in source  # alike blocks fold inside the frame too
    # without autocast no box says autocast
    with gl.trace(module=model) as tr2:
        model(x).sum().backward()
    assert "autocast" not in to_dot(tr2.graph(), depth=2).source


def test_a_checkpoint_region_is_never_called_a_no_grad_block():
    """Explaining a tensor made inside a non-reentrant checkpoint never says 'inside torch.checkpoint(), where PyTorch records no graph'."""
    from torch.utils.checkpoint import checkpoint

    w = torch.randn(3, requires_grad=True)

    def part(x):
        return (x * w).argmax().float()

    with gl.trace() as tr:
        idx = checkpoint(part, torch.ones(3), use_reentrant=False)
        loss = idx * 2
    answer = str(gl.explain(loss, tr))
    assert "records no graph" not in answer and "torch.checkpoint()" not in answer
    assert "argmax" in answer


def _cycle(nodes, edges) -> list[str] | None:
    """A cycle among the drawn nodes (as ids), or None: no autograd graph has one."""
    drawn = {n.id for n in nodes}
    succs: dict[str, list[str]] = {}
    for e in edges:
        if e.src != e.dst and e.src in drawn and e.dst in drawn:
            succs.setdefault(e.src, []).append(e.dst)
    state: dict[str, int] = {}
    for start in drawn:
        if start in state:
            continue
        path, stack = [start], [iter(succs.get(start, ()))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(succs.get(nxt, ())))
    return None


class Downsample(Block):
    def __init__(self, c: int):
        super().__init__(c)
        self.down = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        out = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(out)) + self.down(x))


def test_a_snapshot_of_a_resnet_draws_no_cycle_and_no_backward_op_as_needing_no_grad():
    """A snapshot infers scopes from parameter names, so each residual add lies between blocks: in every view, level and fold its picture has no cycle, and no box says its ops need no grad (each recorded a backward node)."""
    torch.manual_seed(0)
    model = Net([Block(4), Block(4), Downsample(4), Block(4), Block(4)])
    g = gl.snapshot(model(torch.randn(2, 3, 6, 6)).pow(2).mean(), module=model)
    assert all(op.name is not None for op in g.ops)
    for view in ("data", "function"):
        for depth in (None, 1, 2, 3):
            for repeats in (True, False):
                nodes, edges = scene(g, view=view, depth=depth, repeats=repeats, max_nodes=40)
                where = (view, depth, repeats)
                assert _cycle(nodes, edges) is None, (where, _cycle(nodes, edges))
                assert not [n.id for n in nodes if n.kind == "box" and "needs no grad" in n.label], where
    source = to_dot(g, view="function", repeats=False).source  # (this one drew a cycle, and the row planner climbed it forever)
    assert "needs no grad" not in source and "layer1.0" in source


def test_a_needs_no_grad_box_holds_only_ops_that_recorded_no_backward_node():
    """In a traced BERT step, every op in a 'needs no grad' box made no backward node, in both views."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16)
    model = transformers.BertModel(cfg)
    ids = torch.randint(1, 60, (2, 10))
    with gl.trace(module=model) as tr:
        model(input_ids=ids, attention_mask=torch.ones(2, 10, dtype=torch.long)).last_hidden_state.pow(2).mean().backward()
    g = tr.graph()
    found = 0
    for view in ("data", "function"):
        nodes, edges = scene(g, view=view)
        assert _cycle(nodes, edges) is None, view
        for n in nodes:
            if n.kind == "box" and "needs no grad" in n.label:
                ops = [g.node(m) for m in n.members if m in g and isinstance(g.node(m), gl.OpNode)]
                found += bool(ops)
                assert all(op.name is None for op in ops), (view, n.id, [op.name for op in ops])
    assert found


def test_a_short_unrolled_loop_folds_in_both_views_counting_each_call():
    """An LSTMCell run 30 times (a picture below max_nodes, above MODULE_NODES) folds in both views; the
    function view holds each call's own gates inside the iteration, and the count is 30 calls, not 15 pairs."""
    torch.manual_seed(0)
    cell = nn.LSTMCell(4, 8)
    with gl.trace(module=cell) as tr:
        h = c = torch.zeros(1, 8)
        for _ in range(30):
            h, c = cell(torch.randn(1, 4), (h, c))
        h.sum().backward()
    g = tr.graph()
    for view in ("data", "function"):
        nodes, edges = scene(g, view=view)
        assert len(nodes) <= MODULE_NODES, (view, len(nodes))
        assert _cycle(nodes, edges) is None, view
        source = to_dot(g, view=view).source
        assert re.search(r"× (29|30): a loop", source), view
        assert "× 15" not in source, view
    fn_nodes, _ = scene(g, view="function")
    assert sum(1 for n in fn_nodes if n.kind == "op" and "UnsafeSplitBackward0" in n.label) <= 2  # (the gates drawn once)


def test_batch_counts_are_buffers_in_a_trace_without_module():
    """Traced without ``module=`` (scopes only inferred from the parameters), BatchNorm's
    ``num_batches_tracked.add_(1)`` has no scope: its two versions (named from two frames,
    ``self.bn.num_batches_tracked`` and ``model.1.num_batches_tracked``) and the ``add_`` are still
    module buffers, left out and counted; an optimizer's state and the gradients it reads are not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1), nn.BatchNorm1d(1))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 3)
    with gl.trace() as tr:
        for _ in range(2):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
    g = tr.graph()
    assert any(op.forward == "add_" and op.scope is None and op.name is None for op in g.ops)
    plain = to_dot(g).source
    assert "num_batches_tracked" not in plain and "running_mean" not in plain
    assert "6 module buffers not drawn" in plain  # 2 BatchNorms x 3 buffers
    gone = graph_buffers(g)[0]
    kept = [t.name for t in g.tensors if t.id not in gone and t.name and ("exp_avg" in t.name or t.name.endswith(".grad"))]
    assert any("exp_avg" in n for n in kept) and any(n.endswith(".grad") for n in kept)
    assert "num_batches_tracked" in to_dot(g, buffers=True).source


def _one_step(blocks: int, steps: int):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(blocks)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gl.trace() as tr:
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(2, 4)).pow(2).mean().backward()
            opt.step()
    return tr.graph()


def test_a_training_step_draws_each_parameter_inside_the_module_call_that_used_it():
    """In a trace of one training step, the optimizer's update under no_grad does not keep a parameter out of the
    box of the call that used it with grad on: the box holds it, and the update reads the box (200 parameters drawn
    one by one before, 218 nodes; over several steps the loop's folding decides, as before)."""
    g = _one_step(100, 1)
    nodes, edges = scene(g)
    assert not any(n.kind == "tensor" and n.param for n in nodes) and len(nodes) < 30
    boxes = {n.id: n for n in nodes if n.kind == "box"}
    held = {m for b in boxes.values() if b.scope == "model" for m in b.members}
    assert {t.id for t in g.tensors if t.is_parameter and t.version == 0} <= held
    (step,) = [n for n in boxes.values() if n.scope is None]  # (the no_grad step: the update of every parameter)
    readers = {e.src for e in edges if e.dst == step.id}
    assert readers and readers <= set(boxes) and all(boxes[r].scope == "model" for r in readers)


def test_an_evaluation_under_no_grad_keeps_the_parameters_it_reads_drawn():
    """Parameters a no_grad evaluation reads (and no step updates) stay drawn, read by both the training and the evaluation calls."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    batch = torch.randn(16, 4)
    with gl.trace() as tr:
        loss = model(batch).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            score = model(batch).mean()  # noqa: F841
    nodes, _ = scene(tr.graph())
    assert sorted(n.id for n in nodes if n.kind == "tensor" and n.param) == sorted(t.id for t in tr.graph().tensors if t.is_parameter)
