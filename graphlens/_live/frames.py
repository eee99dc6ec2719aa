"""Reading the user's frames for a trace: where a tensor came from, the lines of calls, and the names the block gives its tensors."""

from __future__ import annotations

import os
import weakref
from types import FrameType
from typing import Any

import torch

from ..names import CALLER_NAME, OPTIMIZERS, _TORCH_DIR, _module_items, frame_candidates, frame_values, is_internal, is_library, source_line, \
    state_names, store_targets, user_frame
from .finite import BOUNDED_DERIVATIVES, may_send_nonfinite

__all__ = ["FrameNotes"]

#: graphlens's own checks, which register hooks to watch a program (not hooks of the program).
_OWN_CHECKS = (os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "claims") + os.sep,)

_Tensor = torch.Tensor

#: Per code object: whether it is the user's own (not torch's, a library's or graphlens's).
_USER_CODE: dict = {}


def _user_code(frame: FrameType) -> bool:
    """Whether ``frame`` runs the user's own code (as :func:`graphlens.names.user_frame` tells it)."""
    code = frame.f_code
    name = code.co_filename
    if name.startswith(_TORCH_DIR) or name.startswith("<eval_with_key") or code.co_name == CALLER_NAME or is_library(name):
        return False
    return name.startswith("<") or not is_internal(frame.f_globals.get("__name__"))


class FrameNotes:
    """The part of :class:`~graphlens._live.recorder.Recorder` that reads the user's frames (a
    mixin: it uses the recorder's ``frame``, ``code``, ``tnames``, ``inner_names``, ``inner_codes``, ``model_names``,
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

    def _outside_libraries(self, frame: FrameType | None) -> FrameType | None:
        """``frame``, or the first frame out from it that is not a library's (stopping at the
        block's own frame): a library's locals, transformers' shift_labels, name nothing."""
        while frame is not None and frame is not self.frame and is_library(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def note_where(self, j: int, ins: list, frame: FrameType | None = None) -> None:
        """For a call where the gradient path stops (rare, so affordable): the innermost
        line of the user's code that made it, which may be inside a function the block
        called, and the names that frame gives its inputs (``frame``: that frame, when the
        caller knows it)."""
        frame = self._outside_libraries(user_frame(2) if frame is None else frame)
        try:
            if frame is None or frame is self.frame or frame.f_code.co_filename.startswith("<eval_with_key"):
                return  # (the block's own frame is read anyway; code torch.compile generated is not the user's)
            lineno = frame.f_lineno
            self.where[j] = (lineno, source_line(frame.f_code.co_filename, lineno))
            names = self.inner_names  # (the block's own names win: see freeze)
            codes = self.inner_codes
            code = frame.f_code
            models: list = []
            for name, t in frame_candidates(frame, with_globals=False, models=models):
                i = self.index_of(t)
                if i is not None and i not in names and any(t is x for x in ins):
                    if codes.setdefault(name, code) is not code:
                        continue  # (another function's src is another tensor: one name would mean two)
                    names[i] = name
            if models:
                self._name_in_models_later(models, ins, code)
        finally:
            del frame

    def _name_in_models_later(self, models: list, ins: list, code: Any) -> None:
        """The inputs of a noted call that the frame's own variables did not name may be held
        by a model the frame holds (``self.bn1.num_batches_tracked``): walking it at every
        such call would cost the model's size each time (a user's ``forward`` over a hundred
        BatchNorm layers, each counting its batches in place, walked the whole model a
        hundred times), so each model is kept weakly with the records it may name, and
        walked once, when the graph is built (:meth:`name_from_models`)."""
        names = self.inner_names
        want = [i for i in map(self.index_of, ins) if i is not None and i not in names]
        if not want:
            return
        later = self.model_names
        for name, module in models:
            key = (id(module), name, code)
            entry = later.get(key)
            if entry is None or entry[0]() is not module:
                try:
                    entry = later[key] = (weakref.ref(module), name, code, set())
                except TypeError:  # (a module that cannot be weakly referenced: not named)
                    continue
            entry[3].update(want)

    def name_from_models(self) -> None:
        """Name, as :meth:`note_where` would have, the records still unnamed whose tensor a
        model held by a noted frame holds now, under the same name (each model walked once).
        A tensor the block names (its latest record) keeps the block's name for every
        version; a model that died, or no longer holds the tensor, names nothing."""
        later, self.model_names = self.model_names, {}
        names, codes, tnames, refs = self.inner_names, self.inner_codes, self.tnames, self.refs
        walked: dict[int, list] = {}
        for ref, prefix, code, want in later.values():
            wanted: dict[int, list] = {}  # id(tensor) -> its records (versions)
            for i in sorted(want):
                t = refs[i]() if i not in names else None
                if t is not None and self.index_of(t) not in tnames:
                    wanted.setdefault(id(t), []).append(i)
            t = None
            module = ref() if wanted else None
            if module is None:
                continue
            items = walked.get(id(module))
            if items is None:
                items = walked[id(module)] = _module_items("", module)
            for suffix, t in items:
                found = wanted.pop(id(t), None)
                if found is not None:
                    name = prefix + suffix
                    if codes.setdefault(name, code) is not code:
                        continue  # (as in note_where)
                    names.update(dict.fromkeys(found, name))
                    if not wanted:
                        break

    def note_factory(self, i: int) -> None:
        """Record ``i`` was made by a factory (``torch.full``) holding NaN or inf, or as a new leaf that
        requires grad (``torch.tensor(v, requires_grad=True)``): the innermost line of the user's code
        that called it, when that is not the block's own line."""
        frame = self._outside_libraries(user_frame(2))
        try:
            if frame is not None and frame is not self.frame:
                lineno = frame.f_lineno
                self.factory_where[i] = (lineno, source_line(frame.f_code.co_filename, lineno))
        finally:
            del frame

    def note_hook(self, t: Any, frame: FrameType | None) -> None:
        """``t.register_hook(fn)`` was called from ``frame``: the user's line that registered it,
        kept for the recorded tensor (a NaN the hook makes in backward is named at that line)."""
        i = self.index_of(t)
        frame = self._outside_libraries(frame)
        try:
            if frame is not None and frame.f_code.co_filename.startswith(_OWN_CHECKS):
                return  # (a claim's own instrument, watching what flowed: not the program's hook)
            if i is not None and frame is not None:
                lineno = frame.f_lineno
                self.hook_lines.setdefault(i, []).append((lineno, source_line(frame.f_code.co_filename, lineno)))
        finally:
            del frame

    def note_inner(self, j: int, node: str, ins: Any, caller: FrameType | None) -> None:
        """Op ``j`` made backward node ``node`` (its class name), called from ``caller``: when
        that is a function of the user's other than the block (a module's ``forward``, a
        helper) and the node can send a NaN or an infinity from finite gradients
        (:func:`~graphlens._live.finite.may_send_nonfinite`: ``sqrt``, a division, a log...),
        note that inner line now, as for the calls :meth:`note_where` notes: a non-finite
        gradient found later is then said at the line that made the op, not at the block's
        line that called the function.  One lookup per call otherwise (a library's or torch's
        own calls, the block's own lines, ops with a finite derivative)."""
        if caller is None or caller is self.frame or j in self.where:
            return
        risky = may_send_nonfinite(node)
        if not risky and node not in BOUNDED_DERIVATIVES:
            return
        code = caller.f_code
        user = _USER_CODE.get(code)
        if user is None:
            user = _user_code(caller)
            if len(_USER_CODE) >= 4096:
                _USER_CODE.clear()
            _USER_CODE[code] = user
        if user and risky:
            self.note_where(j, ins, caller)
        elif user:  # (a loss or an activation: its line only, read when the graph is built)
            self.where[j] = (caller.f_lineno, None, code.co_filename)

    def where_lines(self) -> dict[int, tuple[int, str | None]]:
        """``{op: (line number, source text)}`` of the ops noted at a line of their own (see
        :meth:`note_where` and :meth:`note_inner`), their text read now where it was left for later."""
        out = {}
        for j, w in self.where.items():
            out[j] = w if len(w) == 2 else (w[0], source_line(w[2], w[0]))
        return out

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
        direct = self.direct
        if direct is not None and direct[0] == prev and len(names) == 1:
            # The block's own code made the call at prev and stored what it handed back: that
            # tensor is what the name holds (no read of the frame's variables, which builds
            # the frame's whole locals dict).
            values: Any = (self.refs[direct[1]](),)
        else:
            values = frame_values(frame, names)
        for name, t in zip(names, values):
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
        if OPTIMIZERS:
            self._name_state()

    def _scan_all(self, frame: FrameType) -> None:
        names = self.tnames
        for name, t in frame_candidates(frame, with_globals=False):
            i = self.index_of(t)
            if i is not None and i not in names:
                names[i] = name

    def _name_state(self) -> None:
        """Name the recorded tensors that are an optimizer's state (``opt.state[w]['exp_avg_sq']``),
        for the optimizers a scan of the user's frames met (read once, as the block ends)."""
        names, refs = self.tnames, self.refs
        pnames: dict = {}
        for i, n in names.items():
            t = refs[i]()
            if t is not None and t.requires_grad:
                pnames.setdefault(id(t), n)
        for ref, name in state_names(lambda p: pnames.get(id(p))).values():
            t = ref()
            i = self.index_of(t) if t is not None else None
            if i is not None and i not in names:
                names[i] = name
