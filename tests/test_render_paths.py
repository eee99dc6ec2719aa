"""Rendering to a path that cannot be written: the error says what is true about the path."""

import os
from pathlib import Path

import pytest
import torch

import graphlens as gl


def _graph():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * 3).sum()
    return gl.snapshot(loss)


def _writers():
    """Both ways a diagram is written to a file: Graph.render and Comparison.render."""
    g = _graph()
    return [("Graph.render", g.render), ("Comparison.render", gl.compare(g, _graph()).render)]


def test_a_file_where_the_folder_should_be_is_named_as_a_file(tmp_path):
    """render('notes.txt/x.svg') says notes.txt is a file, not a folder, never that a folder 'does not exist'."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder")
    for label, write in _writers():
        for target in (notes / "x.dot", notes / "deeper" / "still" / "x.dot"):
            with pytest.raises(NotADirectoryError) as info:
                write(target)
            text = str(info.value)
            assert f"{str(notes)!r} is a file, not a folder" in text, (label, text)
            assert "does not exist" not in text, (label, text)
            assert str(target) in text, (label, text)
    assert notes.read_text() == "not a folder"  # nothing was written over it


@pytest.mark.skipif(not Path("/etc/passwd").is_file(), reason="needs /etc/passwd, a file")
def test_etc_passwd_as_a_folder_is_said_to_be_a_file():
    """g.render('/etc/passwd/x.svg') says /etc/passwd is a file (it exists), as the issue reported."""
    with pytest.raises(NotADirectoryError, match=r"'/etc/passwd' is a file, not a folder"):
        _graph().render("/etc/passwd/x.svg")


def test_a_missing_folder_is_named_with_how_to_make_it(tmp_path):
    """A parent folder that does not exist is named, with the call that creates it."""
    target = tmp_path / "missing" / "deeper" / "x.dot"
    for label, write in _writers():
        with pytest.raises(FileNotFoundError) as info:
            write(target)
        text = str(info.value)
        assert f"the folder {str(target.parent)!r} does not exist" in text, (label, text)
        assert "mkdir(parents=True)" in text, (label, text)
    assert not (tmp_path / "missing").exists()


def test_a_folder_given_as_the_file_is_named_as_a_folder(tmp_path):
    """render(a folder named like a diagram) says it is a folder, and suggests a file inside it."""
    folder = tmp_path / "chart.svg"
    folder.mkdir()
    for label, write in _writers():
        with pytest.raises(IsADirectoryError) as info:
            write(folder)
        text = str(info.value)
        assert "it is a folder, not a file" in text and str(folder / "graph.svg") in text, (label, text)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write into any folder")
def test_a_folder_without_write_permission_is_named_as_such(tmp_path):
    """A folder the user may not write into is named as not writable (not as missing)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for label, write in _writers():
            with pytest.raises(PermissionError) as info:
                write(locked / "x.dot")
            assert f"the folder {str(locked)!r} exists but is not writable" in str(info.value), label
    finally:
        locked.chmod(0o755)
