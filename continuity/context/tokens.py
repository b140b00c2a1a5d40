"""Token counting through one pluggable estimator (`CONTINUITY_TOKEN_ESTIMATOR`)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from ..brains import brain_class


def chars_per_token_estimate(text: str) -> int:
    """About four characters per token, rounded up: the usual rule of thumb for English text
    with BPE tokenizers (OpenAI's documentation gives it). Nothing is downloaded; point
    CONTINUITY_TOKEN_ESTIMATOR at a real tokenizer when a brain needs exact counts."""
    return (len(text) + 3) // 4


def tokens_estimate(text: str) -> int:
    return int(import_string(settings.CONTINUITY_TOKEN_ESTIMATOR)(text))


def compaction_threshold(budget: int | None = None) -> int:
    return int((budget or settings.CONTINUITY_CONTEXT_TOKENS) * settings.CONTINUITY_COMPACT_AT)


def context_room(brain: object) -> int:
    """The tokens the brain's prompt may take, as its model counts them:
    CONTINUITY_CONTEXT_TOKENS, or less when the brain knows its model's window
    (`context_window()`), less the room kept for its reply (`reply_tokens()`), less
    CONTINUITY_TOKEN_MARGIN for what a count may miss (the chat template's own tokens, an
    estimate's error)."""
    budget = settings.CONTINUITY_CONTEXT_TOKENS
    window = brain.context_window() if hasattr(brain, "context_window") else None
    if window:
        reply = brain.reply_tokens() if hasattr(brain, "reply_tokens") else 0
        budget = min(budget, int((window - reply) * (1 - settings.CONTINUITY_TOKEN_MARGIN)))
    return max(budget, 1)


def context_budget(brain: object) -> int:
    """`context_room` in estimated tokens, which compaction counts: less where the brain has
    learned that its model's tokens are more than the estimate says (`token_scale()`)."""
    scale = brain.token_scale() if hasattr(brain, "token_scale") else 1.0
    return max(int(context_room(brain) / scale), 1)


def message_too_long(*, brain_name: str, text: str) -> str:
    """Why `text` cannot be sent to this brain at all (its model's window could not hold it,
    whatever was left out of the prompt), in words for the person; empty when it can. Said
    before the message is stored, so it is refused with the text kept, never dead-lettered
    after the fact. Counted by the model's own tokenizer where the brain has one
    (`tokens_count`)."""
    brain = brain_class(brain_name)  # its class: no client is made for a web request
    if hasattr(brain, "window_discover"):
        brain.window_discover()  # once per process, or once a minute while the server is mute
    window = brain.context_window() if hasattr(brain, "context_window") else None
    if not window:
        return ""
    room, estimate = context_room(brain), tokens_estimate(text)
    scale = brain.token_scale() if hasattr(brain, "token_scale") else 1.0
    if estimate * scale * 2 <= room:
        return ""  # far from it: the model server is not asked (a slow one would slow sends)
    tokens = brain.tokens_count(text) if hasattr(brain, "tokens_count") else estimate
    if hasattr(brain, "scale_learn") and estimate:
        brain.scale_learn(tokens / estimate)  # the next sends' estimate is nearer
    if tokens <= room:
        return ""
    reply = brain.reply_tokens() if hasattr(brain, "reply_tokens") else 0
    return (
        f"This message is about {tokens:,} tokens; the model's window is {window:,}, with "
        f"{reply:,} kept for its reply. Shorten it or send it in parts: your text is still here."
    )
