"""tqdm progress bars for long runs (stderr), one per level."""

from __future__ import annotations

from collections.abc import Callable

from inflight.measure.records import RequestRecord


class Bars:
    """A ``ProgressFactory``: ``bars(label, total)`` opens a bar and returns its callback."""

    def __init__(self, prefix: str = "", enabled: bool = True) -> None:
        self.prefix = prefix
        self.enabled = enabled
        self._open: object | None = None

    def __call__(self, label: str, total: int | None) -> Callable[[RequestRecord], None]:
        self.close()
        if not self.enabled:
            return lambda _r: None
        from tqdm import tqdm

        bar = tqdm(
            total=total,
            desc=f"{self.prefix}{label}",
            unit="req",
            mininterval=1.0,
            leave=True,
            dynamic_ncols=True,
        )
        self._open = bar
        errors = 0

        def done(record: RequestRecord) -> None:
            nonlocal errors
            if not record.ok:
                errors += 1
                bar.set_postfix(errors=errors, refresh=False)
            bar.update(1)

        return done

    def close(self) -> None:
        if self._open is not None:
            self._open.close()  # type: ignore[attr-defined]
            self._open = None
