"""tests/realworld/README.md's table of cases stays in step with the case files: a row for each, its xfail patterns, the header's counts."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent / "realworld"
README = (HERE / "README.md").read_text(encoding="utf-8")
ROWS = dict(re.findall(r"^\| `(test_\d+_\w+\.py)` \|.*\| ([^|]+) \|$", README, re.M))
CASES = sorted(p.name for p in HERE.glob("test_[0-9]*.py"))


def _patterns(path: Path) -> list[str]:
    """The pattern ids of the strict xfail markers of a case file, one per marker."""
    return re.findall(r"xfail\(\s*strict=True,\s*reason=\"(P\d+):", path.read_text(encoding="utf-8"))


def test_every_case_file_has_a_row_and_every_row_a_file():
    """Each test_NN_*.py of tests/realworld has a row in the README's table, and each row names an existing file."""
    assert sorted(ROWS) == CASES, (set(CASES) - set(ROWS), set(ROWS) - set(CASES))


def test_each_row_lists_the_xfail_patterns_of_its_file():
    """A row says "xfail P<n>" for each strict xfail marker its file holds, and none for a file without markers."""
    wrong = []
    for name in CASES:
        said = re.findall(r"xfail (P\d+)", ROWS.get(name, ""))
        if sorted(said) != sorted(set(_patterns(HERE / name))):
            wrong.append((name, ROWS.get(name), _patterns(HERE / name)))
    assert not wrong, wrong


def test_the_header_counts_the_files_and_the_xfails():
    """The "Now:" line gives the number of case files and of strict xfail markers, by pattern."""
    header = re.search(r"^Now: (\d+) files, (\d+) passed, (\d+) xfailed(?:: (.*))?\.$", README, re.M)
    assert header, "no 'Now: N files, P passed, X xfailed: ...' line"
    markers = [p for name in CASES for p in _patterns(HERE / name)]
    assert int(header.group(1)) == len(CASES)
    assert int(header.group(3)) == len(markers)
    by_pattern = {p: markers.count(p) for p in sorted(set(markers), key=lambda p: int(p[1:]))}
    assert (header.group(4) or "") == ", ".join(f"{p} {n}" for p, n in by_pattern.items())
