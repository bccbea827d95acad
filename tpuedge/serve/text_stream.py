"""New tokens as text, piece by piece, so that the pieces joined are the whole text.

A byte-level tokenizer may split one character over several tokens: until its last byte comes,
the decoded text ends in U+FFFD, which is held back. So is a tail that could be the start of a
stop string; when a stop string appears, the text ends just before it.
"""

from __future__ import annotations

__all__ = ["TextStream"]

_INCOMPLETE = "\ufffd"


class TextStream:
    def __init__(self, tokenizer, stop: tuple[str, ...] = (), *, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = tuple(s for s in stop if s)
        self.ids: list[int] = []
        self.text = ""  # what has been handed out
        self.stopped = False  # a stop string was found: the text is final

    def push(self, token: int) -> str:
        """The text that `token` makes final (often "", sometimes several characters)."""
        if self.stopped:
            return ""
        self.ids.append(int(token))
        whole = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens)
        if self.stop:
            cut = self._first_stop(whole)
            if cut is not None:
                self.stopped = True
                return self._take(whole[:cut])
        ready = len(whole.rstrip(_INCOMPLETE))
        ready -= self._stop_prefix_at_end(whole[:ready])
        return self._take(whole[: max(ready, len(self.text))])

    def finish(self) -> str:
        """The rest, held back or not, once no token will follow."""
        if self.stopped:
            return ""
        return self._take(self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens))

    def _take(self, upto: str) -> str:
        piece = upto[len(self.text) :] if upto.startswith(self.text) else ""
        self.text += piece
        return piece

    def _first_stop(self, whole: str) -> int | None:
        # a stop string can't lie wholly inside the text already handed out (it would have ended it)
        found = [i for s in self.stop if (i := whole.find(s, max(0, len(self.text) - len(s) + 1))) >= 0]
        return min(found) if found else None

    def _stop_prefix_at_end(self, text: str) -> int:
        """How many characters at the end of `text` (beyond what was handed out) could begin a stop string."""
        room = len(text) - len(self.text)
        longest = 0
        for stop in self.stop:
            for k in range(min(len(stop) - 1, room), longest, -1):
                if text.endswith(stop[:k]):
                    longest = k
                    break
        return longest
