"""The article's claims: verdicts on the installed torch, their evidence, and that verdicts
are computed from what torch does (altered programs change them; broken checks give errors)."""

import contextlib
import functools
import json

import pytest
import torch

import graphlens
import graphlens.claims as claims
from graphlens.claims import accumulate, detach, dynamic, errata, leaf, no_grad, optimizer, requires_grad, retain_grad
from graphlens.claims.expected import EXPECTED, parse_version

#: The ids of CLAIMS.md, in its order (the spec this package implements).
IDS = (
    "graph.dynamic", "leaf.user_created", "leaf.derived_nonleaf", "leaf.no_grad_inputs", "leaf.backprop_ends",
    "defaults.requires_grad", "requires_grad.propagates", "requires_grad.nonleaf_locked",
    "requires_grad.freeze_leaf", "detach.leaf_cut", "detach.is_copy", "detach.two_losses",
    "accumulate.two_backwards", "accumulate.without_zero_grad", "zero_grad.sets_zero",
    "retain_grad.nonleaf_discarded", "retain_grad.keeps", "retain_grad.graph_freed", "no_grad.no_graph",
    "no_grad.saves_memory", "no_grad.freeze_all_same", "optimizer.registered_params", "erratum.undefined_p",
    "erratum.back_ward", "erratum.nograd",
)


@pytest.fixture(scope="module")
def verdicts():
    """Every claim checked once on the installed torch."""
    return {v.id: v for v in claims.check_all()}


# -- the registry ---------------------------------------------------------------------------
def test_registry_lists_every_claim_in_article_order():
    """all() gives one Claim per row of CLAIMS.md, in that order, with valid metadata."""
    found = claims.all()
    assert tuple(c.id for c in found) == IDS == claims.ids()
    for c in found:
        assert c.section in ("intro", "1", "2", "3", "4", "5", "6", "7")
        assert c.chart is None or 1 <= c.chart <= 6
        assert c.statement and c.expected and c.statement != c.expected


def test_every_chart_is_illustrated_by_some_claim():
    """Charts 1 to 6 each have at least one claim that illustrates them."""
    assert {c.chart for c in claims.all()} - {None} == {1, 2, 3, 4, 5, 6}


def test_each_chart_draws_the_evidence_of_a_claim_that_illustrates_it():
    """charts.chart(n) is the evidence graph of the claim CHARTS[n] names, a claim of chart n,
    with the claim's notes and the chart's talking points on it."""
    from graphlens import charts

    for number, entry in charts.CHARTS.items():
        assert claims.get(entry.claim).chart == number
        chart, ev = charts.chart(number), claims.check(entry.claim).evidence[entry.evidence]
        assert (chart.tensors, chart.ops, chart.edges) == (ev.tensors, ev.ops, ev.edges)
        assert all(set(texts) <= set(chart.notes[k]) for k, texts in ev.notes.items())
        assert len(chart.notes) > len(ev.notes) or any(len(chart.notes[k]) > len(v) for k, v in ev.notes.items())


def test_chart_captions_name_only_ops_their_graph_ran():
    """A caption that names a torch function (``tanh``, ``exp``, ...) names one the charted
    graph really ran: chart 1's caption once said ``exp`` under a graph of tanh."""
    import re

    from graphlens import charts

    for number, entry in charts.CHARTS.items():
        ran = {op.forward for op in charts.chart(number).ops if op.forward}
        for word in re.findall(r"``(\w+)``", entry.build.__doc__ or ""):
            if hasattr(torch, word) and callable(getattr(torch, word)):
                assert word in ran, f"chart {number}'s caption names {word}, which its graph did not run: {sorted(ran)}"


@pytest.mark.parametrize(
    "claim_id, api",
    [
        ("detach.is_copy", "detach"),
        ("detach.leaf_cut", "detach"),
        ("zero_grad.sets_zero", "optimizer.zero_grad("),
        ("retain_grad.keeps", "y2.retain_grad()"),
        ("retain_grad.keeps", "# run as chart6_program(retain_y2=True)"),
        ("no_grad.saves_memory", "saved_tensors_hooks"),
        ("no_grad.no_graph", "torch.no_grad"),
        ("accumulate.two_backwards", ".backward()"),
        ("erratum.back_ward", ".back_ward()"),
        ("erratum.nograd", "torch.nograd()"),
        ("erratum.undefined_p", "p + xx"),
    ],
)
def test_claim_code_shows_the_api_it_exercises(claim_id, api):
    """The code shown for a claim contains the very API the article names."""
    code = claims.get(claim_id).code
    assert "def " in code
    assert api in code or (api == "saved_tensors_hooks" and "SavedBytes" in code)


def test_unknown_id_names_near_matches():
    """An unknown id raises UnknownClaimError suggesting the nearest ids."""
    with pytest.raises(claims.UnknownClaimError, match="did you mean 'detach.is_copy'"):
        claims.check("detach.copy")
    with pytest.raises(LookupError, match="unknown claim id"):
        claims.get("nothing.like.this")


def test_expected_table_covers_every_claim_with_valid_statuses():
    """Each recorded range of the expected table names every claim with a real status."""
    for _, _, table in EXPECTED:
        assert set(table) == set(IDS)
        assert set(table.values()) <= set(claims.STATUSES) - {claims.ERROR}
    assert parse_version("2.13.0+cpu") == (2, 13, 0)
    assert claims.expected_statuses("1.13.1") is None
    assert claims.expected_statuses("2.1.0")["detach.is_copy"] == "refuted"


# -- verdicts on the installed torch ----------------------------------------------------------
@pytest.mark.parametrize("claim_id", IDS)
def test_verdict_matches_expected_table(verdicts, claim_id):
    """Each claim's verdict on the installed torch is the one recorded for its version."""
    expected = claims.expected_statuses()
    if expected is None:
        pytest.skip(f"no expected verdicts recorded for torch {torch.__version__}")
    v = verdicts[claim_id]
    assert v.status == expected[claim_id], v.observed
    assert v.id == claim_id and v.observed and v.expected == claims.get(claim_id).expected
    assert all(isinstance(g, graphlens.Graph) for g in v.evidence)


def test_every_claim_brings_evidence_to_draw(verdicts):
    """Every verdict carries at least one graph, and the verdicts serialise to JSON."""
    for v in verdicts.values():
        assert v.evidence, v.id
        json.dumps(v.to_dict(evidence=True))


def test_detach_evidence_shared_storage_and_failed_backward(verdicts):
    """detach.is_copy saw equal data_ptrs, the in-place change through the original,
    the shared version counter and backward failing because of it."""
    d = verdicts["detach.is_copy"].details
    assert d["same_storage"] is True
    assert d["y_after_changing_d"] == pytest.approx([10 * v for v in d["y_before"]], rel=1e-5)
    assert d["versions_after"][0] == d["versions_before"][0] + 1
    assert "modified by an inplace operation" in d["backward"]
    assert d["p1.grad"] is None
    g = verdicts["detach.is_copy"].evidence[0]
    assert any(e.kind == "detach" for e in g.edges)


def test_no_grad_evidence_saved_bytes(verdicts):
    """no_grad.saves_memory measured saved bytes > 0 without no_grad and exactly 0 with it."""
    d = verdicts["no_grad.saves_memory"].details
    assert d["without"]["saved_bytes"] > 0 and d["without"]["saved_tensors"] > 0
    assert d["with"] == {"saved_tensors": 0, "saved_bytes": 0, "leaf_bytes": 0}
    assert any(t.region and t.region.startswith("no_grad") for t in verdicts["no_grad.saves_memory"].evidence[1].tensors)


def test_no_grad_evidence_a_view_keeps_requires_grad(verdicts):
    """no_grad.no_graph observed ops without graph, and a view of the leaf still requiring grad."""
    d = verdicts["no_grad.no_graph"].details
    assert d["tensors"]["y"] == {"requires_grad": False, "grad_fn": None, "is_leaf": True}
    assert d["tensors"]["view"]["requires_grad"] and d["tensors"]["view"]["grad_fn"] is None
    assert d["tensors"]["view"]["is_leaf"] and d["p1.grad"] is None
    assert verdicts["no_grad.no_graph"].status == "nuanced"


def test_zero_grad_evidence_none_by_default_zeros_on_request(verdicts):
    """zero_grad() left None by default and zeros with set_to_none=False, both observed."""
    d = verdicts["zero_grad.sets_zero"].details
    assert all(g is None for g in d["after_zero_grad"]["default"].values())
    explicit = d["after_zero_grad"]["set_to_none=False"]
    assert torch.count_nonzero(torch.tensor(explicit["weight"])) == 0 and explicit["bias"] == [0.0, 0.0]
    assert d["set_to_none_default"] is True


def test_graph_freed_evidence(verdicts):
    """A second backward raised after the saved values were freed; retain_graph and an
    additions-only graph ran twice; the snapshot shows the saved values as freed."""
    d = verdicts["retain_grad.graph_freed"].details
    assert d["saved_before_backward"] == "ok"
    assert d["second_backward"].startswith("RuntimeError") and "second time" in d["second_backward"]
    assert d["second_backward_retain_graph"] == d["second_backward_additions_only"] == "ok"
    freed = verdicts["retain_grad.graph_freed"].evidence[0]
    assert any(entry.state is graphlens.graph.FREED for op in freed.ops for entry in op.saved)


def test_retain_grad_evidence(verdicts):
    """Gradients flowed through every non-leaf, only the retained one kept it."""
    gone = verdicts["retain_grad.nonleaf_discarded"].details
    assert set(gone["grad_after_backward"].values()) == {None}
    assert all(v is not None for v in gone["flowed"].values())
    assert gone["warnings"], "reading a non-leaf .grad should warn"
    kept = verdicts["retain_grad.keeps"].details
    assert kept["grad_after_backward"]["y2"] == kept["flowed"]["y2"]


def test_backprop_ends_at_accumulate_grad(verdicts):
    """The backward walk ended only at AccumulateGrad nodes of p1 and p2."""
    d = verdicts["leaf.backprop_ends"].details
    assert set(d["end_nodes"]) == {"AccumulateGrad"}
    assert sorted(d["accumulated_into"]) == ["p1", "p2"] == sorted(d["with_grad"])
    g = verdicts["leaf.backprop_ends"].evidence[0]
    assert sorted(g.node(op.variable).name for op in g.ops if op.is_accumulate_grad) == ["p1", "p2"]


def test_errata_evidence_real_exceptions(verdicts):
    """The misspellings raised NameError / AttributeError when run; the fixes ran."""
    assert verdicts["erratum.undefined_p"].details["as_printed"] == "NameError: name 'p' is not defined"
    assert "back_ward" in verdicts["erratum.back_ward"].details["as_printed"]
    assert verdicts["erratum.back_ward"].details["as_printed"].startswith("AttributeError")
    assert "nograd" in verdicts["erratum.nograd"].details["as_printed"]
    assert all(verdicts[i].details["corrected"] == "ok" for i in IDS if i.startswith("erratum."))


def test_freeze_all_same_evidence(verdicts):
    """Frozen parameters act like no_grad for a plain input, not for an input needing grad."""
    d = verdicts["no_grad.freeze_all_same"].details
    assert d["no_grad"] == d["frozen"] and d["same_output"]
    assert d["frozen_input_requires_grad"]["saved_bytes"] > 0
    assert d["no_grad_input_requires_grad"]["saved_bytes"] == 0


# -- verdicts are computed, not recorded ----------------------------------------------------
ALTERED = [
    ("detach.is_copy", functools.partial(detach.is_copy_program, cut=torch.Tensor.clone), "holds"),
    ("detach.leaf_cut", functools.partial(detach.leaf_cut_program, cut=torch.Tensor.clone), "refuted"),
    ("no_grad.no_graph", functools.partial(no_grad.no_graph_program, context=contextlib.nullcontext), "refuted"),
    ("no_grad.saves_memory", functools.partial(no_grad.saves_memory_program, context=contextlib.nullcontext), "refuted"),
    ("graph.dynamic", functools.partial(dynamic.dynamic_program, inputs=(((1.0, 2.0), (0.5, -1.0)), ((3.0, 1.0), (0.5, -1.0)))), "refuted"),
    ("optimizer.registered_params", functools.partial(optimizer.registered_params_program, register=lambda *ps: list(ps)), "refuted"),
    ("retain_grad.nonleaf_discarded", functools.partial(retain_grad.chart6_program, retain_y2=True), "refuted"),
    ("retain_grad.keeps", functools.partial(retain_grad.chart6_program, retain_y2=False), "refuted"),
    ("requires_grad.freeze_leaf", functools.partial(requires_grad.freeze_leaf_program, freeze=False), "refuted"),
    ("requires_grad.nonleaf_locked", functools.partial(requires_grad.nonleaf_locked_program, make=lambda p: p.detach()), "refuted"),
    ("leaf.no_grad_inputs", functools.partial(leaf.no_grad_inputs_program, x_requires_grad=True), "refuted"),
    ("accumulate.without_zero_grad", functools.partial(accumulate.without_zero_grad_program, between=lambda o: o.zero_grad()), "refuted"),
    ("accumulate.two_backwards", functools.partial(accumulate.two_backwards_program, between=lambda p1, p2: setattr(p1, "grad", None)), "refuted"),
]


@pytest.mark.parametrize("claim_id, program, status", ALTERED, ids=[a[0] for a in ALTERED])
def test_altered_program_changes_the_verdict(verdicts, claim_id, program, status):
    """The same judge, fed a deliberately altered program, reaches a different verdict."""
    v = claims.check(claim_id, program=program)
    assert v.status == status != verdicts[claim_id].status, v.observed


def test_detach_replaced_by_clone_is_a_real_copy():
    """With clone() in place of detach(), the check observes separate storage and an untouched original."""
    d = claims.check("detach.is_copy", program=functools.partial(detach.is_copy_program, cut=torch.Tensor.clone)).details
    assert d["same_storage"] is False and d["y_before"] == d["y_after_changing_d"] and d["backward"] == "ok"


def test_errata_judge_follows_what_ran():
    """An erratum judge says holds when the printed spelling runs and refuted when the fix fails."""
    judge = claims.get("erratum.nograd").judge
    assert judge({"as_printed": "ok", "corrected": "ok"})[0] == "holds"
    assert judge({"as_printed": "AttributeError: x", "corrected": "ok"})[0] == "erratum"
    assert judge({"as_printed": "AttributeError: x", "corrected": "RuntimeError: y"})[0] == "refuted"
    assert errata.CLAIMS[0].judge({"as_printed": "TypeError: z", "corrected": "ok"})[0] == "refuted"


# -- failures are contained -----------------------------------------------------------------
def _broken_program():
    """A program with a bug."""
    return {"ratio": 1 / 0}


def test_raising_check_gives_error_and_the_others_still_run():
    """A check that raises yields an 'error' verdict with a traceback summary; the next one still runs."""
    broken = claims.Claim(
        id="test.broken", section="1", chart=None, statement="s", expected="e",
        program=_broken_program, judge=lambda facts: ("holds", "never reached"),
    )
    seen = []
    out = claims.run([broken, claims.get("leaf.user_created")], progress=lambda c: seen.append(c.id))
    assert seen == ["test.broken", "leaf.user_created"]
    assert out[0].status == "error" and "ZeroDivisionError" in out[0].observed
    assert "_broken_program" in out[0].observed and out[0].details["exception"] == "ZeroDivisionError"
    assert out[1].status == "holds"
    assert [d.id for d in claims.drift(out, {"test.broken": "holds", "leaf.user_created": "holds"})] == ["test.broken"]


@pytest.mark.parametrize(
    "program, judge",
    [
        (lambda: ["not", "a", "dict"], lambda f: ("holds", "")),
        (lambda: {"evidence": ("not a graph",)}, lambda f: ("holds", "")),
        (lambda: {}, lambda f: ("maybe", "")),
        (lambda: {}, lambda f: f["missing"]),
    ],
)
def test_malformed_program_or_judge_gives_error(program, judge):
    """A program returning the wrong shape, or a judge with a bad status or a bug, gives 'error'."""
    c = claims.Claim(id="test.bad", section="2", chart=None, statement="s", expected="e", program=program, judge=judge)
    assert c.check().status == "error"


def test_check_restores_grad_mode_and_random_state():
    """Checks run with grad enabled even inside no_grad, and leave the RNG state as it was."""
    state = torch.get_rng_state()
    with torch.no_grad():
        v = claims.check("defaults.requires_grad")
        assert not torch.is_grad_enabled()
    assert v.status == "holds"
    assert torch.equal(state, torch.get_rng_state())


def test_check_all_calls_progress_before_each_claim():
    """check_all(progress=...) calls progress once per claim, in order, before its check."""
    seen = []
    out = claims.check_all(progress=lambda c: seen.append(c.id))
    assert tuple(seen) == IDS == tuple(v.id for v in out)


# -- notes on the evidence ---------------------------------------------------------------------
def test_every_claim_points_at_what_it_is_about(verdicts):
    """Each of the 25 claims' evidence graphs carries at least one note, on a node of that graph."""
    for v in verdicts.values():
        notes = [(g, k) for g in v.evidence for k in g.notes]
        assert notes, f"{v.id} has no note on its evidence"
        assert all(k in g for g, k in notes)


def test_notes_are_observed_not_written_in():
    """A detach that copies (clone) changes the notes with the verdict: no 'detach() cut' note,
    and p1, now reached, gets no 'no path' note."""
    plain = claims.check("detach.leaf_cut")
    altered = claims.check("detach.leaf_cut", program=functools.partial(detach.leaf_cut_program, cut=torch.Tensor.clone))
    text = lambda v: " ".join(t for g in v.evidence for texts in g.notes.values() for t in texts)  # noqa: E731
    assert "detach() cut here" in text(plain) and "no path from loss" in text(plain)
    assert altered.status == "refuted"
    assert "detach() cut here" not in text(altered) and "no path from loss" not in text(altered)


def test_accumulation_notes_add_up_the_passes():
    """The note on a leaf after two backward passes gives its .grad as the sum of what each pass brought."""
    v = claims.check("accumulate.two_backwards")
    g = v.evidence[0]
    (note,) = g.notes[g.find("p1").id]
    assert note.startswith(f"grad {g.find('p1').grad}") and "(accumulated)" in note and " + " in note


def test_claim_notes_agree_with_the_graph_they_sit_on(verdicts):
    """A note that says requires_grad=True/False (or 'frozen:') on a tensor says what that
    tensor of that very graph shows: requires_grad.freeze_leaf once put the frozen run's
    notes on the unfrozen run too."""
    import re

    checked = 0
    for v in verdicts.values():
        for g in v.evidence:
            for node_id, texts in g.notes.items():
                node = g.node(node_id)
                if not hasattr(node, "requires_grad"):
                    continue
                for text in texts:
                    for flag in re.findall(r"^(?:\w+: )?requires_grad=(True|False)", text):
                        assert (flag == "True") == node.requires_grad, f"{v.id}: {node.label}: {text!r}"
                        checked += 1
                    if text.startswith("frozen:"):
                        assert not node.requires_grad, f"{v.id}: {node.label}: {text!r}"
    assert checked >= 4
