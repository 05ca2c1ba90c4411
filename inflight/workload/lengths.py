"""Token-length distributions for open-loop requests: ``--prompt-tokens`` and ``--max-tokens``.

Pure: no I/O, no clock; randomness comes from a ``random.Random`` the caller seeds.

Forms:

* ``N``: always N tokens;
* ``lognormal:MEAN:SIGMA``: MEAN is the distribution's mean in tokens and SIGMA the standard
  deviation of the underlying normal, so ``mu = ln(MEAN) − SIGMA² / 2``. Example:
  ``lognormal:3000:0.6`` has mu = ln 3000 − 0.18 = 7.826, median e^mu = 2,506 tokens and
  mean 3,000. SIGMA is limited to 0..3 (0 is a constant MEAN; at 3 the median is 1 % of
  the mean, already far wider than any request mix);
* ``uniform:A:B``: an integer drawn uniformly from A..B inclusive;
* ``mix:SHARE:SHORT+LONG``: a mixed-length workload, each draw from LONG with probability
  SHARE (0..1), else from SHORT, both of the forms above. Example:
  ``mix:0.3:uniform:100:500+uniform:2000:4000`` (30 % long prompts, mean 1,110 tokens):
  request slots read it as uniform while a KV cache holds a few long ones or many short
  ones (docs/capacity.md).

Samples are integers in [1, MAX_TOKENS_PER_SAMPLE]: a lognormal draw is rounded to the
nearest integer, then clamped into that range. The cap, 16,384, keeps a prompt plus its
output within the reference replica's 32,768-token context (``max_model_len``), so a rare
long draw is not an HTTP 400 that no autoscaler could avoid. For ``lognormal:3000:0.6`` it
cuts 0.09 % of draws (3.1 σ); ``N`` and ``uniform`` values above it are refused at parsing.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

MAX_TOKENS_PER_SAMPLE = 16384
_FORMS = "N, lognormal:MEAN:SIGMA or uniform:A:B"  # (and mix:SHARE:SHORT+LONG of them)


class LengthError(ValueError):
    """A bad length value; the message names the flag and the bad text."""


@dataclass(frozen=True)
class LengthDist:
    """One length distribution. ``a``/``b``: N and N, MEAN and SIGMA, or A and B; for
    ``mix``, ``a`` is LONG's share and ``parts`` (SHORT, LONG)."""

    kind: Literal["constant", "lognormal", "uniform", "mix"]
    a: float
    b: float
    parts: tuple[LengthDist, ...] = ()

    def sample(self, rng: random.Random) -> int:
        """One length in tokens, an int in [1, MAX_TOKENS_PER_SAMPLE]."""
        if self.kind == "mix":  # one draw picks the part, the part draws the length
            short, long = self.parts
            return (long if rng.random() < self.a else short).sample(rng)
        if self.kind == "constant":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        mu = math.log(self.a) - self.b * self.b / 2.0
        drawn = rng.lognormvariate(mu, self.b)
        return min(MAX_TOKENS_PER_SAMPLE, max(1, math.floor(drawn + 0.5)))

    @property
    def mean_tokens(self) -> float:
        """The mean before rounding and clamping (MEAN for lognormal, (A+B)/2 for uniform)."""
        if self.kind == "mix":
            short, long = self.parts
            return (1.0 - self.a) * short.mean_tokens + self.a * long.mean_tokens
        return self.a if self.kind != "uniform" else (self.a + self.b) / 2.0

    @property
    def text(self) -> str:
        """The distribution as a flag value (parses back to an equal distribution)."""
        if self.kind == "mix":
            return f"mix:{self.a:g}:{self.parts[0].text}+{self.parts[1].text}"
        if self.kind == "constant":
            return str(int(self.a))
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}:{int(self.b)}"
        return f"lognormal:{self.a:g}:{self.b:g}"


def _int(text: str, flag: str, whole: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LengthError(f"{flag}: {text!r} is not an integer (in {whole!r})") from None
    if not 1 <= value <= MAX_TOKENS_PER_SAMPLE:
        raise LengthError(
            f"{flag}: {value} is out of range 1..{MAX_TOKENS_PER_SAMPLE} (in {whole!r})"
        )
    return value


def _float(text: str, flag: str, whole: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LengthError(f"{flag}: {text!r} is not a number (in {whole!r})") from None
    if not math.isfinite(value):
        raise LengthError(f"{flag}: {text!r} is not a finite number (in {whole!r})")
    return value


def parse_length(text: str, flag: str) -> LengthDist:
    """Parse ``N``, ``lognormal:MEAN:SIGMA``, ``uniform:A:B`` or ``mix:SHARE:SHORT+LONG``;
    errors name ``flag``.

    >>> parse_length("lognormal:300:0.5", "--max-tokens").mean_tokens
    300.0
    >>> parse_length("mix:0.3:uniform:100:500+uniform:2000:4000", "--prompt-tokens").mean_tokens
    1110.0
    """
    whole = text
    if text.strip().startswith("mix:"):
        return _parse_mix(text.strip(), flag)
    parts = text.strip().split(":")
    if len(parts) == 1:
        n = _int(parts[0], flag, whole)
        return LengthDist("constant", n, n)
    kind, args = parts[0], parts[1:]
    if kind not in ("lognormal", "uniform") or len(args) != 2:
        raise LengthError(f"{flag}: expected {_FORMS}, got {whole!r}")
    if kind == "uniform":
        lo, hi = _int(args[0], flag, whole), _int(args[1], flag, whole)
        if lo > hi:
            raise LengthError(f"{flag}: uniform:A:B needs A <= B, got {whole!r}")
        return LengthDist("uniform", lo, hi)
    mean, sigma = _float(args[0], flag, whole), _float(args[1], flag, whole)
    if not 1 <= mean <= MAX_TOKENS_PER_SAMPLE:
        raise LengthError(
            f"{flag}: lognormal MEAN must be in 1..{MAX_TOKENS_PER_SAMPLE}, got {whole!r}"
        )
    if not 0 <= sigma <= 3:
        raise LengthError(f"{flag}: lognormal SIGMA must be in 0..3, got {whole!r}")
    return LengthDist("lognormal", mean, sigma)


def _parse_mix(whole: str, flag: str) -> LengthDist:
    share_text, sep, rest = whole[len("mix:") :].partition(":")
    parts = rest.split("+")
    if not sep or len(parts) != 2:
        raise LengthError(f"{flag}: expected mix:SHARE:SHORT+LONG, got {whole!r}")
    share = _float(share_text, flag, whole)
    if not 0 <= share <= 1:
        raise LengthError(f"{flag}: mix SHARE must be in 0..1, got {whole!r}")
    if any(p.strip().startswith("mix:") for p in parts):
        raise LengthError(f"{flag}: a mix's parts cannot be mixes, got {whole!r}")
    short, long = (parse_length(p, flag) for p in parts)
    return LengthDist("mix", share, 0.0, (short, long))
