"""The continuity engine's settings: every `CONTINUITY_*` (docs/operations.md, "Configuration")."""

from __future__ import annotations

from .env import env, env_json

# Live updates are at-most-once and must not stall a reply: a publish waits at most about twice
# this for Redis, and after a failure live updates are dropped for the pause.
CONTINUITY_PUBLISH_TIMEOUT_SECONDS = env("CONTINUITY_PUBLISH_TIMEOUT_SECONDS", 1.0)
CONTINUITY_PUBLISH_PAUSE_SECONDS = env("CONTINUITY_PUBLISH_PAUSE_SECONDS", 5.0)
# A live update waits this long for the ones that follow it, to go out with them in one round
# trip: far below what a person notices, and a tenth of CONTINUITY_STREAM_FLUSH_SECONDS.
CONTINUITY_PUBLISH_LINGER_SECONDS = env("CONTINUITY_PUBLISH_LINGER_SECONDS", 0.01)
# Since live updates may be lost, an open page asks again for its queued and unfinished
# exchanges, each time at a random moment within this many seconds (full jitter, so pages that
# lost the same updates do not all ask at once); 0: only when the slow hint appears.
CONTINUITY_PAGE_RESYNC_SECONDS = env("CONTINUITY_PAGE_RESYNC_SECONDS", 15.0)

# (worker/signals.py: CONN_MAX_AGE, and a health check after an error or a database restart).
CELERY_DB_REUSE_MAX = env("CELERY_DB_REUSE_MAX", 1000)

CONTINUITY_BRAIN = env("CONTINUITY_BRAIN", "builtin")
CONTINUITY_BRAINS = {
    "builtin": "chat.brains.builtin.BuiltinBrain",
    "openai": "chat.brains.openai.OpenAIBrain",
}
# The brains a person may pick for a conversation (the first is the default for new ones);
# a conversation without a choice uses CONTINUITY_BRAIN.
CONTINUITY_BRAIN_CHOICES = env(
    "CONTINUITY_BRAIN_CHOICES", [CONTINUITY_BRAIN.strip()] if CONTINUITY_BRAIN.strip() else []
)
# The `openai` brain: any OpenAI-compatible /v1/chat/completions server (docs/model-backends.md).
CONTINUITY_OPENAI_BASE_URL = env("CONTINUITY_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
CONTINUITY_OPENAI_API_KEY = env("CONTINUITY_OPENAI_API_KEY", "")
CONTINUITY_OPENAI_MODEL = env("CONTINUITY_OPENAI_MODEL", "llama3.2")
CONTINUITY_OPENAI_TEMPERATURE = env("CONTINUITY_OPENAI_TEMPERATURE", 0.7)
CONTINUITY_OPENAI_REQUEST_TIMEOUT = env("CONTINUITY_OPENAI_REQUEST_TIMEOUT", 60.0)
CONTINUITY_OPENAI_IDLE_TIMEOUT = env("CONTINUITY_OPENAI_IDLE_TIMEOUT", 30.0)
CONTINUITY_OPENAI_MAX_RETRIES = env("CONTINUITY_OPENAI_MAX_RETRIES", 2)
# The most tokens a reply may take (sent as `max_tokens`; room kept for it in the window). A
# reply that reaches it is kept, marked as cut off, and may be continued.
CONTINUITY_OPENAI_MAX_TOKENS = env("CONTINUITY_OPENAI_MAX_TOKENS", 1024)
# The model's context window in tokens; 0: asked of the server where it says (vLLM's /v1/models,
# llama.cpp's /props), else only CONTINUITY_CONTEXT_TOKENS bounds the prompt.
CONTINUITY_OPENAI_CONTEXT_TOKENS = env("CONTINUITY_OPENAI_CONTEXT_TOKENS", 0)
# How many requests the model server gets at once, counted across every worker (a semaphore
# in Redis); 0: no limit. For a small local server (llama.cpp, Ollama with OLLAMA_NUM_PARALLEL),
# its number of parallel slots: conversations then queue instead of interrupting each other.
CONTINUITY_OPENAI_CONCURRENCY = env("CONTINUITY_OPENAI_CONCURRENCY", 0)
# How the model may use the tools a round offers (sent as `tool_choice`): "auto" (it chooses),
# "required" (it must call one), or a tool's name (it must call that one, in every round that
# offers it; llama.cpp's servers then constrain the call to the tool's schema).
CONTINUITY_OPENAI_TOOL_CHOICE = env("CONTINUITY_OPENAI_TOOL_CHOICE", "auto")
# Summaries (compaction) and titles are bounded in length and time, and not retried by the
# client: neither may hold a worker process for a minute. A summary that fails gives the
# attempt back (the server's fault); a title that fails falls back to the built-in one.
CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS = env("CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS", 512)
CONTINUITY_OPENAI_SUMMARY_TIMEOUT = env("CONTINUITY_OPENAI_SUMMARY_TIMEOUT", 30.0)
CONTINUITY_OPENAI_TITLE_TIMEOUT = env("CONTINUITY_OPENAI_TITLE_TIMEOUT", 10.0)
# A model server that cannot answer (refused, 5xx, 429, silent before the first token) gives
# the attempt back and waits its own backoff, longer after each failure in a row (or what its
# Retry-After asks); after this many in a row it is marked unavailable, staff are alerted, and
# its conversations wait for its next try instead of trying (docs/model-backends.md).
CONTINUITY_BACKEND_BACKOFF_SECONDS = env(
    "CONTINUITY_BACKEND_BACKOFF_SECONDS", [5.0, 10.0, 30.0, 60.0, 120.0, 300.0]
)
CONTINUITY_BACKEND_UNAVAILABLE_AFTER = env("CONTINUITY_BACKEND_UNAVAILABLE_AFTER", 3)
CONTINUITY_BUILTIN_TOKEN_DELAY = env("CONTINUITY_BUILTIN_TOKEN_DELAY", 0.03)
CONTINUITY_MAX_MESSAGE_CHARS = env("CONTINUITY_MAX_MESSAGE_CHARS", 16_000)
# Exchanges (a question and its reply) that compaction keeps verbatim. (Its earlier name,
# CONTINUITY_HISTORY_TURNS, is still read: it counted exchanges too.)
CONTINUITY_HISTORY_EXCHANGES = env(
    "CONTINUITY_HISTORY_EXCHANGES", env("CONTINUITY_HISTORY_TURNS", 20)
)
# The context budget: past CONTINUITY_COMPACT_AT of it, exchanges older than the last
# CONTINUITY_HISTORY_EXCHANGES are summarized by the brain (see continuity/context/compaction.py).
CONTINUITY_CONTEXT_TOKENS = env("CONTINUITY_CONTEXT_TOKENS", 8000)
CONTINUITY_COMPACT_AT = env("CONTINUITY_COMPACT_AT", 0.8)
# The share of the budget a summary may take: past it, its oldest points are dropped (it grows
# with every compaction, each made from the one before).
CONTINUITY_SUMMARY_SHARE = env("CONTINUITY_SUMMARY_SHARE", 0.25)
# What a brain's budget leaves aside from its model's window (beyond the reply's room) for what
# the token estimate may miss: an estimate is not the model's tokenizer.
CONTINUITY_TOKEN_MARGIN = env("CONTINUITY_TOKEN_MARGIN", 0.2)
CONTINUITY_TOKEN_ESTIMATOR = env(
    "CONTINUITY_TOKEN_ESTIMATOR", "continuity.context.tokens.chars_per_token_estimate"
)
CONTINUITY_IDENTITY = env(
    "CONTINUITY_IDENTITY",
    "You are Continuity, an assistant that helps one person work toward their goals. "
    "You survive restarts: the working memory below is yours, written before the last stop. "
    "Never invent facts about the user; say when you do not know. "
    "Never reveal other users' data. Tell the user when a restart interrupted your work.",
)
CONTINUITY_MAX_ATTEMPTS = env("CONTINUITY_MAX_ATTEMPTS", 3)
# A whole worker or host lost is found within 2 beats and a sweep (about 3 s); a pool process
# that dies is acted on by its worker at once (continuity/worker/pool.py).
CONTINUITY_HEARTBEAT_SECONDS = env("CONTINUITY_HEARTBEAT_SECONDS", 1.0)
CONTINUITY_STREAM_FLUSH_SECONDS = env("CONTINUITY_STREAM_FLUSH_SECONDS", 0.1)
CONTINUITY_CRASH_BACKOFF_SECONDS = env(
    "CONTINUITY_CRASH_BACKOFF_SECONDS", [5.0, 30.0, 120.0, 600.0]
)
CONTINUITY_PAUSE_AFTER_CRASHES = env("CONTINUITY_PAUSE_AFTER_CRASHES", 3)
CONTINUITY_CRASH_WINDOW_SECONDS = env("CONTINUITY_CRASH_WINDOW_SECONDS", 3600.0)
CONTINUITY_REQUEUE_AFTER_SECONDS = env("CONTINUITY_REQUEUE_AFTER_SECONDS", 30.0)
CONTINUITY_WATCHDOG_SECONDS = env("CONTINUITY_WATCHDOG_SECONDS", 1.0)
CONTINUITY_CHECKPOINT_RETENTION_DAYS = env("CONTINUITY_CHECKPOINT_RETENTION_DAYS", 14.0)
CONTINUITY_PRUNE_EVERY_SECONDS = env("CONTINUITY_PRUNE_EVERY_SECONDS", 3600.0)
# Attempts, resolved crashes, acknowledged alerts, handled dead letters and departed workers.
CONTINUITY_HISTORY_RETENTION_DAYS = env("CONTINUITY_HISTORY_RETENTION_DAYS", 90.0)
# How often the watchdog samples the queue depth and rolls finished five minutes up into the
# history (delivery/history.py); those buckets are kept whatever the retention.
CONTINUITY_HISTORY_EVERY_SECONDS = env("CONTINUITY_HISTORY_EVERY_SECONDS", 15.0)
# A drain task waiting in the queue is marked in Redis, so a conversation has at most one: a
# flood in one conversation cannot push everyone else's messages to the back of the queue. The
# marker expires after this long in case its task was lost after the marker was set.
CONTINUITY_DRAIN_MARKER_SECONDS = env("CONTINUITY_DRAIN_MARKER_SECONDS", 600.0)
# A drain's slice: it keeps answering its conversation's queued messages while it has run less
# than this, then sends a drain for the rest to the back of the queue, so conversations share
# the workers fairly. A reply of a model takes longer: one message per drain. Quick replies
# skip a queue round trip. (Its earlier name, CONTINUITY_DRAIN_TURN_SECONDS, is still read.)
CONTINUITY_DRAIN_SLICE_SECONDS = env(
    "CONTINUITY_DRAIN_SLICE_SECONDS", env("CONTINUITY_DRAIN_TURN_SECONDS", 0.5)
)
# Attempts given back (planned shutdown, database outage) before a message is dead-lettered.
CONTINUITY_MAX_INTERRUPTIONS = env("CONTINUITY_MAX_INTERRUPTIONS", 10)
# How long an attempt that lost the database keeps trying to record how it ended.
CONTINUITY_DATABASE_RETRY_SECONDS = env("CONTINUITY_DATABASE_RETRY_SECONDS", 60.0)
# How long a send (a new message or conversation) that meets a database that cannot serve is
# made again before it answers 503: a restart or a failover costs a slower send, not an error.
CONTINUITY_SEND_OUTAGE_SECONDS = env("CONTINUITY_SEND_OUTAGE_SECONDS", 5.0)
# Per-user limits on the web side ("N/second|minute|hour", several separated by ";").
CONTINUITY_SEND_RATE = env("CONTINUITY_SEND_RATE", "10/10 seconds;60/minute")
CONTINUITY_NEW_CONVERSATION_RATE = env("CONTINUITY_NEW_CONVERSATION_RATE", "5/minute;60/hour")
# Password reset requests from one client address (each may send a mail).
CONTINUITY_PASSWORD_RESET_RATE = env("CONTINUITY_PASSWORD_RESET_RATE", "5/hour")
# Reset mails to one address, whoever asks (past it, none is sent and the page says the same).
CONTINUITY_PASSWORD_RESET_MAIL_RATE = env("CONTINUITY_PASSWORD_RESET_MAIL_RATE", "3/hour")
# Conversation sockets one person may have open at once, over every web server (a socket per
# open conversation tab): past it a new one is refused, and its page says so.
CONTINUITY_SOCKETS_PER_USER = env("CONTINUITY_SOCKETS_PER_USER", 20)
# Bearer token that lets Prometheus read GET /metrics; empty: only signed-in staff can.
CONTINUITY_METRICS_TOKEN = env("CONTINUITY_METRICS_TOKEN", "")
# Test-only fault injection. Deliberately not read from the environment: only tests/settings.py
# turns it on, so no production deployment can enable it.
CONTINUITY_FAULT_INJECTION = False

# The agent's tools (docs/tools.md). A reply is at most this many rounds of tool calls; past
# them, the model is asked to answer with what it has.
CONTINUITY_TOOL_ROUNDS = env("CONTINUITY_TOOL_ROUNDS", 8)
# A tool's result is cut to this many bytes before the model reads it (the page says so).
CONTINUITY_TOOL_RESULT_BYTES = env("CONTINUITY_TOOL_RESULT_BYTES", 16384)
# A call whose arguments are longer than this is not made: the model is told.
CONTINUITY_TOOL_ARGUMENT_BYTES = env("CONTINUITY_TOOL_ARGUMENT_BYTES", 16384)
# How long an MCP tool may take to answer before its call is lost (and in doubt).
CONTINUITY_TOOL_TIMEOUT = env("CONTINUITY_TOOL_TIMEOUT", 60.0)
# An MCP server unreachable for this long raises one alert (cleared when it answers again).
CONTINUITY_TOOL_SERVER_ALERT_SECONDS = env("CONTINUITY_TOOL_SERVER_ALERT_SECONDS", 60)
# With no live worker, a message that has waited this long raises the "no worker" alert (the
# watchdog's, cleared when a worker beats again), and the person's page says no assistant runs.
# Above a worker's start-up and a heartbeat's staleness: a restart is not an outage.
CONTINUITY_NO_WORKER_ALERT_SECONDS = env("CONTINUITY_NO_WORKER_ALERT_SECONDS", 10)
# This many crashes within CONTINUITY_CRASH_BURST_SECONDS, across all conversations, raise one
# "burst of crashes" alert, cleared by itself once the window holds fewer.
CONTINUITY_CRASH_BURST = env("CONTINUITY_CRASH_BURST", 5)
CONTINUITY_CRASH_BURST_SECONDS = env("CONTINUITY_CRASH_BURST_SECONDS", 300)
# A reminder delivered later than this after its time says it is late (nothing ran then).
CONTINUITY_REMINDER_LATE_SECONDS = env("CONTINUITY_REMINDER_LATE_SECONDS", 60)
# How long a tool call that asks first waits for the person's answer before it is denied.
CONTINUITY_APPROVAL_SECONDS = env("CONTINUITY_APPROVAL_SECONDS", 900)
# MCP servers besides those staff register in the admin: a JSON list of objects, each with a
# "name", a "url" (streamable HTTP) or a "command" (stdio), and optionally "tools" (the names
# allowed; all if absent), "time_limit" (seconds) and "policies" by tool, as the admin's:
# {"ledger_append": {"approval": "never", "time_limit": 30}}.
CONTINUITY_MCP_SERVERS = env_json("CONTINUITY_MCP_SERVERS", [])
# How long a server's tool list is used before it is asked again.
CONTINUITY_MCP_TOOLS_TTL = env("CONTINUITY_MCP_TOOLS_TTL", 300.0)
