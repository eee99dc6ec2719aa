"""The demo scripts: finding and running them, and the few helpers they share."""

from __future__ import annotations

import argparse
import ast
import os
import runpy
import sys
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from ._live.facts import summarize as show
from .graph import Graph

__all__ = ["Demo", "demo_dir", "list_demos", "find_demo", "run_demo", "demo_args", "save", "report_claims", "show"]

#: Where the demos write their diagrams unless told otherwise.
DEFAULT_OUT = "graphlens-out"


class Demo(NamedTuple):
    """One demo script: its name (``04_detach``), path and one-line title."""

    name: str
    path: Path
    title: str


def demo_dir() -> Path:
    """The folder of the demo scripts: ``demos/`` of a source checkout, else the copy
    installed inside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "demos", here / "_demos"):
        if candidate.is_dir() and any(candidate.glob("[0-9][0-9]_*.py")):
            return candidate
    raise FileNotFoundError(
        "the demo scripts were not found next to graphlens (looked in "
        f"{here.parent / 'demos'} and {here / '_demos'}); install graphlens from its source tree"
    )


def _title(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else path.stem


def list_demos() -> list[Demo]:
    """Every demo, in the article's order."""
    return [Demo(p.stem, p, _title(p)) for p in sorted(demo_dir().glob("[0-9][0-9]_*.py"))]


def find_demo(name: str) -> Demo:
    """A demo by full name (``04_detach``), number (``4``, ``04``) or topic (``detach``)."""
    demos = list_demos()
    key = str(name).strip().removesuffix(".py").lower()
    for demo in demos:
        number, _, topic = demo.name.partition("_")
        if key in (demo.name, topic) or (key.isascii() and key.isdigit() and int(key) == int(number)):
            return demo
    raise ValueError(f"unknown demo: {name!r} (must be one of {[d.name for d in demos]})")


def run_demo(name: str, argv: Sequence[str] = ()) -> int:
    """Run one demo script as ``__main__`` with ``argv``; returns its exit status."""
    demo = find_demo(name)
    saved_argv = sys.argv
    sys.argv = [str(demo.path), *argv]
    try:
        runpy.run_path(str(demo.path), run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
    return 0


def demo_args(doc: str | None, argv: Sequence[str] | None = None) -> Path:
    """Parse a demo's command line (``--out DIR``) and print its title; returns the
    output folder, created if needed."""
    lines = (doc or "").strip().splitlines()
    parser = argparse.ArgumentParser(description=lines[0] if lines else None)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"folder for the diagrams (default: ./{DEFAULT_OUT})")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if lines:
        print(lines[0])
        print("=" * len(lines[0]))
    return out


def save(graph: Graph, out: str | os.PathLike, name: str, *, formats: Iterable[str] = ("svg", "png"), **options) -> list[Path]:
    """Draw ``graph`` into ``out/name.svg`` (and ``.png``); prints and returns the paths."""
    written = []
    for fmt in formats:
        path = graph.render(Path(out) / f"{name}.{fmt}", **options)
        written.append(path)
    print("diagram:", ", ".join(str(p) for p in written))
    return written


def report_claims(*prefixes: str, out: str | os.PathLike | None = None) -> list:
    """Check the article's claims whose ids start with any of ``prefixes`` and print
    one line each: status, id and what torch did.  With ``out``, each claim's evidence
    graphs are drawn there too (``claim-<id>.svg``, ``claim-<id>-2.svg``, ...), with the
    notes that say what the check observed on each node."""
    from . import claims
    from .render import LayoutProgramNotFound

    chosen = [c for c in claims.all() if any(c.id.startswith(p) for p in prefixes)]
    verdicts = claims.run(chosen)
    print()
    print("The article's claims for this section, checked on this torch:")
    for v in verdicts:
        print(f"  {v.status.upper():8} {v.id:30} {v.summary}")
    if out is not None:
        drawn = []
        try:
            for v in verdicts:
                for k, graph in enumerate(v.evidence):
                    suffix = "" if k == 0 else f"-{k + 1}"
                    drawn.append(graph.render(Path(out) / f"claim-{v.id}{suffix}.svg", legend=False))
        except LayoutProgramNotFound as exc:
            print(f"(no claim diagrams: {exc})")
        if drawn:
            print(f"the claims' evidence, with notes: {len(drawn)} diagram(s) in {Path(out)}")
    return list(verdicts)
