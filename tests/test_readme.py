"""The README's examples run and print what the README says they print."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _block_after(marker: str, lang: str) -> str:
    """The first fenced ``lang`` block after ``marker`` in the README."""
    start = README.index(marker)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert match, f"no ```{lang} block after {marker!r}"
    return match.group(1)


def _run(code: str, cwd: Path) -> str:
    script = cwd / "example.py"  # a file, as a reader would save it: explanations quote its lines
    script.write_text(code, encoding="utf-8")
    # pip-only, as on a fresh machine: only the virtualenv's programs (graphviz-pure, no Graphviz dot)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=cwd, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


#: The README programs checked, and the files each says it writes.
EXAMPLES = {
    "## Watch backward run": ["replay.html"],
    "With a trace, an explanation can name the op and the line": ["argmax.png"],
}


@pytest.mark.parametrize("marker", list(EXAMPLES))
def test_readme_example_prints_its_stated_output(marker, tmp_path):
    """Each of these README programs, run as written on a pip-only install, prints exactly the
    text block that follows it, and leaves only the files it says it writes."""
    code = _block_after(marker, "python")
    shown = _block_after(marker, "text")
    assert _run(code, tmp_path).strip() == shown.strip()
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "example.py")
    assert written == EXAMPLES[marker]


def test_readme_real_model_example_runs_and_writes_its_files(tmp_path):
    """The README's GPT-2 example runs as written on a pip-only install and writes the picture and the explorer page."""
    pytest.importorskip("transformers")
    code = _block_after("## Real models", "python")
    _run(code, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "example.py") == ["gpt2.html", "gpt2.png"]
    assert (tmp_path / "gpt2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
