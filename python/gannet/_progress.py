"""The progress bar generate() shows: tqdm's when tqdm is installed (as vLLM's), else a
one-line bar on stderr."""

import sys
import time

__all__ = ["progress_bar"]


class _Plain:
    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n = total, desc, 0
        self._last = 0.0
        self._postfix = ""
        self._draw(force=True)

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self._postfix = text

    def update(self, k: int = 1) -> None:
        self.n += k
        self._draw(force=self.n >= self.total)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        done = width * self.n // max(self.total, 1)
        sys.stderr.write(f"\r{self.desc}: [{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} {self._postfix}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class _Off:
    n = 0

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        pass

    def update(self, k: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, enabled: bool, desc: str = "Processed prompts"):
    if not enabled:
        return _Off()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Plain(total, desc)
    return tqdm(total=total, desc=desc, dynamic_ncols=True)
