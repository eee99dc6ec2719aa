"""g.memory(): the bytes saved tensors keep alive until backward, checked against torch's own
saved_tensors_hooks count on an MLP, a 2-layer GPT-2, an LSTM and a checkpointed block."""

from __future__ import annotations

import gc
import weakref
from collections import Counter, OrderedDict

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import graphlens as gl
from graphlens.graph import Graph
from graphlens.memory import OUTSIDE, Memory, format_bytes, memory, saved_bytes

_RANK = {"untracked": 1, "activation": 2, "parameter": 3}


def torch_count(run) -> dict[str, int]:
    """Run ``run()`` under a pack hook that sees every tensor autograd saves, and count each
    storage once (by ``untyped_storage().data_ptr()``), classed as graphlens classes it:
    history -> activation, a leaf that requires grad -> parameter, else untracked."""
    seen: dict[int, tuple[int, str]] = {}
    held = []  # (kept until counted, so no address is reused by another storage meanwhile)

    def pack(t):
        held.append(t)
        storage = t.untyped_storage()
        base = t._base if t._is_view() else t
        kind = "activation" if base.grad_fn is not None else ("parameter" if base.requires_grad else "untracked")
        old = seen.get(storage.data_ptr())
        if old is None or _RANK[kind] > _RANK[old[1]]:
            seen[storage.data_ptr()] = (storage.nbytes(), kind)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    out = dict.fromkeys(_RANK, 0)
    for nbytes, kind in seen.values():
        out[kind] += nbytes
    out["storages"] = sum(1 for _, kind in seen.values() if kind != "parameter")
    held.clear()
    return out


def kinds(m: Memory) -> dict[str, int]:
    return {"untracked": m.untracked, "activation": m.activations, "parameter": m.parameters, "storages": m.storages}


def measured(module: nn.Module, run, seed: int = 0) -> tuple[dict, Memory, Memory, Memory, Graph]:
    """torch's count, then graphlens's of the same program: traced before and after backward,
    and a snapshot (each run from the same seed)."""
    torch.manual_seed(seed)
    expected = torch_count(run)
    torch.manual_seed(seed)
    with gl.trace(module=module) as tr:
        loss = run()
        before = tr.graph()
        loss.backward()
    after = tr.graph()
    torch.manual_seed(seed)
    snap = gl.snapshot(run(), module=module)
    return expected, before.memory(), after.memory(), snap.memory(), after


def assert_agree(expected: dict, *found: Memory) -> None:
    assert expected["activation"] > 0 and expected["parameter"] > 0
    for m in found:
        assert kinds(m) == expected
        assert m.total == expected["activation"] + expected["untracked"] == sum(m.ops.values())
        assert not m.unmeasured


def held_by_name(g: Graph, m: Memory) -> Counter:
    return Counter((g.node(op).name, m.held[op], m.ops[op]) for op in m.ops)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def test_mlp_total_equals_the_saved_tensors_hooks_count():
    """On an MLP, traced (before and after backward) and snapshot, graphlens counts exactly the
    bytes, kinds and storages torch's pack hook sees, and the snapshot's ops hold what the trace's do."""
    model, x = mlp(), torch.randn(16, 8)
    expected, before, after, snap, g = measured(model, lambda: model(x).pow(2).mean())
    assert_agree(expected, before, after, snap)
    assert expected["untracked"] == x.nbytes  # the input, saved by the first Linear
    # the tanh and relu outputs are each saved twice (by the activation and the next Linear): counted once
    assert expected["activation"] == 2 * 16 * 32 * 4 + 16 * 4
    torch.manual_seed(0)
    gs = gl.snapshot(model(x).pow(2).mean(), module=model)
    assert held_by_name(gs, gs.memory()) == held_by_name(g, after)


def test_gpt2_two_layers_per_module_and_the_hooks_count():
    """A 2-layer GPT-2 (transformers, random weights) gives torch's count under trace and snapshot,
    with bytes summed per module: transformer.h holds h.0 and h.1, h.0 holds h.0.attn."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=64,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (2, 8))
    expected, before, after, snap, g = measured(model, lambda: model(ids, labels=ids).loss)
    assert_agree(expected, before, after, snap)
    mods = after.modules
    assert mods["transformer.h"] == mods["transformer.h.0"] + mods["transformer.h.1"] > 0
    assert mods["transformer.h.0"] >= mods["transformer.h.0.attn"] + mods["transformer.h.0.mlp"]
    assert mods["transformer.h.0.attn"] > 0 and mods["transformer.h.0.mlp"] > 0
    assert mods["transformer"] + after.outside + mods.get("lm_head", 0) == after.total
    rows = str(after).splitlines()
    assert rows[0] == (f"saved for backward: {format_bytes(after.total)} in {after.storages} storages "
                       f"(activations {format_bytes(after.activations)}, untracked {format_bytes(after.untracked)})")
    assert rows[3].split()[0] == "transformer"  # the largest module first
    sizes = [after.modules.get(r.split()[0], after.outside) for r in rows[3:] if not r.startswith("...")]
    assert sizes == sorted(sizes, reverse=True)


def test_lstm_total_equals_the_saved_tensors_hooks_count():
    """A 2-layer LSTM's saved tensors (weights, gates, workspaces) are counted as torch's pack hook counts them."""
    torch.manual_seed(0)
    model = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    x = torch.randn(3, 5, 8)
    expected, before, after, snap, _ = measured(model, lambda: model(x)[0].pow(2).sum())
    assert_agree(expected, before, after, snap)


class Net(nn.Module):
    def __init__(self, use_checkpoint: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Linear(8, 64)
        self.block = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.head = nn.Linear(64, 1)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        h = self.stem(x)
        h = checkpoint(self.block, h, use_reentrant=False) if self.use_checkpoint else self.block(h)
        return self.head(h).sum()


def test_checkpointing_a_block_drops_its_saved_bytes_to_its_input():
    """Under non-reentrant checkpointing the block keeps only its input (to recompute itself),
    graphlens's count still equals torch's, and the block's bytes and the total drop."""
    x = torch.randn(16, 8)
    plain, ck = Net(False), Net(True)
    expected, _, full, full_snap, _ = measured(plain, lambda: plain(x))
    assert_agree(expected, full, full_snap)
    expected_ck, before, after, snap, g = measured(ck, lambda: ck(x))
    assert_agree(expected_ck, before, after, snap)
    unit = 16 * 64 * 4  # one activation of the block's width
    assert full.modules["block"] == 4 * unit  # its input and its three tanh outputs
    assert after.modules["block"] == unit  # its input only: what the checkpoint keeps
    assert after.total == full.total - 3 * unit + unit  # (the last tanh output is now charged to the head)
    hidden = [e for o in gl.snapshot(ck(x)).ops for e in o.saved if e.state.value == "hidden by saved-tensor hooks"]
    assert hidden and all(s.nbytes == unit for e in hidden for s in e.storages)  # each keeps the block's input


def test_a_storage_saved_twice_or_through_a_view_is_counted_once_at_full_size():
    """A tensor saved by two ops, and a view of it saved by a third, count once at its storage's full size."""
    w1 = torch.randn(100, requires_grad=True)
    w2 = torch.randn(100, requires_grad=True)
    x = torch.randn(100)
    run = lambda: (w1 * x).sum() + (w2 * x).sum() + (w1[:10] * x[:10]).sum() + (w1[:10] * w2[:10]).sum()  # noqa: E731
    with gl.trace() as tr:
        run()
    m = tr.graph().memory()
    assert m.untracked == x.untyped_storage().nbytes() == 400 and m.storages == 1
    assert sorted(m.held.values()) == [400, 400, 400] and sorted(m.ops.values()) == [0, 0, 400]
    assert m.parameters == 800  # w1 (through a view) and w2: alive anyway, not in the total
    assert m.total == 400 and kinds(m) == torch_count(run)


def test_python_numbers_torch_wraps_are_not_counted_but_0d_tensors_are():
    """``w * 0.5`` saves a wrapped number, which no pack hook sees and the total leaves out;
    a real 0-d float64 tensor is counted."""
    w = torch.randn(4, requires_grad=True)
    half = torch.tensor(0.5, dtype=torch.float64)
    run = lambda: ((w * 0.5).sum() + (w * half).sum())  # noqa: E731
    expected = torch_count(run)
    g = gl.snapshot(run())
    kinds_seen = {s.kind for o in g.ops for e in o.saved for s in e.storages}
    assert "number" in kinds_seen
    assert kinds(g.memory()) == expected and g.memory().total == 8


def test_custom_function_saved_tensors_are_counted():
    """Tensors an autograd.Function saves with ctx.save_for_backward are counted like torch's hook counts them."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            return 2 * a * grad

    w = torch.randn(8, requires_grad=True)
    run = lambda: Square.apply(w.exp()).sum()  # noqa: E731
    expected = torch_count(run)
    with gl.trace() as tr:
        run()
    assert kinds(tr.graph().memory()) == expected and expected["activation"] == 32  # exp's result, saved twice, once


def test_a_reused_address_is_a_new_storage():
    """A storage freed during the forward (its graph died) and an address torch hands out again
    are two storages in a trace, as in torch's count."""
    w = torch.randn(1000, requires_grad=True)
    ptrs = []
    with gl.trace() as tr:
        for _ in range(10):
            noise = torch.randn(1000)
            ptrs.append(noise.data_ptr())
            y = (w * noise).sum()
            del noise, y  # (the graph dies, and its saved noise with it)
    if len(set(ptrs)) == len(ptrs):
        pytest.skip("the allocator handed out no address twice: nothing to tell apart")
    numbers = [s.number for o in tr.graph().ops for e in o.saved for s in e.storages]
    assert len(numbers) == len(set(numbers)) == 10
    assert tr.graph().memory().untracked == 10 * 4000


def test_memory_keeps_no_tensor_alive():
    """Neither the graph nor its Memory keeps a tensor alive: the activations die with the program's references."""
    model, x = mlp(), torch.randn(4, 8)
    with gl.trace(module=model) as tr:
        h = model[1](model[0](x))
        loss = model[2:](h).sum()
    refs = [weakref.ref(t) for t in (h, loss)]
    g = tr.graph()
    m, ms = g.memory(), gl.snapshot(loss, module=model).memory()
    del h, loss
    gc.collect()
    assert all(r() is None for r in refs)
    assert m.total == ms.total > 0 and g.memory() == m  # (still readable: plain numbers)


def test_json_round_trip_keeps_the_storages():
    """A graph read back from JSON gives the same Memory; a bad storage field is a sentence naming it."""
    model, x = mlp(), torch.randn(4, 8)
    with gl.trace(module=model) as tr:
        model(x).sum().backward()
    g = tr.graph()
    back = Graph.from_json(g.to_json())
    assert back == g and back.memory() == g.memory()
    data = g.to_dict()
    entry = next(e for o in data["ops"] for e in o["saved"] if e.get("storages"))
    entry["storages"][0]["kind"] = "gas"
    with pytest.raises(ValueError, match=r"unknown storage kind: 'gas'"):
        Graph.from_dict(data)


def test_what_cannot_be_measured_is_said_not_counted():
    """A snapshot taken after backward cannot read the freed tensors: the table says so, with no bytes for them."""
    model, x = mlp(), torch.randn(4, 8)
    loss = model(x).sum()
    loss.backward()
    m = gl.snapshot(loss, module=model).memory()
    assert m.total == 0 and m.unmeasured_ops
    assert "not counted: " in str(m) and "freed before graphlens read them" in str(m)


def test_a_graph_without_saved_entries_is_refused():
    """memory() of a snapshot taken with saved=False raises, saying to pass saved=True."""
    w = torch.randn(3, requires_grad=True)
    g = gl.snapshot((w.exp() * w).sum(), saved=False)
    with pytest.raises(ValueError, match=r"saved=True"):
        g.memory()
    with pytest.raises(TypeError, match="graph must be a graphlens Graph"):
        memory("loss")


def test_table_options_and_saved_bytes():
    """table(depth=, limit=) trims the rows; saved_bytes maps op ids to the charged bytes; bad options are refused."""
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(a=nn.Sequential(nn.Linear(4, 8), nn.Tanh()), b=nn.Sequential(nn.Linear(8, 8), nn.Tanh())))
    with gl.trace(module=model) as tr:
        model(torch.randn(2, 4)).sum()
    g = tr.graph()
    m = g.memory()
    top = [r.split()[0] for r in m.table(depth=1).splitlines()[3:]]
    assert set(top) == {"a", "b"} and "a.1" in m.table() and OUTSIDE not in m.table()
    assert m.table(limit=1).splitlines()[-1].startswith("... ")
    assert saved_bytes(g) == dict(m.ops) and sum(saved_bytes(g).values()) == m.total
    assert all(g.node(op).scope for op in m.ops)
    with pytest.raises(ValueError, match="depth must be"):
        m.table(depth=0)
    assert (format_bytes(0), format_bytes(1023), format_bytes(1024), format_bytes(5 * 2**30)) == ("0 B", "1023 B", "1.0 KiB", "5.0 GiB")
