"""The README's examples run and print what the README says they print."""

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
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("marker", ["## Watch backward run", "With a trace, an explanation can name the op and the line"])
def test_readme_example_prints_its_stated_output(marker, tmp_path):
    """Each of these README programs, run as written, prints exactly the text block that follows it."""
    code = _block_after(marker, "python")
    code = code.replace('why.to_dot().render("argmax", format="png")', "")  # the picture is docs/argmax.png
    shown = _block_after(marker, "text")
    assert _run(code, tmp_path).strip() == shown.strip()
