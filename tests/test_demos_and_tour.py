"""Tests for the demo scripts, `graphlens demo` and the tour page."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphlens import claims
from graphlens.charts import CHARTS
from graphlens.cli import main
from graphlens.demos import find_demo, list_demos
from graphlens.render import LayoutProgramNotFound, find_layout_program

SECTIONS_IN_ORDER = ["intro", "1", "2", "3", "4", "5", "6", "7"]


def _has_layout_program() -> bool:
    try:
        find_layout_program()
    except LayoutProgramNotFound:
        return False
    return True


needs_layout = pytest.mark.skipif(not _has_layout_program(), reason="no dot or graphviz-pure binary to draw with")


def test_one_demo_per_article_section_in_order():
    """There are eight demos of the article, numbered 01..08 in its order, then demo 09 beyond
    it (a NaN gradient), each with a title."""
    demos = list_demos()
    assert [d.name[:2] for d in demos] == [f"{i:02d}" for i in range(1, 10)]
    assert [d.name[3:] for d in demos] == [
        "dynamic_graph", "leaf_nodes", "requires_grad", "detach", "zero_grad", "retain_grad", "no_grad", "optimizer",
        "nonfinite",
    ]
    assert all(d.title.startswith(f"Demo {i}:") for i, d in enumerate(demos, 1))


def test_find_demo_by_number_topic_or_name():
    """A demo is found by its number, topic or full name; an unknown one is a clear error."""
    assert find_demo("4") == find_demo("04") == find_demo("detach") == find_demo("04_detach.py")
    with pytest.raises(ValueError, match=r"unknown demo: 'nope' \(must be one of \['01_dynamic_graph'"):
        find_demo("nope")


@needs_layout
@pytest.mark.parametrize("demo", list_demos(), ids=lambda d: d.name)
def test_every_demo_runs_and_writes_its_diagrams(demo, tmp_path):
    """Each demo script runs as a subprocess, exits 0, prints its claims' verdicts and writes svg and png."""
    proc = subprocess.run(
        [sys.executable, str(demo.path), "--out", str(tmp_path)], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if demo.name.startswith("09"):  # beyond the article: graphlens's answers, no claims
        assert "where_unchosen_branch" in proc.stdout and "overflow" in proc.stdout.lower()
        assert (tmp_path / "09_nonfinite_replay.html").is_file()
    else:
        assert "checked on this torch" in proc.stdout
        assert re.search(r"^\s+(HOLDS|NUANCED|REFUTED|ERRATUM)\s", proc.stdout, re.M)
    assert "ERROR " not in proc.stdout
    svgs = sorted(tmp_path.glob(f"{demo.name}*.svg"))
    pngs = sorted(tmp_path.glob(f"{demo.name}*.png"))
    assert svgs and len(svgs) == len(pngs)
    assert all("<svg" in p.read_text() for p in svgs)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    if demo.name.startswith("09"):
        return
    # each claim of the section is drawn too, from its evidence, with the notes of what was observed
    claim_svgs = sorted(tmp_path.glob("claim-*.svg"))
    assert claim_svgs, "the demo drew none of its claims' evidence"
    assert any("<title>note0</title>" in p.read_text() for p in claim_svgs)


def test_demo_command_lists_and_rejects(capsys):
    """`graphlens demo --list` lists every demo; an unknown name exits 2 with the choices."""
    assert main(["demo", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(d.name in listed for d in list_demos())
    assert main(["demo", "nope"]) == 2
    assert "unknown demo" in capsys.readouterr().err


@needs_layout
def test_demo_command_runs_one_demo(tmp_path, capsys):
    """`graphlens demo detach --out DIR` runs demo 4 in-process and writes its diagram."""
    assert main(["demo", "detach", "--out", str(tmp_path)]) == 0
    assert "detach.is_copy" in capsys.readouterr().out
    assert (tmp_path / "04_detach.svg").exists()


@pytest.fixture(scope="module")
def tour_page(tmp_path_factory):
    """The tour page, built once by the real command line."""
    if not _has_layout_program():
        pytest.skip("no dot or graphviz-pure binary to draw with")
    out = tmp_path_factory.mktemp("tour")
    proc = subprocess.run(
        [sys.executable, "-m", "graphlens", "tour", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, (out / "index.html").read_text(encoding="utf-8")


def test_tour_reports_progress_and_where_the_page_is(tour_page):
    """The tour says which claim it is checking and prints the page's path."""
    proc, _ = tour_page
    assert "checking detach.is_copy" in proc.stderr
    assert "[25/25]" in proc.stderr
    assert re.search(r"tour written: .*index\.html", proc.stdout)


def test_tour_page_has_every_claim_with_verdict_code_and_diagram(tour_page):
    """Every claim id appears once as an article with a verdict badge, its code and an inline SVG."""
    _, page = tour_page
    for claim in claims.all():
        match = re.search(rf'<article class="claim" id="{re.escape(claim.id)}">(.*?)</article>', page, re.S)
        assert match, claim.id
        body = match.group(1)
        assert re.search(r'class="badge (holds|nuanced|refuted|erratum)"', body), claim.id
        assert "The code that was run" in body and "<pre><code>" in body
        assert "<svg" in body, claim.id


def test_tour_page_has_the_six_charts_and_the_sections_in_order(tour_page):
    """Each of the six charts is inlined as SVG, and the sections follow the article's order."""
    _, page = tour_page
    for number in CHARTS:
        match = re.search(rf'<div class="chart" id="chart-{number}"><figure>(.*?)</figure>', page, re.S)
        assert match and "<svg" in match.group(1), number
    positions = [page.index(f'id="section-{s}"') for s in SECTIONS_IN_ORDER]
    assert positions == sorted(positions)


def test_tour_page_embeds_replays_in_sections_4_and_5(tour_page):
    """Sections 4 (two backward calls) and 5 (retain_grad) each embed a backward replay: a frame with its steps."""
    import html as _html
    import json

    _, page = tour_page
    for section, writes in (("4", ("[3, 4]", "[6, 8]")), ("5", ("[6, 12]", "[18, 36]"))):
        match = re.search(rf'<div class="chart replay" id="replay-{section}">(.*?)</div>', page, re.S)
        assert match, section
        frame = _html.unescape(re.search(r'srcdoc="(.*?)"', match.group(1), re.S).group(1))
        data = json.loads(re.search(r'<script id="gl-data" type="application/json">(.*?)</script>', frame, re.S).group(1))
        assert data["steps"] and "<svg" in frame
        assert [v for s in data["steps"] for _, v in s.get("w", [])] == list(writes)
    four = page.index('id="replay-4"')
    assert page.index('id="section-4"') < four < page.index('id="section-5"') < page.index('id="replay-5"')


def test_tour_page_is_self_contained_with_versions_and_counts(tour_page):
    """The page loads nothing from outside, runs no script outside the replay frames, and states versions and verdict counts."""
    import torch

    import graphlens

    _, page = tour_page
    assert "<script" not in page  # the replays' scripts live (escaped) in their frames' srcdoc
    assert not re.search(r'(src|href)="https?://', page)
    assert f"torch {torch.__version__}" in page and f"graphlens {graphlens.__version__}" in page
    statuses = re.findall(r'class="badge (\w+)"', page)
    for status in set(statuses):
        assert f"{statuses.count(status)} {status}</span>" in page
    assert len(statuses) == len(claims.all())


def test_tour_page_ends_with_a_section_on_a_nan_gradient(tour_page):
    """After the article's sections, the tour shows a NaN gradient: the program, graphlens's
    answer (log's backward, the where trap, the fix), the diagram with NaN and inf in red, and
    a replay whose page links to the step that first sent the NaN."""
    import html as _html

    from graphlens.render.style import NONFINITE

    _, page = tour_page
    start = page.index('id="section-nonfinite"')
    assert start > page.index('id="section-7"')
    section = page[start:]
    assert "LogBackward0" in section and "torch.where" in section and "double-where" in section
    assert NONFINITE.lower() in section.lower() and "<svg" in section
    frame = _html.unescape(re.search(r'srcdoc="(.*?)"', section, re.S).group(1))
    assert "class='nonfinite'" in frame and "#step=" in frame
