"""The ``graphlens`` command line: one function per subcommand registers its parser."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Callable, Sequence, TextIO

from .claims.registry import ARTICLE
from .claims.status import STATUS, STATUSES

__all__ = [
    "main", "build_parser", "COMMANDS", "add_check_command", "run_check", "use_color",
    "add_demo_command", "run_demo_command", "add_tour_command", "run_tour_command",
    "add_replay_command", "run_replay_command", "add_explore_command", "run_explore_command", "exit_status", "autograd_explanation", "script_traceback",
]

#: Exit status when a verdict differs from the expected one (argparse uses 2 for usage errors).
EXIT_DRIFT = 1

#: SGR colour codes: each verdict status's (see graphlens.claims.status), then the table's own marks.
_COLORS = {
    **{word: status.ansi for word, status in STATUS.items()},
    "drift": "1;35",  # bold magenta
    "dim": "2",
}


def use_color(choice: str, stream: TextIO) -> bool:
    """Whether to colour output: ``always``/``never``, or for ``auto`` when ``stream`` is
    a terminal, ``NO_COLOR`` is unset and ``TERM`` is not ``dumb``."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(text: str, key: str, color: bool) -> str:
    return f"\033[{_COLORS[key]}m{text}\033[0m" if color and key in _COLORS else text


# -- check ------------------------------------------------------------------------------
def add_check_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``graphlens check``."""
    p = subparsers.add_parser(
        "check",
        help="check every claim of the article against the installed torch",
        description=(
            f"Run each claim of the article \"{ARTICLE}\" as a small torch program and print its verdict. "
            "Exits 0 when every verdict is the one expected for this torch version, "
            f"{EXIT_DRIFT} when any drifts (the drifting claims are named)."
        ),
    )
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument(
        "--only", action="append", metavar="PREFIX", default=None,
        help="check only claims whose id starts with PREFIX (e.g. 'detach' or 'no_grad.saves'); repeatable",
    )
    p.add_argument(
        "--expected", metavar="FILE", default=None,
        help="compare with the statuses in this JSON file ({claim id: status}) instead of the recorded table",
    )
    p.add_argument("--evidence", action="store_true", help="with --json, include each verdict's evidence graphs")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="colour the table (default: auto)")
    p.set_defaults(run=run_check)


def _select(prefixes: Sequence[str] | None):
    from . import claims

    everything = claims.all()
    if not prefixes:
        return everything, None
    chosen = [c for c in everything if any(c.id.startswith(p) for p in prefixes)]
    if not chosen:
        groups = sorted({c.id.split(".")[0] for c in everything})
        return None, (
            f"--only {' '.join(prefixes)} matches no claim (ids start with one of {groups}; "
            f"`graphlens check --json` lists every id)"
        )
    return tuple(chosen), None


def _load_expected(path: str | None) -> tuple[dict | None, str, str | None]:
    """``(table, where it came from, error)``."""
    from .claims import expected_range, expected_statuses

    if path is None:
        return expected_statuses(), f"the table recorded for {expected_range()}", None
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError) as exc:
        return None, path, f"--expected {path}: cannot read it as JSON ({exc})"
    bad = {k: v for k, v in table.items() if v not in STATUSES} if isinstance(table, dict) else None
    if bad is None or bad:
        return None, path, f"--expected {path} must be a JSON object {{claim id: status}} with statuses among {list(STATUSES)}; bad entries: {bad}"
    return table, path, None


def run_check(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``graphlens check``; returns the exit status."""
    import torch

    from . import claims

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    selected, problem = _select(args.only)
    if problem:
        print(f"graphlens check: {problem}", file=err)
        return 2
    expected, source, problem = _load_expected(args.expected)
    if problem:
        print(f"graphlens check: {problem}", file=err)
        return 2
    verdicts = claims.run(selected)
    drifts = claims.drift(verdicts, expected) if expected is not None else [
        claims.Drift(v.id, None, v.status, v.summary) for v in verdicts if v.status == claims.ERROR
    ]
    by_id = {c.id: c for c in selected}
    counts = {s: sum(v.status == s for v in verdicts) for s in STATUSES}
    if args.json:
        doc = {
            "torch": torch.__version__,
            "expected_from": source if expected is not None else None,
            "counts": counts,
            "ok": not drifts,
            "drift": [d._asdict() for d in drifts],
            "claims": [
                {
                    "id": v.id,
                    "section": by_id[v.id].section,
                    "chart": by_id[v.id].chart,
                    "statement": by_id[v.id].statement,
                    "expected_status": None if expected is None else expected.get(v.id),
                    **v.to_dict(evidence=args.evidence),
                }
                for v in verdicts
            ],
        }
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        _print_table(verdicts, by_id, expected, drifts, counts, source, out, use_color(args.color, out))
    return EXIT_DRIFT if drifts else 0


def _print_table(verdicts, by_id, expected, drifts, counts, source, out: TextIO, color: bool) -> None:
    import torch

    drifted = {d.id for d in drifts}
    wid = max(len("claim"), *(len(v.id) for v in verdicts))
    sec = max(len("section"), *(len(by_id[v.id].section) for v in verdicts))
    stw = max(len(s) for s in ("status", *STATUSES))
    width = shutil.get_terminal_size((0, 0)).columns if getattr(out, "isatty", lambda: False)() else 0
    room = width - (wid + sec + stw + 6) if width else 0
    print(f"{'claim':<{wid}}  {'section':<{sec}}  {'status':<{stw}}  observed", file=out)
    for v in verdicts:
        line = v.summary
        if v.id in drifted:
            want = expected.get(v.id) if expected is not None else None
            line = _paint(f"[DRIFT: expected {want}]", "drift", color) + " " + line
        if room > 20 and len(line) > room:
            line = line[: room - 1] + "…"
        status = _paint(f"{v.status:<{stw}}", v.status, color)
        print(f"{v.id:<{wid}}  {by_id[v.id].section:<{sec}}  {status}  {line}", file=out)
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    n = len(verdicts)
    print(f"\n{n} claim{'' if n == 1 else 's'} on torch {torch.__version__}: {tally}", file=out)
    if expected is None:
        print(_paint("no expected verdicts are recorded for this torch version: nothing to compare with", "dim", color), file=out)
    elif drifts:
        names = ", ".join(f"{d.id} ({d.got}, expected {d.expected})" for d in drifts)
        print(_paint(f"DRIFT in {len(drifts)} claim(s): {names}", "drift", color), file=out)
    else:
        print(f"every verdict is the one expected ({source})", file=out)


# -- demo -------------------------------------------------------------------------------
def add_demo_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``graphlens demo``."""
    p = subparsers.add_parser(
        "demo",
        help="run one demo script (one per article section)",
        description="Run one of the demo scripts, one per section of the article, or list them.",
    )
    p.add_argument("name", nargs="?", help="demo name, number or topic: 04_detach, 4 or detach")
    p.add_argument("--list", action="store_true", help="list the demos")
    p.add_argument("--out", default=None, help="folder for the diagrams (default: ./graphlens-out)")
    p.set_defaults(run=run_demo_command)


def run_demo_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``graphlens demo``: list the demos, or run the one named."""
    from .demos import find_demo, list_demos, run_demo

    out = sys.stdout if out is None else out
    if args.list or not args.name:
        for demo in list_demos():
            print(f"{demo.name:20} {demo.title}", file=out)
        if not args.list:
            print("\nrun one with: graphlens demo NAME", file=out)
        return 0
    try:
        find_demo(args.name)
    except ValueError as exc:
        print(f"graphlens demo: {exc}", file=sys.stderr)
        return 2
    problem = None if args.out is None else _not_a_folder(args.out)
    if problem:
        print(f"graphlens demo: {problem}", file=sys.stderr)
        return 2
    return run_demo(args.name, [] if args.out is None else ["--out", args.out])


# -- tour -------------------------------------------------------------------------------
def add_tour_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``graphlens tour``."""
    p = subparsers.add_parser(
        "tour",
        help="write one HTML page with every claim of the article, its verdict, code and diagram",
        description=(
            f"Check every claim of the article \"{ARTICLE}\" against the installed torch, draw the article's charts, "
            "and write one self-contained HTML page (inline SVG, no network; the backward replays of sections 4 and 5 "
            "step with a little inline JavaScript)."
        ),
    )
    p.add_argument("--out", default="graphlens-out", help="folder for index.html (default: ./graphlens-out)")
    p.set_defaults(run=run_tour_command)


def run_tour_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``graphlens tour``: write the page and say where it is."""
    from .tour import write_tour

    out = sys.stdout if out is None else out
    problem = _not_a_folder(args.out)
    if problem:
        print(f"graphlens tour: {problem}", file=sys.stderr)
        return 2
    path = write_tour(args.out)
    print(f"tour written: {path.resolve()}", file=out)
    print(f"open it with: python -m webbrowser file://{path.resolve()}", file=out)
    return 0


# -- replay -----------------------------------------------------------------------------
def add_replay_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``graphlens replay``."""
    p = subparsers.add_parser(
        "replay",
        help="run a script under a trace and write a page that steps through its backward passes",
        description=(
            "Run a Python script under graphlens.trace() and write replay.html: the data-view diagram of what it "
            "built, with a stepper through every node PyTorch's engine ran in backward (what arrived, what it sent, "
            "the .grad it wrote), and graph.svg, the final diagram. The script runs as `python SCRIPT.py` would run "
            "it: sys.exit(n) gives exit status n, and an exception prints its traceback and gives 1; either way the "
            "page shows what ran up to there, and an autograd error graphlens recognises is explained as well."
        ),
    )
    p.add_argument("script", help="the Python file to run, e.g. train.py")
    p.add_argument("args", nargs="*", help="arguments for the script (its sys.argv[1:]); put them after '--' when they start with '-': graphlens replay train.py -- --epochs 2")
    p.add_argument("--out", default="graphlens-out", help="folder for replay.html and graph.svg (default: ./graphlens-out)")
    p.add_argument("--by", choices=("auto", "step", "module"), default="auto",
                   help="how the page opens: one engine node per step, or one run inside one module per step; auto (the "
                        "default): by module when the graph knows its modules and the backward has more than 100 steps")
    p.add_argument("--depth", type=int, default=None, metavar="N",
                   help="collapse modules N dotted parts deep, in the diagram and the module steps (default: the diagram's own choice)")
    p.set_defaults(run=run_replay_command)


def run_replay_command(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``graphlens replay``: run the script, write the page and the diagram, say where they are."""
    from pathlib import Path

    from .replay import replay_script

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    problem = _not_a_folder(args.out)
    if problem is None and getattr(args, "depth", None) is not None and args.depth < 1:
        problem = f"--depth must be 1 or more, not {args.depth}: e.g. --depth 2 reads transformer.h.0.attn as transformer.h"
    if problem is None and not os.path.isfile(args.script):
        problem = f"no script at {args.script!r}: give the path of a Python file, e.g. graphlens replay train.py"
    if problem:
        print(f"graphlens replay: {problem}", file=err)
        return 2
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    run = replay_script(args.script, tuple(args.args))
    error = run.error
    status, said, explanation, on_page = script_outcome(error, run.trace)
    page = folder / "replay.html"
    by = getattr(args, "by", "auto")
    if by == "module" and not run.replay.has_scopes():
        print("graphlens replay: --by module needs to know which module ran each op, and this script's graph does not "
              "(no parameter has a dotted name): the page steps by step", file=err)
        by = "step"
    run.replay.to_html(page, title=f"Backward replay of {os.path.basename(args.script)}", explanation=on_page,
                       by=by, depth=getattr(args, "depth", None))
    written = [page]
    from .render import LayoutProgramNotFound, LayoutTimeout, output, render

    graph = run.trace.graph()
    try:
        written.append(render(graph, folder / "graph.svg", timeout=output.LAYOUT_TIMEOUT))
    except LayoutProgramNotFound:
        written.append(render(graph, folder / "graph.dot"))
    except LayoutTimeout as exc:  # (the page is written: a diagram too slow to lay out is left as its DOT text)
        written.append(render(graph, folder / "graph.dot"))
        print(f"graphlens replay: graph.svg not written, graph.dot instead: {exc}", file=err)
    steps = len(run.replay.steps)
    print(f"{steps} backward step{'s' * (steps != 1)} in {run.replay.passes} backward call{'s' * (run.replay.passes != 1)}"
          + ("" if steps else " (the script ran no backward: the page shows the graph only)"), file=out)
    opened = _replay_opening(page)
    if opened:
        print(opened, file=out)
    for path in written:
        print(f"written: {path.resolve()}", file=out)
    report_end(error, said, explanation, err)
    return status


# -- explore ----------------------------------------------------------------------------
def add_explore_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``graphlens explore``."""
    p = subparsers.add_parser(
        "explore",
        help="run a script under a trace and write an explorer page of its graph (by module, searchable)",
        description=(
            "Run a Python script under graphlens.trace(), every op named by the module that ran it, and write one "
            "self-contained HTML page of the graph it built: opening by module (click a module to open or close it), "
            "with a search box, details on hover, pan and zoom; it works offline. The script runs as "
            "`python SCRIPT.py` would run it: sys.exit(n) gives exit status n, and an exception prints its traceback "
            "and gives 1; either way the page shows what ran up to there."
        ),
    )
    p.add_argument("script", help="the Python file to run, e.g. train.py")
    p.add_argument("args", nargs="*", help="arguments for the script (its sys.argv[1:]); put them after '--' when they start with '-'")
    p.add_argument("-o", "--out", default=os.path.join("graphlens-out", "explore.html"),
                   help="the page to write (default: graphlens-out/explore.html)")
    p.add_argument("--depth", type=int, default=None,
                   help="open modules less than DEPTH levels deep (default: open the module that holds most of the graph)")
    p.set_defaults(run=run_explore_command)


def run_explore_command(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``graphlens explore``: run the script, write the page, say where it is."""
    from pathlib import Path

    from .explore import explore_script

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    problem = None
    if not args.out or os.path.isdir(args.out):
        problem = f"-o {args.out!r} must be the path of the page to write, e.g. -o graph.html"
    elif not os.path.isfile(args.script):
        problem = f"no script at {args.script!r}: give the path of a Python file, e.g. graphlens explore train.py"
    elif args.depth is not None and args.depth < 1:
        problem = f"--depth must be 1 or more (1: the top-level modules, all closed), not {args.depth}"
    if problem:
        print(f"graphlens explore: {problem}", file=err)
        return 2
    run = explore_script(args.script, tuple(args.args))
    error = run.error
    status, said, explanation, on_page = script_outcome(error, run.trace)
    page = Path(args.out)
    page.parent.mkdir(parents=True, exist_ok=True)
    graph = run.trace.graph()
    graph.to_html(page, title=f"Graph of {os.path.basename(args.script)}", depth=args.depth, explanation=on_page)
    print(f"{len(graph.tensors):,} tensors and {len(graph.ops):,} ops", file=out)
    print(f"written: {page.resolve()}", file=out)
    report_end(error, said, explanation, err)
    return status


def _replay_opening(page) -> str | None:
    """How the written replay page opens, as one line (``None`` when it opens by step)."""
    from .render.replay_html import opening

    by, depth, count = opening(page.read_text(encoding="utf-8"))
    if by != "module":
        return None
    return f"the page opens by module: {count} module step{'s' * (count != 1)} at depth {depth} (steps count from 1)"


def script_outcome(error: BaseException | None, trace) -> tuple[int, str | None, object | None, str | None]:
    """``(exit status, what to print for sys.exit, the autograd explanation, the page's line)``
    of a script that ended with ``error`` (None: it ran to its end), as ``python script.py``
    would end: ``sys.exit(n)`` gives ``n``, an exception gives 1."""
    if isinstance(error, SystemExit):
        status, said = exit_status(error.code)
        return status, said, None, f"The script ended with SystemExit({error.code!r}) (sys.exit): exit status {status}."
    if error is not None:
        explanation = autograd_explanation(error, trace)
        return 1, None, explanation, explanation if explanation is not None else f"{type(error).__name__}: {error}"
    return 0, None, None, None


def report_end(error: BaseException | None, said: str | None, explanation: object | None, err: TextIO) -> None:
    """Print how the script ended: what sys.exit said, or its own traceback and, for an
    autograd error graphlens recognises, the explanation."""
    if said is not None:
        print(said, file=err)
    elif error is not None and not isinstance(error, SystemExit):
        err.write(script_traceback(error))
        if explanation is not None:
            print(f"graphlens: {explanation}", file=err)


def exit_status(code: object) -> tuple[int, str | None]:
    """``(exit status, text for stderr)`` of ``SystemExit(code)``, as Python gives them:
    ``None`` is 0, an int is itself, anything else is printed and gives 1."""
    if code is None:
        return 0, None
    if isinstance(code, int):
        return int(code), None
    return 1, str(code)


def autograd_explanation(error: BaseException, trace) -> object | None:
    """graphlens's explanation of ``error`` when it is an autograd error graphlens recognises,
    else None (a script's own exception gets only its traceback, as Python prints it)."""
    from .explain import explain_error

    try:
        found = explain_error(error, trace)
    except Exception:  # noqa: BLE001 - explaining must never hide the error itself
        return None
    return None if found.reason == "unknown_error" else found


#: graphlens's own frames in a replayed script's traceback (the runner, the trace's mode and hooks).
_RUNNER_MODULES = ("replay", "trace", "_live/recorder", "_live/backward", "_live/capture", "_live/safety", "_live/attribution")


def script_traceback(error: BaseException) -> str:
    """The traceback of a replayed script's exception as ``python script.py`` prints it,
    chained exceptions included, without the frames graphlens adds: its runner and runpy
    before the script's first line, and the trace's mode between a line and torch
    (``handle_torch_function``, the mode, the call made at the user's line)."""
    import traceback

    from .names import CALLER_NAME

    package = os.path.dirname(os.path.abspath(__file__))
    ours = {os.path.join(package, *f"{name}.py".split("/")) for name in _RUNNER_MODULES}
    torch_dir = os.path.dirname(os.path.abspath(sys.modules["torch"].__file__)) if "torch" in sys.modules else None

    import runpy

    runpy_file = os.path.abspath(runpy.__file__)  # (Python 3.10 runs runpy from its .py file, 3.11+ frozen)

    def mine(f: traceback.FrameSummary) -> bool:
        return (f.filename in ours or f.name == CALLER_NAME or f.filename.startswith("<frozen runpy")
                or os.path.abspath(f.filename) == runpy_file)

    def in_torch(f: traceback.FrameSummary) -> bool:
        return torch_dir is not None and os.path.abspath(f.filename).startswith(torch_dir + os.sep)

    def keep(stack: list) -> list:
        drop = {i for i, f in enumerate(stack) if mine(f)}
        for i in sorted(drop):  # torch handing the call to the trace's mode, right before it
            j = i - 1
            if j >= 0 and j not in drop and in_torch(stack[j]) and stack[j].name == "handle_torch_function":
                drop.add(j)
                if j - 1 >= 0 and in_torch(stack[j - 1]):
                    drop.add(j - 1)
        return [f for i, f in enumerate(stack) if i not in drop]

    def trim(te: traceback.TracebackException | None, seen: set) -> None:
        while te is not None and id(te) not in seen:
            seen.add(id(te))
            te.stack = traceback.StackSummary.from_list(keep(list(te.stack)))
            for member in getattr(te, "exceptions", None) or ():  # an ExceptionGroup's exceptions
                trim(member, seen)
            trim(te.__cause__, seen)
            te = te.__context__

    te = traceback.TracebackException(type(error), error, error.__traceback__, compact=True)
    trim(te, set())
    return "".join(te.format())


def _not_a_folder(path: str) -> str | None:
    """Why ``--out path`` cannot be the output folder, or None."""
    if not path:
        return "--out is empty: give a folder, e.g. --out graphlens-out"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"--out {path!r} is a file, not a folder: give a folder to write into"
    return None


# -- the parser -------------------------------------------------------------------------
#: Functions that each add one subcommand; a subcommand sets ``run`` (args -> exit status)
#: with ``set_defaults``.  Add ``tour`` or ``demo`` by appending to this list.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [add_check_command, add_demo_command, add_tour_command, add_replay_command, add_explore_command]


def build_parser() -> argparse.ArgumentParser:
    """The ``graphlens`` argument parser with every command of :data:`COMMANDS`."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="graphlens",
        description="See, check and explain PyTorch's real autograd graph.",
    )
    parser.add_argument("--version", action="version", version=f"graphlens {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] | None = None
    if "--" in argv:  # what follows is the replayed script's own arguments
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1:]
    args = parser.parse_args(argv)
    if rest is not None:
        if getattr(args, "command", None) not in ("replay", "explore"):
            parser.error("'--' passes arguments to a script: only 'graphlens replay SCRIPT.py -- ARGS' (and explore) takes them")
        args.args = list(getattr(args, "args", [])) + rest
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(run(args))
    except BrokenPipeError:  # `graphlens check --json | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a folder that cannot be made, a full disk, no permission: one line
        where = f" {str(exc.filename)!r}" if exc.filename else ""
        print(f"graphlens {args.command}: cannot write{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
