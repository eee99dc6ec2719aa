"""The loop a trace saw run many times is found in its ops' sequence: numpy's comparisons (the
matches of every period counted at once, or period by period, then only the periods that could
still win searched) find the very stretch, period and repeats the plain item-by-item search finds."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import graphlens.render.loops as loops
from graphlens.render.loops import _periodic


def _plain_periodic(seq, minimum):
    """The plain search (graphlens before 2026-12-07): every item compared in Python, for every period."""
    n = len(seq)
    best = (0, 1, 0)
    longest = min(n // minimum, max(2, 4_000_000 // max(n, 1)))
    for p in range(2, longest + 1):
        run = 0
        for i in range(n - p):
            if seq[i] == seq[i + p]:
                run += 1
                continue
            best = _plain_better(best, i - run, p, run, minimum)
            run = 0
        best = _plain_better(best, n - p - run, p, run, minimum)
    return best


def _plain_better(best, start, p, run, minimum):
    repeats = (run + p) // p
    if repeats >= minimum and repeats * p > best[1] * best[2]:
        return (start, p, repeats)
    return best


@st.composite
def op_sequences(draw):
    """The forward ops of a traced program as ``(line, op)``: a prologue, a loop body repeated
    (now and then broken off or changed in one iteration), an epilogue."""
    item = st.tuples(st.sampled_from([None, 3, 4, 5, 9]), st.sampled_from(["mul", "add", "linear", "tanh"]))
    body = draw(st.lists(item, min_size=1, max_size=7))
    seq = draw(st.lists(item, max_size=6))
    for _ in range(draw(st.integers(0, 9))):
        seq += body
        if draw(st.integers(0, 5)) == 0:
            seq += draw(st.lists(item, max_size=2))
    seq += draw(st.lists(item, max_size=6))
    return seq, draw(st.integers(1, 4))


@example((["a", "b"] * 5 + ["c"] + ["a", "b", "a"] * 4, 3))
@example(([], 3))
@example((["a", "b"] * 3 + ["x"] + ["a", "b"] * 3, 3))  # (two stretches alike: the earlier)
@given(op_sequences())
def test_the_loop_found_is_the_plain_searchs(case):
    """Start, period and repeats agree with the plain search (ties: the shorter period, then the
    earlier stretch), whether the matches are counted for all periods at once or one by one."""
    seq, minimum = case
    plain = _plain_periodic(seq, minimum)
    assert _periodic(seq, minimum) == plain
    cells, loops._CHUNK_CELLS = loops._CHUNK_CELLS, 0
    try:
        assert _periodic(seq, minimum) == plain
    finally:
        loops._CHUNK_CELLS = cells


@pytest.mark.parametrize("cells", [0, 10**8])
def test_a_long_program_is_searched_over_the_same_periods(cells, monkeypatch):
    """A sequence long enough to bound the periods tried (4 million comparisons) gives the plain search's answer."""
    monkeypatch.setattr(loops, "_CHUNK_CELLS", cells)
    body = [(7, "linear"), (7, "tanh"), (8, "add")]
    seq = [(1, "randn")] + body * 1200 + [(12, "sum")]
    assert _periodic(seq, 3) == _plain_periodic(seq, 3) == (1, 3, 1200)


@st.composite
def noisy_sequences(draw):
    """Sequences where many periods almost repeat (few symbols), so that the search's bound on
    what a period could cover is often near what another covers: ties and near-ties."""
    alphabet = st.sampled_from("ab" if draw(st.booleans()) else "abc")
    seq = draw(st.lists(alphabet, max_size=60))
    for _ in range(draw(st.integers(0, 3))):
        body = draw(st.lists(alphabet, min_size=2, max_size=9))
        at = draw(st.integers(0, len(seq)))
        seq[at:at] = body * draw(st.integers(2, 6))
    return seq, draw(st.integers(1, 4))


@given(noisy_sequences())
def test_near_ties_between_periods_resolve_as_the_plain_search(case):
    """Where many periods cover nearly as much (two or three symbols), the periods left unsearched
    could not have won: the answer is the plain search's, ties to the shorter period, then the earlier stretch."""
    seq, minimum = case
    assert _periodic(seq, minimum) == _plain_periodic(seq, minimum)
