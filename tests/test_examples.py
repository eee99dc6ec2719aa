"""The scripts in examples/ (GPT-2, BERT, ResNet, ViT, LSTM on small configs) run and keep their promises."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import _step  # noqa: E402  (examples/_step.py: the step every example shares)

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAS_TRANSFORMERS, reason="Hugging Face transformers is not installed (pip install 'graphlens[models]')"
)

#: example -> a top-level name of its module tree, which its diagram names at any depth
CASES = [
    pytest.param("gpt2", "transformer", marks=needs_transformers, id="gpt2"),
    pytest.param("bert", "bert", marks=needs_transformers, id="bert"),
    pytest.param("resnet", "layer1", id="resnet"),
    pytest.param("vit", "blocks", id="vit"),
    pytest.param("lstm", "rnn", id="lstm"),
]


def run_example(name: str, out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--out", str(out), "--json", *extra],
        capture_output=True, text=True, timeout=300, cwd=out.parent, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "module_name"), CASES)
def test_example_runs_traced_step_bitwise_and_writes_its_diagram(name, module_name, tmp_path):
    """Each example, run as a script, traces one forward+backward step whose every parameter
    gradient and buffer is bitwise the untraced run's, names every parameter by its qualified
    name, and writes a pip-only SVG diagram (and the explorer page, where graphlens has one)
    that names the model's modules."""
    facts = run_example(name, tmp_path / "out")
    assert facts["example"] == name
    assert facts["grads_bitwise_equal"] is True
    assert facts["buffers_bitwise_equal"] is True
    assert facts["parameters_with_grad"] == facts["parameter_tensors"] > 0
    assert facts["parameters_named"] is True
    assert facts["graph_ops"] > 10 and facts["graph_tensors"] > 10
    diagram = Path(facts["diagram"])
    assert diagram == tmp_path / "out" / f"{name}.svg"
    text = diagram.read_text(encoding="utf-8")
    assert text.rstrip().endswith("</svg>") and "<svg" in text
    assert re.search(rf">{module_name}[.\s<]", text), f"no text in the diagram starts with {module_name!r}"
    assert facts["diagram_bytes"] == diagram.stat().st_size
    if hasattr(__import__("graphlens").Graph, "to_html"):
        page = Path(facts["page"])
        assert page == tmp_path / "out" / f"{name}.html"
        html = page.read_text(encoding="utf-8")
        assert html.lstrip().lower().startswith("<!doctype html") and module_name in html


def test_example_writes_png_on_request(tmp_path):
    """``--format png`` writes a PNG diagram (pip-only layout) and ``--no-page`` no page."""
    facts = run_example("lstm", tmp_path / "out", "--format", "png", "--no-page")
    diagram = Path(facts["diagram"])
    assert diagram.suffix == ".png" and diagram.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "page" not in facts and not (tmp_path / "out" / "lstm.html").exists()


def test_bitwise_check_sees_one_ulp_a_sign_of_zero_and_a_missing_grad():
    """The examples' gradient comparison fails on a one-ulp difference, on -0.0 against 0.0 and
    on a gradient present in one run only, and passes on equal bytes."""
    a = torch.tensor([1.0, 0.0, 3.0])
    one_ulp = a.clone()
    one_ulp[0] = torch.nextafter(one_ulp[0], torch.tensor(2.0))
    negative_zero = a.clone()
    negative_zero[1] = -0.0
    assert _step._bitwise_equal({"w": a}, {"w": a.clone()})
    assert not _step._bitwise_equal({"w": a}, {"w": one_ulp})
    assert not _step._bitwise_equal({"w": a}, {"w": negative_zero})
    assert not _step._bitwise_equal({"w": a}, {"w": None})
    assert not _step._bitwise_equal({"w": a}, {"v": a})


def test_run_reports_a_step_whose_gradients_differ(tmp_path):
    """``run`` compares real gradients: a step whose traced call computes a different loss than
    its untraced call is reported as not bitwise equal."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    calls = []

    def step(model):
        calls.append(1)
        return model(x).pow(2).sum() * len(calls)  # the warm-up, plain and traced calls differ

    facts = _step.run("drift", model, step, out=tmp_path, page=False)
    assert len(calls) == 3
    assert facts["grads_bitwise_equal"] is False and facts["parameters_with_grad"] == 2
