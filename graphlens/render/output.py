"""Output: finding and running the layout program, writing files, SVG for notebooks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Collection, NamedTuple

from ..graph import Graph
from .draw import check_graph, to_dot

__all__ = [
    "render",
    "check_target",
    "svg",
    "repr_mimebundle",
    "layout",
    "find_layout_program",
    "LayoutProgram",
    "LayoutProgramNotFound",
    "LayoutTimeout",
    "LAYOUT_TIMEOUT",
    "FORMATS",
]

#: Output formats of :func:`render`, by file suffix (``dot`` and ``gv`` need no layout program).
FORMATS = ("svg", "png", "jpg", "jpeg", "pdf", "dot", "gv")


class LayoutProgram(NamedTuple):
    """A Graphviz layout program found on this machine: its path and which kind it is
    (``"dot"``, the Graphviz C program, or ``"graphviz-pure"``, the PyPI build)."""

    path: str
    kind: str

    @property
    def formats(self) -> tuple[str, ...]:
        """The output formats this program writes."""
        if self.kind == "dot":
            return ("svg", "png", "jpeg", "pdf")
        return ("svg", "png", "jpeg")


class LayoutProgramNotFound(RuntimeError):
    """Neither Graphviz ``dot`` nor ``graphviz-pure`` could be found."""


class LayoutTimeout(RuntimeError):
    """The layout program ran longer than its time limit and was stopped."""


#: Seconds a layout may take before it is stopped (``timeout=None``: no limit).  The layout
#: programs are superlinear on graphs that are not chains: an unrolled ``LSTMCell`` loop of
#: 50 steps (800 ops) takes ~40 s, of 100 steps several minutes.
LAYOUT_TIMEOUT = 10.0


_INSTALL_HINT = (
    "install one of them: 'pip install graphviz-pure' (a pure-Rust Graphviz, no system "
    "packages) or 'apt-get install graphviz' / 'brew install graphviz'; the DOT text is "
    "always available as to_dot(graph).source"
)


def find_layout_program(engine_binary: str | os.PathLike | None = None) -> LayoutProgram:
    """The layout program :func:`render` uses: ``engine_binary`` when given, else Graphviz
    ``dot`` on ``PATH``, else ``graphviz-pure`` beside ``sys.executable`` (a virtualenv's
    ``bin``) or on ``PATH``.  Raises :class:`LayoutProgramNotFound` saying how to get one.

    >>> find_layout_program().kind in ("dot", "graphviz-pure")
    True
    """
    if engine_binary is not None:
        given = os.fspath(engine_binary)
        path = shutil.which(given)
        if path is None:
            raise LayoutProgramNotFound(
                f"engine_binary {given!r} is not an executable program: pass the path of 'dot' "
                f"or 'graphviz-pure', or leave it out to search for one"
            )
        kind = "graphviz-pure" if "graphviz-pure" in Path(path).name else "dot"
        return LayoutProgram(path, kind)
    dot = shutil.which("dot")
    if dot is not None:
        return LayoutProgram(dot, "dot")
    beside = Path(sys.executable).parent / ("graphviz-pure.exe" if os.name == "nt" else "graphviz-pure")
    if beside.is_file() and os.access(beside, os.X_OK):
        return LayoutProgram(str(beside), "graphviz-pure")
    pure = shutil.which("graphviz-pure")
    if pure is not None:
        return LayoutProgram(pure, "graphviz-pure")
    raise LayoutProgramNotFound(f"no Graphviz layout program found (neither 'dot' nor 'graphviz-pure'): {_INSTALL_HINT}")


def layout(source: str, format: str = "svg", *, engine_binary: str | os.PathLike | None = None,
           timeout: float | None = LAYOUT_TIMEOUT) -> bytes:
    """Lay out DOT ``source`` with :func:`find_layout_program` and return the ``format``
    output (``svg``, ``png``, ``jpeg``; ``pdf`` needs Graphviz ``dot``).  A layout that runs
    longer than ``timeout`` seconds is stopped with :class:`LayoutTimeout`, which says how
    to draw less (``timeout=None`` waits as long as it takes)."""
    fmt = _check_format(format)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0, or None for no limit, not {timeout!r}")
    program = find_layout_program(engine_binary)
    if fmt == "jpg":
        fmt = "jpeg"
    if fmt not in program.formats:
        raise ValueError(
            f"format {format!r} needs Graphviz 'dot': {program.kind} at {program.path} writes only "
            f"{list(program.formats)}; install Graphviz ('apt-get install graphviz' or 'brew install "
            f"graphviz') or render to .svg/.png instead"
        )
    try:
        proc = subprocess.run(
            [program.path, f"-T{fmt}"], input=source.encode("utf-8"), capture_output=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        nodes = sum(1 for line in source.splitlines() if line.startswith("\t") and "->" not in line and "[" in line)
        raise LayoutTimeout(
            f"{program.kind} took more than {timeout:g} s to lay out this diagram ({nodes:,} nodes) and was stopped: "
            f"draw fewer nodes (depth=1 or a smaller max_nodes=), open it as a page that lays itself out "
            f"(graph.to_html('graph.html')), or pass timeout=None to wait as long as it takes"
        ) from None
    if proc.returncode != 0 or not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"{program.kind} ({program.path}) failed to lay out the graph (exit {proc.returncode}): {err}")
    return proc.stdout


def _check_format(format: str) -> str:
    if not isinstance(format, str) or format.lower().lstrip(".") not in FORMATS:
        raise ValueError(f"unknown format: {format!r} (must be one of {list(FORMATS)})")
    return format.lower().lstrip(".")


# -- files and notebooks ---------------------------------------------------------------------
def render(
    graph: Graph,
    path: str | os.PathLike,
    *,
    format: str | None = None,
    engine_binary: str | os.PathLike | None = None,
    timeout: float | None = LAYOUT_TIMEOUT,
    **to_dot_options: Any,
) -> Path:
    """Write ``graph`` to ``path`` as svg, png, jpeg or pdf (from the suffix, or
    ``format``), laid out by :func:`find_layout_program`; ``.dot``/``.gv`` write the DOT
    text.  ``to_dot_options`` are those of :func:`to_dot`.  Returns the path written.
    pdf needs Graphviz ``dot``; ``graphviz-pure`` writes svg, png and jpeg.  A layout that
    takes longer than ``timeout`` seconds is stopped (:class:`LayoutTimeout`)."""
    graph = check_graph(graph, "render")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path like 'graph.svg', not {type(path).__name__}")
    if not os.fspath(path):
        raise ValueError("path is empty: pass a file path like 'graph.svg'")
    out = Path(path)
    check_target(out)
    if format is None:
        suffix = out.suffix.lower().lstrip(".")
        if suffix not in FORMATS:
            raise ValueError(
                f"unknown suffix: {out.suffix!r} of path {str(out)!r} (must be one of "
                f"{['.' + f for f in FORMATS]}, or pass format=)"
            )
        fmt = suffix
    else:
        fmt = _check_format(format)
    source = to_dot(graph, **to_dot_options).source
    if fmt in ("dot", "gv"):
        data = source.encode("utf-8")
    else:
        data = layout(source, fmt, engine_binary=engine_binary, timeout=timeout)
    out.write_bytes(data)
    return out


def render_source(source: str, path: str | os.PathLike, *, format: str | None = None, engine_binary=None) -> Path:
    """Write DOT ``source`` to ``path`` as svg, png, jpeg or pdf (by suffix or ``format``)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError("path is empty: pass a file path like 'graph.svg'")
    out = Path(path)
    check_target(out)
    fmt = _check_format(format or out.suffix)
    out.write_bytes(source.encode("utf-8") if fmt in ("dot", "gv") else layout(source, fmt, engine_binary=engine_binary))
    return out


def check_target(out: Path) -> None:
    """Raise, saying what is true, when ``out`` cannot be written as a file: its parent (or
    a folder above it) is a file, the folder does not exist, is not writable, or ``out`` is
    itself a folder."""
    parent = out.parent
    if parent.is_dir():
        if out.is_dir():
            raise IsADirectoryError(f"cannot write {str(out)!r}: it is a folder, not a file: give a file path inside it, e.g. {str(out / 'graph.svg')!r}")
        if not os.access(parent, os.W_OK):
            raise PermissionError(
                f"cannot write {str(out)!r}: the folder {str(parent)!r} exists but is not writable (no write permission "
                f"for this user): write into another folder, or change its permissions"
            )
        return
    above = parent
    while not above.exists() and above != above.parent:  # the nearest part of the path that exists
        above = above.parent
    if above.exists() and not above.is_dir():
        raise NotADirectoryError(
            f"cannot write {str(out)!r}: {str(above)!r} is a file, not a folder, so nothing can be written inside it: "
            f"give a path in a folder (e.g. {str(above.parent / out.name)!r})"
        )
    raise FileNotFoundError(
        f"cannot write {str(out)!r}: the folder {str(parent)!r} does not exist: create it first "
        f"(Path({str(parent)!r}).mkdir(parents=True)) or write into a folder that exists"
    )


def svg(graph: Graph, *, engine_binary: str | os.PathLike | None = None, **to_dot_options: Any) -> str:
    """The diagram as SVG text, scaled to fit the width of the page it is shown in."""
    graph = check_graph(graph, "svg")
    text = layout(to_dot(graph, **to_dot_options).source, "svg", engine_binary=engine_binary).decode("utf-8")
    return _fit_width(text)


def _fit_width(text: str) -> str:
    """Let a browser scale the SVG down to the page width (never up), keeping its ratio."""
    start = text.find("<svg ")
    if start < 0:
        return text
    return text[:start] + '<svg style="max-width: 100%; height: auto;" ' + text[start + 5:]


def repr_mimebundle(graph: Graph, include: Collection[str] | None = None, exclude: Collection[str] | None = None) -> dict[str, str]:
    """What Jupyter shows for a Graph: ``{"image/svg+xml": ..., "text/plain": ...}``,
    filtered by ``include``/``exclude``.  Without a layout program only text is given,
    with a hint on how to get the picture."""
    graph = check_graph(graph, "repr_mimebundle")

    def wanted(mime: str) -> bool:
        return (include is None or mime in include) and (exclude is None or mime not in exclude)

    bundle: dict[str, str] = {}
    text = repr(graph)
    if wanted("image/svg+xml"):
        try:
            bundle["image/svg+xml"] = svg(graph)
        except Exception as exc:  # noqa: BLE001 - a notebook shows text, never a traceback
            text += f"\n(no diagram: {exc})"
    if wanted("text/plain"):
        bundle["text/plain"] = text
    return bundle
