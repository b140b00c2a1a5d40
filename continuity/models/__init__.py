"""The continuity engine's records, one module per part of the story (import them from here):
`conversations` (a conversation, its questions and replies), `attempts` (each run on a
message, its checkpoints and reply chunks), `context` (what an attempt's context is made of,
and what a resumed one recovered), `operations` (what staff watch and act on) and `tools`
(what the agent did to the world, and the MCP servers it may call)."""

from .attempts import Checkpoint, ReplyChunk, Run
from .context import (
    Handoff,
    MemoryFact,
    MemoryFactQuerySet,
    Recovery,
    RunContext,
    Summary,
    handoff_markdown,
    sections_lines,
)
from .conversations import (
    ANSWERED_QUESTION,
    SHOWN,
    WAITING,
    Conversation,
    Message,
    MessageQuerySet,
)
from .operations import Alert, CrashRecord, DeadLetter, HistoryBucket, StaffAction, Worker
from .reminders import Reminder
from .tools import (
    TOOL_OUTCOMES,
    McpServer,
    ToolAllowance,
    ToolCall,
    ToolPolicy,
    ToolServerStatus,
)

__all__ = [
    "ANSWERED_QUESTION",
    "SHOWN",
    "WAITING",
    "Alert",
    "Checkpoint",
    "Conversation",
    "CrashRecord",
    "DeadLetter",
    "Handoff",
    "HistoryBucket",
    "MemoryFact",
    "McpServer",
    "MemoryFactQuerySet",
    "Message",
    "MessageQuerySet",
    "Recovery",
    "Reminder",
    "ReplyChunk",
    "Run",
    "RunContext",
    "StaffAction",
    "Summary",
    "TOOL_OUTCOMES",
    "ToolAllowance",
    "ToolCall",
    "ToolPolicy",
    "ToolServerStatus",
    "Worker",
    "handoff_markdown",
    "sections_lines",
]
