"""What the agent knows: handoffs, memory facts, compaction and the startup context assembly.

Context never imports delivery: delivery runs the steps and asks context what the brain should
know, holding the fencing locks around the writes made here. What outer code (views, the admin,
the brains) may use is exported here.
"""

from __future__ import annotations

from .assembly import (
    context_text,
    context_tokens,
    run_context_load,
    run_context_text,
    summary_latest,
)
from .compaction import summary_revise
from .handoffs import (
    SECTIONS,
    handoff_correct,
    handoff_forget_line,
    handoff_latest,
    handoff_sections,
    handoff_write,
)
from .memory import memory_fact_forget, memory_fact_revise, memory_facts_of
from .recoveries import recovery_words
from .tokens import message_too_long, tokens_estimate
from .versions import versions_diff

__all__ = [
    "SECTIONS",
    "context_text",
    "context_tokens",
    "handoff_correct",
    "handoff_forget_line",
    "handoff_latest",
    "handoff_sections",
    "handoff_write",
    "memory_fact_forget",
    "memory_fact_revise",
    "memory_facts_of",
    "message_too_long",
    "recovery_words",
    "run_context_load",
    "run_context_text",
    "summary_latest",
    "summary_revise",
    "tokens_estimate",
    "versions_diff",
]
