"""The built-in brain: offline and deterministic, yet it listens.

It learns stated facts (name, goal, likes, notes to remember), keeps a goal with a small plan,
answers questions about what it knows, and recaps the conversation ("where were we?").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from django.conf import settings
from django.utils import timezone

from continuity.brains import Context, Turn

NAME = re.compile(
    r"\b(?i:my name is|call me|i am|i'm)\s+(?P<name>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)"
)
GOAL = re.compile(
    r"\b(?:my goal is(?: to)?|i want to|i'd like to|i would like to|i need to|i'm trying to|"
    r"i am trying to|help me)\s+(?P<goal>[^.!?\n]+)",
    re.IGNORECASE,
)
LIKE = re.compile(r"\bi (?:really )?(?:like|love|enjoy)\s+(?P<thing>[^.!?\n]+)", re.IGNORECASE)
REMEMBER = re.compile(r"\bremember(?: that)?\s+(?P<note>[^.!?\n]+)", re.IGNORECASE)
ASK_NAME = re.compile(r"\b(?:what(?:'s| is) my name|who am i|do you know my name)\b", re.I)
ASK_GOAL = re.compile(
    r"\b(?:what(?:'s| is) my goal|what am i (?:working on|trying to do)|what's the plan|"
    r"what is the plan)\b",
    re.IGNORECASE,
)
ASK_MEMORY = re.compile(
    r"\b(?:what do you (?:remember|know)(?: about me)?|what have you learned)\b", re.I
)
ASK_RECAP = re.compile(
    r"\b(?:where were we|recap|summari[sz]e|what were we (?:doing|talking))", re.I
)
TITLE_WORDS = 8
GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening))\b", re.I)
THANKS = re.compile(r"\b(?:thanks|thank you|cheers)\b", re.IGNORECASE)
HELP = re.compile(r"^\s*(?:help|\?|what can you do)\s*\??\s*$", re.IGNORECASE)
# "I'm tired" must not become a name: a name needs a capital letter or an explicit phrase.
EXPLICIT_NAME = re.compile(r"\b(?:my name is|call me)\b", re.IGNORECASE)
TOKEN = re.compile(r"\S+\s*|\s+")
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# What the person says about themselves, said back to them: "my knee hurts" -> "your knee hurts".
# Longer forms first, so "I'm" is not read as "I" followed by "'m".
REFLECTIONS = {
    "i'm": "you're",
    "i am": "you are",
    "i was": "you were",
    "i've": "you've",
    "i'd": "you'd",
    "i'll": "you'll",
    "myself": "yourself",
    "mine": "yours",
    "my": "your",
    "me": "you",
    "i": "you",
}
FIRST_PERSON = re.compile(
    r"\b(?:" + "|".join(word.replace(" ", r"\s+") for word in REFLECTIONS) + r")\b(?!')",
    re.IGNORECASE,
)


def clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split()).strip(" ,;:")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def reflect(text: str) -> str:
    """Say back in the second person what was said in the first, whole words only.

    The result is read inside a sentence ("I'll remember that …"), so "I" becomes "you"; other
    words keep a capital they had mid-text ("… than My Fair Lady" is a title), and shouting
    stays shouting."""

    def swap(match: re.Match) -> str:
        said = match.group(0)
        spoken = REFLECTIONS[" ".join(said.lower().split())]
        if said.isupper() and len(said) > 1:
            return spoken.upper()
        if said[0].isupper() and match.start() > 0 and not said.lower().startswith("i"):
            return spoken[0].upper() + spoken[1:]
        return spoken

    return FIRST_PERSON.sub(swap, text.replace("\u2019", "'"))


def goal_plan(goal: str) -> list[str]:
    return [
        f"Say what “{goal}” looks like when it is done",
        "Split it into three small tasks you can finish in a day each",
        "Do the first task and tell me how it went",
    ]


class BuiltinBrain:
    @classmethod
    def label(cls) -> str:
        return "Built-in assistant (rules, no model)"

    def plan(self, context: Context) -> dict:
        text = context.text
        facts = self.facts_in(text)
        intent = self.intent_of(text, facts)
        plan: dict = {"intent": intent, "facts": facts}
        if "goal" in facts:
            plan["steps"] = goal_plan(facts["goal"])
        return plan

    def respond(self, context: Context, plan: dict) -> Iterator[str]:
        delay = settings.CONTINUITY_BUILTIN_TOKEN_DELAY
        for token in TOKEN.findall(self.reply_text(context, plan)):
            if delay:
                time.sleep(delay)
            yield token

    def remember(self, context: Context, plan: dict, reply: str) -> dict[str, str]:
        return plan["facts"]

    def facts_in(self, text: str) -> dict[str, str]:
        facts: dict[str, str] = {}
        if (match := NAME.search(text)) and (
            EXPLICIT_NAME.search(match.group(0)) or match.group("name")[0].isupper()
        ):
            facts["name"] = match.group("name").strip().title()
        if match := GOAL.search(text):
            facts["goal"] = clip(match.group("goal"))
        if match := LIKE.search(text):
            facts["likes"] = clip(match.group("thing"))
        if (match := REMEMBER.search(text)) and not self.asks_about_memory(text, match):
            facts["note"] = clip(reflect(match.group("note")))
        return facts

    def asks_about_memory(self, text: str, match: re.Match) -> bool:
        """Whether the "remember" is a question ("what do you remember about me?", "do you
        remember my name?"), which is not something to remember."""
        return bool(ASK_MEMORY.search(text)) or text[match.end() :].lstrip().startswith("?")

    def intent_of(self, text: str, facts: dict[str, str]) -> str:
        for intent, pattern in (
            ("ask_name", ASK_NAME),
            ("ask_goal", ASK_GOAL),
            ("ask_memory", ASK_MEMORY),
            ("recap", ASK_RECAP),
            ("help", HELP),
        ):
            if pattern.search(text):
                return intent
        if facts:
            return "learn"
        if GREETING.search(text):
            return "greet"
        if THANKS.search(text):
            return "thanks"
        return "discuss"

    def reply_text(self, context: Context, plan: dict) -> str:
        known = {**context.facts, **plan["facts"]}
        name = known.get("name")
        handler = getattr(self, f"reply_{plan['intent']}")
        reply = handler(context=context, plan=plan, known=known, name=name)
        if context.recovery is not None:
            return f"{self.recovery_sentence(context)}\n\n{reply}"
        return reply

    def recovery_sentence(self, context: Context) -> str:
        """One sentence on the restart and what this reply continues with."""
        recovery = context.recovery
        restored = "our conversation and what I remember about you"
        if context.handoff is not None:
            restored = "my notes on where we were"
        return (
            f"(I restarted after {recovery.label} and restored {restored}; "
            f"continuing with your message “{clip(context.text, 60)}”.)"
        )

    def reply_ask_name(self, *, name: str | None, **_) -> str:
        if name:
            return f"Your name is **{name}**."
        return "You haven't told me your name yet. Say “my name is …” and I'll remember it."

    def reply_ask_goal(self, *, known: dict, **_) -> str:
        goal = known.get("goal")
        if not goal:
            return "We haven't set a goal yet. Tell me “my goal is …” and I'll draft a plan."
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(goal_plan(goal), 1))
        return f"Your goal is **{goal}**. The plan:\n\n{steps}"

    def reply_ask_memory(self, *, context: Context, known: dict, **_) -> str:
        if not known and not context.summary:
            return "I don't know anything about you yet. Tell me your name or a goal."
        lines = "\n".join(f"- **{key}**: {value}" for key, value in sorted(known.items()))
        reply = f"Here is what I remember:\n\n{lines}" if known else ""
        if context.summary:
            # Compacted turns left the prompt; what the user stated in them is in the summary.
            earlier = f"From earlier in our conversation:\n\n{context.summary}"
            reply = f"{reply}\n\n{earlier}" if reply else earlier
        return reply

    def reply_recap(self, *, context: Context, known: dict, name: str | None, **_) -> str:
        asked = [turn.text for turn in context.history if turn.role == "user"]
        note = context.handoff
        if not asked and not note:
            return "This is the start of our conversation, so there is nothing to recap yet."
        lines = [f"Here is where we were{', ' + name if name else ''}:", ""]
        lines += [f"- You said: “{clip(text, 80)}”" for text in asked[-3:]]
        if goal := known.get("goal"):
            lines += ["", f"Your goal is **{goal}**; next step: {goal_plan(goal)[0].lower()}."]
        if note and note.next_steps:
            # The handoff is the working memory staff can correct: its next step wins.
            written = timezone.localtime(note.written_at)
            lines += ["", f"Next step (from the handoff of {written:%H:%M}): "
                      f"{note.next_steps[0]}"]  # fmt: skip
        return "\n".join(lines)

    def reply_help(self, **_) -> str:
        return (
            "I'm the built-in assistant. I remember what you tell me about yourself "
            "(“my name is …”, “my goal is …”, “remember that …”), keep a plan for your goal, "
            "and answer “where were we?” with a recap — even after a restart."
        )

    def reply_learn(self, *, plan: dict, name: str | None, **_) -> str:
        facts = plan["facts"]
        parts = []
        if "name" in facts:
            parts.append(f"Nice to meet you, **{facts['name']}**! I'll remember your name.")
        if "goal" in facts:
            steps = "\n".join(f"{i}. {s}" for i, s in enumerate(plan["steps"], 1))
            parts.append(f"Your goal: **{facts['goal']}**. Here's a plan:\n\n{steps}")
        if "likes" in facts:
            parts.append(f"Noted that you like {facts['likes']}.")
        if "note" in facts:
            parts.append(f"I'll remember that {facts['note']}.")
        return "\n\n".join(parts)

    def reply_greet(self, *, name: str | None, known: dict, **_) -> str:
        hello = f"Hello, {name}!" if name else "Hello!"
        if goal := known.get("goal"):
            return f"{hello} Shall we continue with your goal, **{goal}**?"
        return f"{hello} What would you like to work on?"

    def reply_thanks(self, *, name: str | None, **_) -> str:
        return f"You're welcome{', ' + name if name else ''}."

    def reply_discuss(self, *, context: Context, known: dict, **_) -> str:
        said = clip(context.text, 80)
        turns = sum(1 for turn in context.history if turn.role == "user") + 1
        reply = f"You said: “{said}”. That's message {turns} of this conversation."
        if goal := known.get("goal"):
            return f"{reply} How does it move your goal, **{goal}**, forward?"
        return f"{reply} Tell me your goal and I'll help you plan it."

    def task_state(self, context: Context, plan: dict, reply: str) -> dict | None:
        """Changed only when the turn stated something (a name, a goal, a like, a note)."""
        facts = plan.get("facts") or {}
        if not facts:
            return None
        known = {**context.facts, **facts}
        note = context.handoff
        goal = known.get("goal")
        critical = [f"{key}: {value}" for key, value in sorted(known.items()) if key != "goal"]
        if note:  # keep what staff (or an earlier turn) added beyond the facts
            critical += [line for line in note.critical_context if line.split(":")[0] not in known]
        steps = plan.get("steps") or (note.next_steps if note else None)
        decisions = list(note.decisions) if note else []
        if "goal" in facts:
            decisions.append(f"Drafted a three-step plan for “{facts['goal']}”")
        return {
            "current_state": f"Working on: {goal}" if goal else "No goal set yet.",
            "critical_context": critical,
            "next_steps": steps or (goal_plan(goal) if goal else []),
            "decisions": decisions,
        }

    def title(self, context: Context, reply: str) -> str:
        """The goal when one was stated; else the first sentence, without a greeting, at most
        TITLE_WORDS words."""
        if goal := self.facts_in(context.text).get("goal"):
            return goal[0].upper() + goal[1:]
        text = GREETING.sub("", context.text).lstrip(" ,!.-")
        sentence = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0].rstrip(".!")
        words = sentence.split()
        if not words:
            return context.text
        title = " ".join(words[:TITLE_WORDS]) + ("…" if len(words) > TITLE_WORDS else "")
        return title[0].upper() + title[1:]

    def summarize(self, turns: list[Turn], previous_summary: str) -> str:
        """Extractive and deterministic: every sentence in which the user stated a fact
        (name, goal, like, "remember …"), word for word, after the previous summary's."""
        lines = [line for line in previous_summary.splitlines() if line.startswith("- ")]
        for turn in turns:
            if turn.role != "user":
                continue
            for sentence in SENTENCE.split(turn.text):
                line = f"- You said: “{' '.join(sentence.split())}”"
                if self.facts_in(sentence) and line not in lines:
                    lines.append(line)
        return "\n".join(lines) or "(Nothing you stated needed keeping.)"
