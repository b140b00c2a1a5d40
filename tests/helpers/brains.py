"""A brain for fault tests: the built-in brain plus triggers that crash or fail on purpose."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import time
from collections.abc import Generator

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat.brains.builtin import BuiltinBrain
from continuity.brains import Context, ToolUse, Work
from continuity.errors import PermanentError

KILL_ALWAYS = "[[kill-worker]]"  # SIGKILLs its own process mid-reply, on every attempt
KILL_FIRST_ATTEMPT = "[[kill-once]]"  # SIGKILLs its own process mid-reply, on attempt 1 only
KILL_TWICE = "[[kill-twice]]"  # SIGKILLs its own process mid-reply, on attempts 1 and 2
RAISE = "[[raise]]"  # a Python exception on every attempt
INVALID = "[[invalid]]"  # an error no retry can fix
SLEEP = "[[sleep]]"  # sleeps far longer than the soft time limit
HANG = "[[hang]]"  # hangs and swallows the soft time limit: only the hard limit ends it
# Calls a tool in the first round: [[tool ledger_append {"entry": "x"}]]; several in one message
# are parallel calls. The next round says each result.
TOOL = re.compile(r"\[\[tool (?P<name>[\w-]+)(?: (?P<arguments>\{.*?\}))?\]\]")


def tool_trigger(tool: str, /, **arguments: object) -> str:
    return f"[[tool {tool} {json.dumps(arguments)}]]"


class FaultyBrain(BuiltinBrain):
    def __init__(self) -> None:
        if not settings.CONTINUITY_FAULT_INJECTION:
            raise ImproperlyConfigured("FaultyBrain exists for the test suite only.")

    def plan(self, context: Context) -> dict:
        if INVALID in context.text:
            raise PermanentError("The message asks for something that can never succeed.")
        return super().plan(context)

    def respond(self, context: Context, plan: dict, work: Work) -> Generator[str, None, object]:
        if asked := list(TOOL.finditer(context.text)):
            return (yield from self.tools_respond(asked, work))
        tokens = super().respond(context, plan, work)
        for index in itertools.count():
            try:
                token = next(tokens)
            except StopIteration as end:
                return end.value  # the round's tool calls, if any
            if index == 3:
                if (
                    KILL_ALWAYS in context.text
                    or (KILL_FIRST_ATTEMPT in context.text and context.attempt == 1)
                    or (KILL_TWICE in context.text and context.attempt <= 2)
                ):
                    os.kill(os.getpid(), signal.SIGKILL)
                if RAISE in context.text:
                    raise RuntimeError("The brain tripped over this message.")
                if SLEEP in context.text:
                    time.sleep(3600)
                if HANG in context.text:
                    hang_forever()
            yield token

    def tools_respond(self, asked: list[re.Match], work: Work) -> Generator[str, None, object]:
        if not work.rounds and work.tools:
            return [
                ToolUse(f"call_{index}", match["name"], json.loads(match["arguments"] or "{}"))
                for index, match in enumerate(asked, 1)
            ]
        said = [
            f"{call.name}: {done.results[call.call_id]}"
            for done in work.rounds
            for call in done.calls
        ]
        yield from ["Tools said:", *[f"\n- {line}" for line in said or ["nothing"]]]
        return None


def hang_forever() -> None:
    """A hung call that swallows even the soft time limit's exception."""
    while True:
        with contextlib.suppress(BaseException):
            time.sleep(3600)
