"""The meeting-summary workload: a long transcript in, a ~300-token summary out, streamed.

The seed's workload (docs/workload.md) is meeting summaries on Qwen3-32B: about 3,000 prompt
tokens and about 300 output tokens. The transcript here is synthetic but deterministic
(seeded), so every run sends the same bytes. At ≈4 characters per token, 3,000 tokens is
≈12,000 characters of English text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4  # rough English average; the emulator and real tokenizers agree within ~20%
DEFAULT_PROMPT_TOKENS = 3000
DEFAULT_MAX_TOKENS = 300

_SPEAKERS = ("Alice", "Bo", "Chen", "Dana", "Emeka", "Farah")
_SUBJECTS = (
    "the Q3 roadmap",
    "the GPU budget",
    "the on-call rotation",
    "the latency regression",
    "the customer escalation",
    "the migration to the new cluster",
    "the autoscaler thresholds",
    "the release checklist",
)
_PHRASES = (
    "I think we should revisit {s} before Friday.",
    "My concern with {s} is that nobody owns it yet.",
    "We measured {s} last week and the numbers were not what we expected.",
    "Can we agree on a single owner for {s}?",
    "Let's not decide {s} today; we need the benchmark first.",
    "The short version is that {s} slipped by two weeks.",
    "I'd like the action items for {s} written down in the doc.",
    "Honestly {s} is blocked on the capacity review.",
)


def meeting_transcript(prompt_tokens: int = DEFAULT_PROMPT_TOKENS, seed: int = 7) -> str:
    """A deterministic meeting transcript of about ``prompt_tokens`` tokens."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    rng = random.Random(seed)
    target_chars = prompt_tokens * CHARS_PER_TOKEN
    lines: list[str] = []
    size = 0
    minute = 0
    while size < target_chars:
        speaker = rng.choice(_SPEAKERS)
        sentence = rng.choice(_PHRASES).format(s=rng.choice(_SUBJECTS))
        line = f"[{minute // 60:02d}:{minute % 60:02d}] {speaker}: {sentence}"
        lines.append(line)
        size += len(line) + 1
        minute += rng.randint(1, 3)
    return "\n".join(lines)[:target_chars]


@dataclass(frozen=True)
class Workload:
    """What each request sends: endpoint, model, prompt size and answer length."""

    model: str
    endpoint: str = "completions"  # or "chat"
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"--endpoint must be 'completions' or 'chat', got {self.endpoint!r}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.prompt_tokens < 1:
            raise ValueError(f"--prompt-tokens must be >= 1, got {self.prompt_tokens}")

    @property
    def path(self) -> str:
        return "/v1/completions" if self.endpoint == "completions" else "/v1/chat/completions"

    def body(self, transcript: str, max_tokens: int | None = None) -> dict[str, Any]:
        """The JSON request body: streaming, with usage in the last event when supported."""
        n = self.max_tokens if max_tokens is None else max_tokens
        instruction = (
            "Summarize the following meeting transcript: decisions, owners and action items."
        )
        common: dict[str, Any] = {
            "model": self.model,
            "max_tokens": n,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.endpoint == "completions":
            return {**common, "prompt": f"{instruction}\n\n{transcript}\n\nSummary:"}
        return {
            **common,
            "messages": [
                {"role": "system", "content": instruction},
                {"role": "user", "content": transcript},
            ],
        }
