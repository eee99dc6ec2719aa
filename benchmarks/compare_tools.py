"""graphlens beside torchviz, torchview and torchlens on the same real models: works or not, what each picture shows, time, size.

Run in a venv that has all four (torch CPU first, then the tools; none needs torchvision):

    python3 -m venv /tmp/venv-cmp && /tmp/venv-cmp/bin/pip install torch==2.13.0
    /tmp/venv-cmp/bin/pip install torchviz torchview torchlens transformers graphviz graphviz-pure numpy
    /tmp/venv-cmp/bin/python benchmarks/compare_tools.py      # graphlens is taken from this checkout

Every (tool, model) pair runs in its own Python process (torchlens wraps torch's functions for
the rest of a process; a hang or a crash stays in its process), with a time limit.  Measured:

* ``graph_s``: from a built model and its inputs to the tool's DOT text, including the forward
  pass (and the backward pass for the tools that record it: graphlens, torchlens), of which
  ``capture_s`` is the recording (torchview does both in one call; torchlens runs ``dot`` on
  its picture before it hands back the DOT text, so its ``graph_s`` includes a layout); the
  plain forward+backward step (``plain_step_s``) is measured in the same process for scale;
* ``layout_s``, ``svg_bytes``: the DOT laid out to SVG by the same program for every tool
  (Graphviz ``dot``, or ``graphviz-pure`` where ``dot`` is absent), with a time limit;
* ``dot_bytes``, ``nodes``: the DOT text's size and its number of node statements;
* ``grads_bitwise_equal``: after the tool's run, the model's gradients are bitwise those of a
  plain run from the same seed, dropout on (tools that run no backward are run with a plain
  backward after them); ``loss_bitwise_equal`` the same for the loss, and where it differs,
  ``eval_loss_bitwise_equal`` whether it is equal with dropout off (``model.eval()``);
* what the DOT text shows, by probes on its text (``shows``): how many of the model's qualified
  module names (``h.0.attn``) and of its module class names (``GPT2Attention``) it names, whether a
  qualified parameter name appears,
  tensor shapes (the logits' shape in any spelling), forward op names (``linear``), backward
  node names (``AddmmBackward0``), a value (the loss, 4 significant digits), a gradient (the
  first element of the last layer's bias gradient, 4 significant digits), saved tensors
  (each tool's own mark for them, with the option that turns them on).

Options: each tool with the options that show the most it can on a backward graph
(torchviz ``params=`` and ``show_saved=True``; torchview ``expand_nested=True``; torchlens
gradients saved and ``show_saved_for_backward=True``, its forward picture and its backward
picture; graphlens ``trace(module=)`` with ``saved=True``, otherwise defaults).
Writes ``benchmarks/compare_tools.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # graphlens from this checkout
sys.path.insert(0, str(ROOT / "examples"))  # the examples' ResNet and LSTM language model

__all__ = ["MODELS", "TOOLS", "measure", "main"]

MODELS = ("gpt2", "bert", "resnet", "lstm")
TOOLS = ("torchviz", "torchview", "torchlens", "torchlens-backward", "graphlens")

#: per model: (unused), (unused), a qualified parameter name, the parameter whose gradient is probed
PROBES = {
    "gpt2": ("h.0.attn", "GPT2Attention", "h.0.attn.c_attn.weight", "transformer.ln_f.bias"),
    "bert": ("encoder.layer.0", "BertLayer", "attention.self.query.weight", "classifier.bias"),
    "resnet": ("layer1.0", "BasicBlock", "layer1.0.conv1.weight", "fc.bias"),
    "lstm": ("rnn", "LSTM", "rnn.weight_hh_l0", "decoder.bias"),
}
FORWARD_OP = re.compile(r"(?<![A-Za-z])(linear|addmm|conv2d|layer_norm|embedding|lstm|matmul|softmax)(?![A-Za-z])")
BACKWARD_NODE = re.compile(r"[A-Z][A-Za-z]*Backward\d|_back_\d")
SAVED_MARK = {  # how each tool marks a saved tensor in its DOT text
    "torchviz": re.compile(r"fillcolor=orange"),
    "graphlens": re.compile(r"saved "),
    "torchlens": re.compile(r"saved", re.I),
    "torchlens-backward": re.compile(r"saved", re.I),
    "torchview": re.compile(r"saved", re.I),
}


# -- the models (small configs, no weights downloaded) ---------------------------------------
def build(name: str):
    """``(model, inputs, loss_of)``: ``loss_of(model, *inputs)`` is the training loss."""
    import torch
    from torch.nn import functional as F

    torch.manual_seed(0)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel, logging

        logging.set_verbosity_error()
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=16, bos_token_id=0, eos_token_id=0))
        return model, (torch.randint(0, 128, (2, 16)),), lambda m, ids: m(input_ids=ids, labels=ids).loss
    if name == "bert":
        from transformers import BertConfig, BertForSequenceClassification, logging

        logging.set_verbosity_error()
        model = BertForSequenceClassification(BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=256,
            vocab_size=128, max_position_embeddings=16, num_labels=3,
        ))
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 8:] = 0
        inputs = (torch.randint(1, 128, (2, 16)), mask, torch.tensor([0, 2]))
        return model, inputs, lambda m, ids, mask, labels: m(input_ids=ids, attention_mask=mask, labels=labels).loss
    if name == "resnet":
        from resnet import ResNet

        model = ResNet((2, 2, 2, 2), width=16, classes=10)
        return model, (torch.randn(2, 3, 64, 64), torch.tensor([1, 9])), lambda m, x, y: F.cross_entropy(m(x), y)
    if name == "lstm":
        from lstm import LSTMLanguageModel

        model = LSTMLanguageModel(100, 32, 2)
        tokens = torch.randint(0, 100, (21, 4))

        def loss_of(m, tokens):
            logits, _ = m(tokens[:-1])
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[1:].reshape(-1))

        return model, (tokens,), loss_of
    raise ValueError(f"unknown model {name!r}: choose one of {MODELS}")


def _with_loss(model, loss_of):
    """A module whose forward is the loss, for the tools that trace a module's forward."""
    import torch

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return loss_of(self.model, *inputs)

    return WithLoss()


# -- one tool on one model --------------------------------------------------------------------
def _draw(tool: str, model, inputs, loss_of, workdir: Path, times: dict[str, float]) -> tuple[str, Any, bool]:
    """The tool's DOT text, the loss tensor it saw (``None`` when it exposes none) and whether
    it ran the backward pass; the
    time its recording (forward, and backward where it records that) ended goes in ``times``."""
    if tool == "torchviz":
        from torchviz import make_dot

        loss = loss_of(model, *inputs)
        times["captured"] = time.perf_counter()
        return make_dot(loss, params=dict(model.named_parameters()), show_saved=True).source, loss, False
    if tool == "torchview":
        from torchview import draw_graph

        graph = draw_graph(_with_loss(model, loss_of), input_data=list(inputs), expand_nested=True, save_graph=False, directory=str(workdir))
        return graph.visual_graph.source, None, False
    if tool in ("torchlens", "torchlens-backward"):
        import torchlens as tl
        from torchlens.options import CaptureOptions

        log = tl.trace(_with_loss(model, loss_of), list(inputs), capture=CaptureOptions(layers_to_save="all", save_grads="all", backward_ready=True))
        loss = log["output"].out
        log.log_backward(loss)
        times["captured"] = time.perf_counter()
        # torchlens lays its DOT out itself (it runs dot) before it returns the text
        if tool == "torchlens":
            dot = log.draw(vis_save_only=True, vis_fileformat="svg", vis_outpath=str(workdir / "fwd"), return_graph=True, show_saved_for_backward=True).source
        else:
            dot = log.draw_backward(vis_save_only=True, vis_fileformat="svg", vis_outpath=str(workdir / "bwd"))
        return dot, loss, True
    if tool == "graphlens":
        import graphlens as gl

        with gl.trace(module=model) as tr:
            loss = loss_of(model, *inputs)
            loss.backward()
        times["captured"] = time.perf_counter()
        return tr.graph().to_dot(saved=True).source, loss, True
    raise ValueError(f"unknown tool {tool!r}: choose one of {TOOLS}")


_MODULES = {"torchviz": "torchviz", "torchview": "torchview", "torchlens": "torchlens", "torchlens-backward": "torchlens", "graphlens": "graphlens"}


def _eval_loss_equal(tool: str, model_name: str) -> bool:
    """Whether, with dropout off (``model.eval()``), the loss the tool's run computed is bitwise
    the plain run's: tells a tool that draws other random numbers from one that changes the math."""
    import copy

    import torch

    model, inputs, loss_of = build(model_name)
    model.eval()
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    plain = loss_of(reference, *inputs).detach()
    torch.manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        _, loss, _ = _draw(tool, model, inputs, loss_of, Path(tmp), {})
    return _same_bits({"loss": plain}, {"loss": loss.detach()})


def _layout_program() -> list[str]:
    dot = shutil.which("dot")
    if dot:
        return [dot, "-Tsvg"]
    pure = Path(sys.executable).parent / "graphviz-pure"
    return [str(pure), "-Tsvg"]


def _grads(model):
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _same_bits(a, b) -> bool:
    import torch

    def bits(t):
        return t.contiguous().view(-1).view(torch.uint8)

    return a.keys() == b.keys() and all(
        (a[k] is None and b[k] is None)
        or (a[k] is not None and b[k] is not None and a[k].shape == b[k].shape and torch.equal(bits(a[k]), bits(b[k])))
        for k in a
    )


def measure(tool: str, model_name: str, *, layout_timeout: float = 120.0) -> dict[str, Any]:
    """Run ``tool`` on ``model_name`` in this process and return what was measured."""
    import copy

    import torch

    torch.set_num_threads(1)
    model, inputs, loss_of = build(model_name)
    reference = copy.deepcopy(model)
    warm = copy.deepcopy(model)
    torch.manual_seed(1)
    loss_of(warm, *inputs).backward()  # a warm-up: one-time costs, timed for neither side
    torch.manual_seed(1)
    t0 = time.perf_counter()
    plain_loss = loss_of(reference, *inputs)
    plain_loss.backward()
    plain_s = time.perf_counter() - t0
    plain = _grads(reference)

    row: dict[str, Any] = {"tool": tool, "model": model_name, "plain_step_s": round(plain_s, 4)}
    __import__(_MODULES[tool])  # imported before the clock starts: import time is not the graph's
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(1)
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            dot, loss, ran_backward = _draw(tool, model, inputs, loss_of, Path(tmp), times)
        except Exception as err:  # noqa: BLE001 - a tool failing is a result
            row.update(works=False, error=f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}")
            return row
        row["graph_s"] = round(time.perf_counter() - t0, 4)
        row["capture_s"] = round(times["captured"] - t0, 4) if "captured" in times else None  # torchview: one call
    if isinstance(loss, torch.Tensor):
        row["loss_bitwise_equal"] = _same_bits({"loss": plain_loss.detach()}, {"loss": loss.detach()})
        if not row["loss_bitwise_equal"]:
            row["eval_loss_bitwise_equal"] = _eval_loss_equal(tool, model_name)
    if not ran_backward:  # the tool records no backward: run a plain one after it
        torch.manual_seed(1)
        (loss if loss is not None else loss_of(model, *inputs)).backward()
    row["grads_bitwise_equal"] = _same_bits(plain, _grads(model))
    row["works"] = True
    row["dot_bytes"] = len(dot.encode("utf-8"))
    row["nodes"] = len(re.findall(r"^\s*[\w\"]\S*\s+\[", dot, flags=re.M)) - len(re.findall(r"^\s*(node|edge|graph)\s+\[", dot, flags=re.M))

    _, _, param, grad_param = PROBES[model_name]
    # a module's own name, not only as the start of a parameter's name (h.0.attn, not h.0.attn.c_attn.weight)
    qualified = sum(bool(re.search(rf"(?<!\w){re.escape(n)}(?![\w.])", dot)) for n, _ in model.named_modules() if n)
    classes = {type(m).__name__ for _, m in model.named_modules()}
    class_names = sum(bool(re.search(rf"(?<!\w){c}(?!\w)", dot)) for c in classes)
    logits = {"gpt2": (2, 16, 128), "bert": (2, 3), "resnet": (2, 10), "lstm": (20, 4, 100)}[model_name]
    shape = re.compile(r"(?<!\d)" + r"\s*[,x×]\s*".join(map(str, logits)) + r"(?!\d)")
    grad_value = dict(model.named_parameters())[grad_param].grad.view(-1)[0].item()
    row["shows"] = {
        "module_names": qualified,  # how many of the model's qualified module names it shows
        "module_classes": class_names,  # how many of its module class names (GPT2Block, Linear)
        "parameter_names": param in dot,
        "tensor_shapes": bool(shape.search(dot)),
        "forward_ops": bool(FORWARD_OP.search(dot)),
        "backward_nodes": bool(BACKWARD_NODE.search(dot)),
        "value": f"{plain_loss.item():.4g}" in dot,
        "gradient": f"{grad_value:.4g}" in dot,
        "saved_tensors": len(SAVED_MARK[tool].findall(dot)),
    }

    program = _layout_program()
    row["layout_program"] = Path(program[0]).name
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(program, input=dot.encode("utf-8"), capture_output=True, timeout=layout_timeout, check=False)
        row["layout_s"] = round(time.perf_counter() - t0, 4)
        row["svg_bytes"] = len(proc.stdout) if proc.returncode == 0 else None
        if proc.returncode != 0:
            row["layout_error"] = proc.stderr.decode("utf-8", "replace").strip()[:300]
    except subprocess.TimeoutExpired:
        row["layout_s"] = None
        row["layout_error"] = f"no picture after {layout_timeout:.0f} s"
    return row


# -- all of them ------------------------------------------------------------------------------
def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "torchviz", "torchview", "torchlens", "transformers", "graphviz"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    import graphlens

    out["graphlens"] = graphlens.__version__
    dot = shutil.which("dot")
    if dot:
        out["dot"] = subprocess.run([dot, "-V"], capture_output=True, text=True).stderr.strip()
    return out


def _yes(flag: Any) -> str:
    return "yes" if flag else "—"


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table: a row per (model, tool)."""
    head = (
        "| model | tool | works | nodes | module names / classes | param names | shapes | fwd ops | bwd nodes | values "
        "| grads | saved | graph s | picture s | DOT kB | SVG kB | grads = plain run |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        if not row.get("works"):
            lines.append(f"| {row['model']} | {row['tool']} | no: {row.get('error', '?')[:120]} |" + " |" * 14)
            continue
        s = row["shows"]
        layout = f"{row['layout_s']:.2f}" if row.get("layout_s") is not None else row.get("layout_error", "?")
        same = "yes" if row["grads_bitwise_equal"] else (
            "no (dropout draws other numbers; equal with dropout off)" if row.get("eval_loss_bitwise_equal") else "no"
        )
        lines.append(
            f"| {row['model']} | {row['tool']} | yes | {row['nodes']} | {s['module_names']} / {s['module_classes']} "
            f"| {_yes(s['parameter_names'])} | {_yes(s['tensor_shapes'])} | {_yes(s['forward_ops'])} | {_yes(s['backward_nodes'])} "
            f"| {_yes(s['value'])} | {_yes(s['gradient'])} | {s['saved_tensors'] or '—'} | {row['graph_s']:.2f} | {layout} "
            f"| {row['dot_bytes'] / 1e3:.0f} | {(row.get('svg_bytes') or 0) / 1e3:.0f} | {same} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("TOOL", "MODEL"), help="measure one pair in this process, print JSON")
    parser.add_argument("--tools", nargs="*", default=list(TOOLS))
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per (tool, model) process")
    parser.add_argument("--json", default=str(HERE / "compare_tools.json"))
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(*args.one)))
        return 0
    rows = []
    for model in args.models:
        for tool in args.tools:
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", tool, model], capture_output=True, text=True,
                    timeout=args.timeout, check=False, cwd=tempfile.gettempdir(),
                )
                lines = proc.stdout.strip().splitlines()
                row = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
                    "tool": tool, "model": model, "works": False,
                    "error": f"process exited {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:300]}",
                }
            except subprocess.TimeoutExpired:
                row = {"tool": tool, "model": model, "works": False, "error": f"no graph after {args.timeout:.0f} s"}
            row["process_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "torch_threads": 1,
        "versions": _versions(),
        "rows": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
