"""Reading the user's frames for a trace: where a tensor came from, the lines of calls, and the names the block gives its tensors."""

from __future__ import annotations

from types import FrameType

import torch

from ..names import frame_candidates, frame_values, is_library, source_line, store_targets, user_frame

__all__ = ["FrameNotes"]

_Tensor = torch.Tensor


class FrameNotes:
    """The part of :class:`~graphlens._live.recorder.Recorder` that reads the user's frames (a
    mixin: it uses the recorder's ``frame``, ``code``, ``tnames``, ``inner_names``,
    ``where``, ``origins`` and ``index_of``)."""

    def note_origin(self, i: int) -> None:
        """For a tensor without history first seen now, inside the block (made by a call
        the mode does not see, e.g. the legacy ``torch.FloatTensor([...])``, or passed in):
        where the user's code first used it, ``(file, line)``, so its source can be read."""
        frame = user_frame(3)
        try:
            if frame is not None and not frame.f_code.co_filename.startswith("<eval_with_key"):
                self.origins[i] = (frame.f_code.co_filename, frame.f_lineno)
        finally:
            del frame

    def note_where(self, j: int, ins: list) -> None:
        """For a call where the gradient path stops (rare, so affordable): the innermost
        line of the user's code that made it, which may be inside a function the block
        called, and the names that frame gives its inputs."""
        frame = user_frame(2)
        while frame is not None and frame is not self.frame and is_library(frame.f_code.co_filename):
            frame = frame.f_back  # (a library's locals, transformers' shift_labels, name nothing)
        try:
            if frame is None or frame is self.frame or frame.f_code.co_filename.startswith("<eval_with_key"):
                return  # (the block's own frame is read anyway; code torch.compile generated is not the user's)
            lineno = frame.f_lineno
            self.where[j] = (lineno, source_line(frame.f_code.co_filename, lineno))
            names = self.inner_names  # (the block's own names win: see freeze)
            for name, t in frame_candidates(frame, with_globals=False):
                i = self.index_of(t)
                if i is not None and i not in names and any(t is x for x in ins):
                    names[i] = name
        finally:
            del frame

    def lines(self, offsets: dict[int, int]) -> dict[int, tuple[int, str | None]]:
        """``{key: (line number, source text)}`` for ``{key: instruction offset}`` of the block frame's code."""
        code = self.code
        if code is None:
            return {}
        import bisect

        starts, ends, numbers = [], [], []
        for start, end, line in code.co_lines():
            if line is not None:
                starts.append(start)
                ends.append(end)
                numbers.append(line)
        out: dict[int, tuple[int, str | None]] = {}
        cache: dict[int, tuple[int, str | None]] = {}
        for j, lasti in offsets.items():
            if lasti < 0:
                continue
            hit = cache.get(lasti)
            if hit is None:
                k = bisect.bisect_right(starts, lasti) - 1
                if k < 0 or lasti >= ends[k]:
                    continue
                number = numbers[k]
                text = source_line(code.co_filename, number)
                hit = cache[lasti] = (number, text)
            out[j] = hit
        return out

    def look_back(self, frame: FrameType, lasti: int) -> None:
        """The block's frame has moved on to instruction ``lasti``: the call it made before
        may have stored its result in variables (``y = y * 2``); name the recorded tensor
        each of them holds now, unless it has a name.  Only those variables are read (a
        loop written in the block would otherwise read every variable, and every module's
        parameters, at each call); :meth:`scan_names` reads them all at the block's end,
        and after an instruction that ran several ops (a call into the user's functions or
        modules, which may have kept a tensor where no variable of the block names it yet,
        e.g. a module's ``self.hidden``)."""
        prev, self.last_lasti = self.last_lasti, lasti
        calls = len(self.calls)
        several, self.calls_seen = calls - self.calls_seen > 1, calls
        if prev < 0:
            return
        if several:
            self._scan_all(frame)
            return
        targets = self.targets
        if targets is None:
            targets = self.targets = store_targets(frame.f_code)
        names = targets.get(prev)
        if not names:
            return
        tnames = self.tnames
        for name, t in zip(names, frame_values(frame, names)):
            if isinstance(t, _Tensor):
                i = self.index_of(t)
                if i is not None and i not in tnames:
                    tnames[i] = name

    def scan_names(self) -> None:
        """Name recorded tensors after the variables of the block's frame that hold them
        now; a name rebound later keeps naming the tensor it held first.  The frame is
        read again only once it has moved on (a loop calling the same line is read once)."""
        frame = self.frame
        if frame is None:
            return
        lasti = frame.f_lasti
        if lasti == self.last_lasti:
            return
        self.last_lasti = lasti
        self.calls_seen = len(self.calls)
        self._scan_all(frame)

    def _scan_all(self, frame: FrameType) -> None:
        names = self.tnames
        for name, t in frame_candidates(frame, with_globals=False):
            i = self.index_of(t)
            if i is not None and i not in names:
                names[i] = name
