"""The graphlens command line: `graphlens check` table, JSON, filtering, colour and drift."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphlens.claims as claims
from graphlens.cli import build_parser, main, use_color

needs_table = pytest.mark.skipif(
    claims.expected_statuses() is None, reason=f"no expected verdicts recorded for torch {torch.__version__}"
)


@needs_table
def test_check_prints_every_claim_and_exits_zero(capsys):
    """`graphlens check` prints one row per claim with its status and exits 0 when all match."""
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    for c in claims.all():
        assert c.id in out
    assert "detach.is_copy" in out and "refuted" in out
    assert "every verdict is the one expected" in out
    assert "\033[" not in out, "captured output is not a terminal: no colour"


@needs_table
def test_check_json_parses_and_matches_the_table(capsys):
    """`--json` prints one parseable document with every verdict and its expected status."""
    assert main(["check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["drift"] == [] and doc["torch"] == torch.__version__
    assert [c["id"] for c in doc["claims"]] == list(claims.ids())
    assert sum(doc["counts"].values()) == len(doc["claims"])
    for c in doc["claims"]:
        assert c["status"] == c["expected_status"]
        assert {"section", "chart", "statement", "observed", "expected", "details", "summary"} <= set(c)
    memory = next(c for c in doc["claims"] if c["id"] == "no_grad.saves_memory")
    assert memory["details"]["with"]["saved_bytes"] == 0 < memory["details"]["without"]["saved_bytes"]


def test_check_json_evidence_includes_graphs(capsys):
    """`--json --evidence` embeds each verdict's graphs as Graph dicts."""
    main(["check", "--json", "--evidence", "--only", "detach.is_copy"])
    doc = json.loads(capsys.readouterr().out)
    (graph,) = doc["claims"][0]["evidence"]
    assert graph["schema"] == 3 and any(e["kind"] == "detach" for e in graph["edges"])


def test_only_filters_by_prefix(capsys):
    """`--only PREFIX` (repeatable) keeps just the claims whose id starts with a prefix."""
    main(["check", "--json", "--only", "detach", "--only", "erratum.no"])
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["claims"]] == ["detach.leaf_cut", "detach.is_copy", "detach.two_losses", "erratum.nograd"]


def test_only_without_match_is_a_usage_error(capsys):
    """`--only` matching nothing exits 2 with a message listing the id groups."""
    assert main(["check", "--only", "nothing"]) == 2
    err = capsys.readouterr().err
    assert "--only nothing matches no claim" in err and "detach" in err


def test_drift_exits_nonzero_and_names_the_claim(tmp_path, capsys):
    """A verdict differing from the expected table exits 1 and names the drifting claim."""
    table = dict(claims.expected_statuses("2.13.0"))
    table["detach.is_copy"] = "holds"
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(table))
    assert main(["check", "--only", "detach", "--expected", str(path)]) == 1
    out = capsys.readouterr().out
    assert "DRIFT" in out and "detach.is_copy (refuted, expected holds)" in out
    assert main(["check", "--only", "detach", "--json", "--expected", str(path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and [d["id"] for d in doc["drift"]] == ["detach.is_copy"]


def test_bad_expected_file_is_a_usage_error(tmp_path, capsys):
    """An expected table with an unknown status exits 2 naming the bad entry."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"detach.is_copy": "probably"}))
    assert main(["check", "--only", "detach.is_copy", "--expected", str(path)]) == 2
    assert "'detach.is_copy': 'probably'" in capsys.readouterr().err


def test_colour_follows_flag_tty_and_no_color(monkeypatch, capsys):
    """Colour is used with --color always, for a terminal unless NO_COLOR is set, never for pipes."""
    main(["check", "--only", "leaf.user", "--color", "always"])
    assert "\033[32mholds" in capsys.readouterr().out

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert use_color("auto", Tty()) is True
    assert use_color("auto", io.StringIO()) is False
    assert use_color("never", Tty()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color("auto", Tty()) is False


def test_no_command_prints_help_and_exits_2(capsys):
    """`graphlens` without a command shows the help (listing `check`) and exits 2."""
    assert main([]) == 2
    assert "check" in capsys.readouterr().err


def test_parser_has_room_for_more_subcommands():
    """Each subcommand registers itself; the parser knows `check`."""
    parser = build_parser()
    args = parser.parse_args(["check", "--only", "leaf"])
    assert args.command == "check" and callable(args.run) and args.only == ["leaf"]


@needs_table
def test_python_dash_m_graphlens_check_runs_as_a_real_process():
    """`python -m graphlens check` runs in a fresh interpreter, prints the table without colour and exits 0."""
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    proc = subprocess.run(
        [sys.executable, "-m", "graphlens", "check"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every verdict is the one expected" in proc.stdout
    assert "erratum.nograd" in proc.stdout and "\033[" not in proc.stdout


def test_closed_pipe_is_not_an_error():
    """`graphlens check --json | head -1` exits quietly when the reader stops early."""
    import subprocess
    import sys

    proc = subprocess.run(
        f"{sys.executable} -m graphlens check --json --evidence | head -1", shell=True, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "{"
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr


def _cli(*args, **kw):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "graphlens", *args], capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.parametrize(
    "args, status, words",
    [
        (("tour", "--out", "/proc/graphlens-x"), 1, "cannot write '/proc/graphlens-x'"),
        (("tour", "--out", "README.md"), 2, "is a file, not a folder"),
        (("demo", "²"), 2, "unknown demo: '²'"),
        (("demo", "4", "--out", "/proc/graphlens-x/y"), 1, "cannot write"),
    ],
)
def test_bad_output_paths_and_names_get_one_line_and_a_status(args, status, words):
    """Unwritable or wrong --out paths and unknown demos give one line on stderr and exit 1 or 2, never a traceback."""
    proc = _cli(*args, cwd=Path(__file__).parent.parent)
    assert proc.returncode == status, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_full_disk_is_one_line_and_status_1(tmp_path):
    """When writing the tour fails for lack of space (file size limit: EFBIG, as ENOSPC would), one line and exit 1."""
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = _cli("tour", "--out", str(tmp_path / "out"), preexec_fn=small_files)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "cannot write" in proc.stderr and "Traceback" not in proc.stderr


# -- graphlens replay runs the script as Python would ----------------------------------------


def _replay_script(tmp_path, body: str, name: str = "prog.py") -> Path:
    import textwrap

    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


def test_replay_of_a_script_raising_its_own_error_prints_its_traceback_only(tmp_path):
    """A script's own ValueError gets Python's traceback (its file and line, no graphlens or runpy frame), exit 1, and no autograd explanation or fix."""
    script = _replay_script(tmp_path, """
        import torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        raise ValueError("bad config value")
    """)
    out = tmp_path / "out"
    proc = _cli("replay", str(script), "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert err.startswith("Traceback (most recent call last):")
    assert f'File "{script}", line 4, in <module>' in err and 'raise ValueError("bad config value")' in err
    assert err.rstrip().endswith("ValueError: bad config value")
    for foreign in ("graphlens/replay.py", "runpy", "PyTorch", "anomaly", "in place", "graphlens:"):
        assert foreign not in err, foreign
    page = (out / "replay.html").read_text(encoding="utf-8")
    assert "ValueError: bad config value" in page and "anomaly" not in page  # the page shows what ran, and the error as it is


def test_replay_passes_the_scripts_exit_status_through(tmp_path, capsys):
    """sys.exit(n) / SystemExit(n) in a replayed script gives exit status n, a message is printed and gives 1, exactly as python script.py; the page of what ran is still written."""
    cases = [("sys.exit(3)", 3, ""), ("raise SystemExit(3)", 3, ""), ('sys.exit("bye")', 1, "bye\n"), ("sys.exit(0)", 0, ""), ("sys.exit()", 0, "")]
    for n, (call, status, stderr) in enumerate(cases):
        script = _replay_script(tmp_path, f"""
            import sys, torch
            w = torch.ones(2, requires_grad=True)
            (w * 2).sum().backward()
            {call}
            raise AssertionError("sys.exit returned")
        """, name=f"prog{n}.py")
        out = tmp_path / f"out{n}"
        assert main(["replay", str(script), "--out", str(out)]) == status, call
        captured = capsys.readouterr()
        assert captured.err == stderr, call
        assert "3 backward steps in 1 backward call" in captured.out, call
        assert (out / "replay.html").is_file(), call


@pytest.mark.needs_dot
def test_replay_writes_the_dot_text_when_the_layout_takes_too_long(tmp_path, capsys, monkeypatch):
    """A diagram the layout program does not finish in time is written as graph.dot with the reason; the page is written and the script's status kept."""
    from graphlens.render import output

    monkeypatch.setattr(output, "LAYOUT_TIMEOUT", 1e-4)  # (no layout program starts in a tenth of a millisecond)
    script = _replay_script(tmp_path, """
        import torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
    """)
    out = tmp_path / "out"
    assert main(["replay", str(script), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "graph.svg not written, graph.dot instead" in captured.err and "took more than" in captured.err
    assert (out / "replay.html").is_file() and not (out / "graph.svg").exists()
    assert (out / "graph.dot").read_text(encoding="utf-8").startswith("digraph")
    assert f"written: {(out / 'graph.dot').resolve()}" in captured.out


def test_replay_of_a_real_autograd_error_gives_its_traceback_and_the_explanation(tmp_path):
    """A second backward through a freed graph: Python's traceback of the script's line (no frame of the trace's mode), then graphlens's explanation, exit 1."""
    script = _replay_script(tmp_path, """
        import torch
        w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = w.sigmoid()
        loss = (y * w).sum()
        loss.backward()
        loss.backward()
    """)
    proc = _cli("replay", str(script), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    trace, _, explained = proc.stderr.partition("\ngraphlens: ")
    assert trace.startswith("Traceback (most recent call last):")
    assert f'File "{script}", line 6, in <module>' in trace and "RuntimeError: Trying to backward through the graph a second time" in trace
    for foreign in ("graphlens/", "handle_torch_function", "_graphlens_call", "runpy"):
        assert foreign not in trace, foreign
    assert explained.startswith("loss.backward()") and "retain_graph=True" in explained and "anomaly" not in explained
