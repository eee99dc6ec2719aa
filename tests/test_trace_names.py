"""A trace names what a call inside the user's own ``forward`` changed in place after the model
that holds it, walking each such model once (not once per call: quadratic in the layers)."""

from __future__ import annotations

import torch
from torch import nn

import graphlens as gl
import graphlens.names
from graphlens._live import frames


class _Layers(nn.Module):
    """``layers`` conv-BatchNorm-ReLU layers in one ``nn.Sequential``, called from this file's
    ``forward``: each BatchNorm counts its batches in place (``num_batches_tracked.add_(1)``),
    a call whose user frame is this ``forward``, whose ``self`` is the whole model."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.features = nn.Sequential(*[m for _ in range(layers) for m in (nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU())])
        self.hidden = torch.zeros(1, 2, 4, 4)

    def forward(self, x):
        y = self.features(x)
        self.hidden.add_(y.detach())  # (a plain attribute changed in place)
        return y.pow(2).mean()


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(2)

    def forward(self, x):
        return torch.relu(self.bn1(self.conv(x)))


_GLOBAL_MODEL = _Layers(2)


def _step_on_the_global_model(x: torch.Tensor) -> gl.Trace:
    with gl.trace() as tr:  # (the block's variables hold no model: only the inner frame names its buffers)
        _GLOBAL_MODEL(x).backward()
    return tr


def _walks(monkeypatch) -> list:
    """The models walked for names, recorded as they are walked."""
    walked: list = []
    real = graphlens.names._module_items

    def counted(name, module):
        walked.append(type(module).__name__)
        return real(name, module)
    monkeypatch.setattr(graphlens.names, "_module_items", counted)
    monkeypatch.setattr(frames, "_module_items", counted)
    return walked


def test_a_model_is_walked_for_names_once_not_once_per_layer(monkeypatch):
    """Twelve BatchNorm layers changing their counts in place inside the user's ``forward``
    walk the whole model for names once, as the graph is built (twelve times while it ran, before)."""
    walked = _walks(monkeypatch)
    model = _Layers(12)
    x = torch.randn(1, 2, 4, 4)
    with gl.trace() as tr:
        model(x).backward()
    during = walked.count("_Layers")
    g = tr.graph()
    assert during <= 1  # (the block's own variables, read once as it ends)
    assert walked.count("_Layers") <= 2
    counts = [t for t in g.tensors if t.name and t.name.endswith("num_batches_tracked")]
    assert {t.name for t in counts} == {f"model.features.{3 * k + 1}.num_batches_tracked" for k in range(12)}


def test_the_inner_frame_names_what_a_model_the_block_does_not_hold_changed():
    """When the block's variables hold no model, a buffer and an attribute the model's
    ``forward`` changed in place are named from that frame (``self.features.1.num_batches_tracked``,
    ``self.hidden``), from the model as it stands when the graph is built."""
    torch.manual_seed(0)
    tr = _step_on_the_global_model(torch.randn(1, 2, 4, 4))
    g = tr.graph()
    names = [t.name for t in g.tensors]
    assert {"self.hidden", "self.features.1.num_batches_tracked", "self.features.4.num_batches_tracked"} <= set(names)
    add = [op for op in g.ops if op.forward == "add_"]
    assert add and all(op.line is not None for op in add)  # (where each change was made: its own line)


def test_every_version_of_a_buffer_takes_the_name_the_block_gives_it():
    """A BatchNorm's count changed in place inside a block's ``forward`` is named, before and
    after the change, as the block names the model (``model.0.bn1.num_batches_tracked``), not
    once from each frame."""
    torch.manual_seed(0)
    model = nn.Sequential(_Block(), _Block())
    x = torch.randn(1, 2, 4, 4)
    with gl.trace() as tr:
        model(x).sum().backward()
    names = [t.name for t in tr.graph().tensors if t.name and "num_batches_tracked" in t.name]
    assert sorted(names) == ["model.0.bn1.num_batches_tracked"] * 2 + ["model.1.bn1.num_batches_tracked"] * 2


def test_a_model_noted_for_names_is_not_kept_alive():
    """A model made and dropped inside the block is held only weakly while it waits to be
    walked for names: it is gone when the block ends, and what only its frame could name
    stays unnamed (never named after another tensor)."""
    import gc
    import weakref

    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 4)
    refs = []
    with gl.trace() as tr:
        model = _Layers(2)
        refs.append(weakref.ref(model))
        model(x).backward()
        del model
    gc.collect()
    assert refs[0]() is None
    g = tr.graph()
    assert any(op.forward == "add_" for op in g.ops)
    assert not any(t.name and t.name.startswith("self.") for t in g.tensors)
