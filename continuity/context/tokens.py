"""Token counting through one pluggable estimator (`CONTINUITY_TOKEN_ESTIMATOR`)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string


def chars_per_token_estimate(text: str) -> int:
    """About four characters per token, rounded up: the usual rule of thumb for English text
    with BPE tokenizers (OpenAI's documentation gives it). Nothing is downloaded; point
    CONTINUITY_TOKEN_ESTIMATOR at a real tokenizer when a brain needs exact counts."""
    return (len(text) + 3) // 4


def tokens_estimate(text: str) -> int:
    return int(import_string(settings.CONTINUITY_TOKEN_ESTIMATOR)(text))


def compaction_threshold() -> int:
    return int(settings.CONTINUITY_CONTEXT_TOKENS * settings.CONTINUITY_COMPACT_AT)
