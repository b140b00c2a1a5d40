"""The built-in brain: offline and deterministic, yet it listens.

Two scopes, kept apart. What a person states about themselves (their name, what they like, what
they ask to be remembered) is theirs, shared by all their conversations (memory facts). A goal
belongs to the conversation it was stated in: it lives in that conversation's handoff ("Working
on: …", with its plan as the next steps), never in the person's memory, so "where were we?"
in one conversation speaks of that one only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator

from django.conf import settings

from continuity.brains import Context, ToolUse, Turn, Work
from continuity.words import clip

# Only the explicit forms: "I'm Tired of this bug" states a mood, not a name.
NAME = re.compile(r"\b(?i:my name is|call me)\s+(?P<name>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)")
GOAL = re.compile(
    r"\b(?:my goal is(?: to)?|i want to|i'd like to|i would like to|i need to|i'm trying to|"
    r"i am trying to|help me)\s+(?P<goal>[^.!?\n]+)",
    re.IGNORECASE,
)
# Where a goal's sentence goes on to something else: "…the migration, and I like tea".
ANOTHER_CLAUSE = re.compile(r",?\s+(?:and|but)\s+(?:i|i'm|my)\b", re.IGNORECASE)
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
# Asking for a tool: a sum ("what is 17 × 23?"), what was said elsewhere, forgetting a fact.
CALCULATION = re.compile(
    r"\b(?:what(?:'s| is)|calculate|compute)\s+(?P<expression>[-+*/×÷^().\d\s]*\d\s*"
    r"[-+*/×÷^]\s*[-+*/×÷^().\d\s]*\d[\s)]*)",
    re.IGNORECASE,
)
ASK_SEARCH = re.compile(
    r"\bwhat did i (?:say|tell you|write|mention) about\s+(?P<topic>.+?)"
    r"(?:\s+in (?:my|our|the) other (?:chats|conversations))?\s*[?.!]*\s*$",
    re.IGNORECASE,
)
FORGET = re.compile(
    r"^\s*(?:please\s+)?forget (?:that |about |my )?(?P<what>[^.!?\n]+)", re.IGNORECASE
)
# "remind me in 10 minutes to stretch", "remind me tomorrow at 9 to call Ada", "remind me to
# water the plants at 18:30".
REMIND = re.compile(r"\bremind me\b(?P<rest>[^\n]*)", re.IGNORECASE)
REMIND_IN = re.compile(
    r"\bin (?P<count>\d+|an?|one|two|three|five|ten|fifteen|twenty|thirty) "
    r"(?P<unit>sec(?:ond)?s?|min(?:ute)?s?|h(?:ou)?rs?|hours?|days?)\b",
    re.IGNORECASE,
)
REMIND_AT = re.compile(
    r"\b(?:(?P<day>today|tomorrow)\s+)?at\s+(?P<time>\d{1,2}(?::\d{2})?\s*(?:am|pm)?)"
    r"|\b(?P<alone>today|tomorrow)\b",
    re.IGNORECASE,
)
REMIND_WHAT = re.compile(r"^\s*(?:to|about|that)\s+", re.IGNORECASE)
COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "five": 5, "ten": 10, "fifteen": 15,
          "twenty": 20, "thirty": 30}  # fmt: skip
UNIT_MINUTES = {"s": 1 / 60, "m": 1, "h": 60, "d": 24 * 60}
# Which intent calls which tool (and how the reply reads its result).
INTENT_TOOLS = {
    "calculate": "calculate",
    "search": "search_conversations",
    "forget": "forget",
    "remind": "set_reminder",
}
TITLE_WORDS = 8
GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening))\b", re.I)
THANKS = re.compile(r"\b(?:thanks|thank you|cheers)\b", re.IGNORECASE)
HELP = re.compile(r"^\s*(?:help|\?|what can you do)\s*\??\s*$", re.IGNORECASE)
# The handoff line that holds the conversation's goal.
WORKING_ON = "Working on: "
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
# What a phrase taken from a sentence may trail: "tea, " is "tea".
LOOSE_ENDS = " ,;:"
FIRST_PERSON = re.compile(
    r"\b(?:" + "|".join(word.replace(" ", r"\s+") for word in REFLECTIONS) + r")\b(?!')",
    re.IGNORECASE,
)


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


# Regenerate asks the same message again: each version is worded differently (the n-th
# retelling takes the n-th wording, round the list), and the same version the same way.
RECAP_HEADINGS = ("Here is where we were", "Picking up where we left off", "To recap where we are")
DISCUSS_SAID = ("You said: “{said}”.", "“{said}”: noted.", "I read you: “{said}”.")
DISCUSS_GOAL = (
    "How does it move your goal, **{goal}**, forward?",
    "Where does that leave your goal, **{goal}**?",
    "What does it change for **{goal}**?",
)
DISCUSS_NO_GOAL = (
    "Tell me your goal and I'll help you plan it.",
    "What goal should we work toward? I'll help you plan it.",
    "Share a goal and we'll plan it step by step.",
)
VARIED_INTENTS = {"recap", "discuss"}
# The other replies say the same facts: a retelling says so first.
RETOLD = ("Put differently: ", "In other words: ", "Said another way: ")


def worded(wordings: tuple[str, ...], retelling: int) -> str:
    return wordings[retelling % len(wordings)]


def conversation_goal(context: Context) -> str | None:
    """The goal of the conversation being answered, from its handoff."""
    note = context.handoff
    for line in note.current_state.splitlines() if note else []:
        if line.startswith(WORKING_ON):
            return line.removeprefix(WORKING_ON).strip() or None
    return None


FACT_SENTENCES = {
    "name": "Your name is {}.",
    "likes": "You like {}.",
    "note": "You asked me to remember that {}.",
}


def fact_sentence(key: str, value: str) -> str:
    """A remembered fact said as a sentence, in the person's own casing."""
    return FACT_SENTENCES.get(key, f"{key.capitalize()}: {{}}.").format(value.rstrip("."))


class BuiltinBrain:
    @classmethod
    def label(cls) -> str:
        return "Built-in assistant (rules, no model)"

    def plan(self, context: Context) -> dict:
        text = context.text
        if (match := REMIND.search(text)) and (reminder := reminder_asked(match["rest"])):
            return {"intent": "remind", "facts": {}, "reminder": reminder}
        if match := FORGET.search(text):
            what = clip(match.group("what"), strip=LOOSE_ENDS)
            return {"intent": "forget", "facts": {}, "forget": what}
        if match := ASK_SEARCH.search(text):
            topic = clip(match.group("topic"), 80, strip=LOOSE_ENDS)
            return {"intent": "search", "facts": {}, "topic": topic}
        if match := CALCULATION.search(text):
            expression = " ".join(match.group("expression").split()).rstrip("?")
            return {"intent": "calculate", "facts": {}, "expression": expression}
        facts = self.facts_in(text)
        goal = self.goal_in(text)
        intent = self.intent_of(text, facts, goal)
        plan: dict = {"intent": intent, "facts": facts}
        if goal:
            plan["goal"] = goal
            plan["steps"] = goal_plan(reflect(goal))
        return plan

    def respond(
        self, context: Context, plan: dict, work: Work | None = None
    ) -> Generator[str, None, list[ToolUse] | None]:
        """The first round asks for the tool its intent needs, when it is offered; the next
        one answers with its result. No `work`: no tools."""
        work = work or Work()
        if not work.rounds and (calls := self.tool_calls(plan, work)):
            return calls
        delay = settings.CONTINUITY_BUILTIN_TOKEN_DELAY
        for token in TOKEN.findall(self.reply_text(context, plan, work)):
            if delay:
                time.sleep(delay)
            yield token
        return None

    def tool_calls(self, plan: dict, work: Work) -> list[ToolUse]:
        offered = {tool.name for tool in work.tools}
        wanted: list[tuple[str, dict]] = []
        if "note" in plan["facts"]:
            wanted.append(("remember", {"fact": plan["facts"]["note"]}))
        if plan["intent"] == "calculate":
            wanted.append(("calculate", {"expression": plan["expression"]}))
        if plan["intent"] == "search":
            wanted.append(("search_conversations", {"query": plan["topic"]}))
        if plan["intent"] == "forget":
            wanted.append(("forget", {"fact": plan["forget"]}))
        if plan["intent"] == "remind":
            wanted.append(("set_reminder", plan["reminder"]))
        return [
            ToolUse(call_id=f"call_{index}", name=name, arguments=arguments)
            for index, (name, arguments) in enumerate(wanted, 1)
            if name in offered
        ]

    def remember(self, context: Context, plan: dict, reply: str) -> dict[str, str]:
        return plan["facts"]

    def facts_in(self, text: str) -> dict[str, str]:
        """What the person stated about themselves, one fact per statement: "remember that I
        like tea" is a note to remember, not also a like."""
        facts: dict[str, str] = {}
        for sentence in SENTENCE.split(text):
            if (match := REMEMBER.search(sentence)) and not self.asks_about_memory(sentence, match):
                facts["note"] = clip(reflect(match.group("note")), strip=LOOSE_ENDS)
                continue
            if match := NAME.search(sentence):
                facts["name"] = " ".join(
                    word[0].upper() + word[1:] for word in match.group("name").split()
                )
            if match := LIKE.search(sentence):
                facts["likes"] = clip(reflect(match.group("thing")), strip=LOOSE_ENDS)
        return facts

    def goal_in(self, text: str) -> str | None:
        """The goal this message sets for its conversation, in the person's words."""
        if (match := GOAL.search(text)) and not REMEMBER.search(text):
            return clip(ANOTHER_CLAUSE.split(match.group("goal"), maxsplit=1)[0], strip=LOOSE_ENDS)
        return None

    def asks_about_memory(self, text: str, match: re.Match) -> bool:
        """Whether the "remember" is a question ("what do you remember about me?", "do you
        remember my name?"), which is not something to remember."""
        return bool(ASK_MEMORY.search(text)) or text[match.end() :].lstrip().startswith("?")

    def intent_of(self, text: str, facts: dict[str, str], goal: str | None = None) -> str:
        for intent, pattern in (
            ("ask_name", ASK_NAME),
            ("ask_goal", ASK_GOAL),
            ("ask_memory", ASK_MEMORY),
            ("recap", ASK_RECAP),
            ("help", HELP),
        ):
            if pattern.search(text):
                return intent
        if facts or goal:
            return "learn"
        if GREETING.search(text):
            return "greet"
        if THANKS.search(text):
            return "thanks"
        return "discuss"

    def reply_text(self, context: Context, plan: dict, work: Work | None = None) -> str:
        known = {key: value for key, value in context.facts.items() if key != "goal"}
        known.update(plan["facts"])
        handler = getattr(self, f"reply_{plan['intent']}")
        results = {
            call.name: done.results.get(call.call_id, "")
            for done in (work.rounds if work else [])
            for call in done.calls
        }
        reply = handler(
            context=context,
            plan=plan,
            known=known,
            name=known.get("name"),
            # Said back to the person: "learn Italian before my trip" is "…your trip".
            goal=reflect(goal)
            if (goal := plan.get("goal") or conversation_goal(context))
            else None,
            results=results,
        )
        if context.retelling and plan["intent"] not in VARIED_INTENTS:
            reply = f"{worded(RETOLD, context.retelling - 1)}{reply}"
        # An interruption is the page's to say (its banner, above the reply), once.
        return reply

    def reply_ask_name(self, *, name: str | None, **_) -> str:
        if name:
            return f"Your name is **{name}**."
        return "You haven't told me your name yet. Say “my name is …” and I'll remember it."

    def reply_ask_goal(self, *, context: Context, goal: str | None, **_) -> str:
        if not goal:
            return (
                "We haven't set a goal in this conversation yet. Tell me “my goal is …” and "
                "I'll draft a plan."
            )
        note = context.handoff
        plan = (note.plan_steps if note else None) or goal_plan(goal)
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(plan, 1))
        return f"Your goal in this conversation: **{goal}**. The plan:\n\n{steps}"

    def reply_ask_memory(self, *, context: Context, known: dict, goal: str | None, **_) -> str:
        if not known and not goal and not context.summary:
            return "I don't know anything about you yet. Tell me your name or a goal."
        parts = []
        if known:
            sentences = "\n".join(f"- {fact_sentence(key, value)}" for key, value in known.items())
            parts.append(f"About you (I remember it in all your conversations):\n\n{sentences}")
        if goal:
            parts.append(f"Your goal in this conversation: **{goal}**.")
        if context.summary:
            # Compacted turns left the prompt; what the user stated in them is in the summary.
            parts.append(f"From earlier in this conversation:\n\n{context.summary}")
        return "\n\n".join(parts)

    def reply_recap(self, *, context: Context, goal: str | None, name: str | None, **_) -> str:
        """This conversation only: its goal, the last things said, what to keep in mind
        (corrections, staff's notes) and one next step, the handoff's when it has one (the
        working memory staff and the person can correct)."""
        # What the person said about the task: not their questions to the assistant ("where
        # were we?", "what's the plan?"), greetings or thanks.
        asked = [
            turn.text
            for turn in context.history
            if turn.role == "user"
            and self.intent_of(turn.text, self.facts_in(turn.text), self.goal_in(turn.text))
            in ("learn", "discuss")
        ]
        note = context.handoff
        if not asked and not note and not goal:
            return "This is the start of our conversation, so there is nothing to recap yet."
        heading = worded(RECAP_HEADINGS, context.retelling)
        lines = [f"{heading}{', ' + name if name else ''}:", ""]
        if goal:
            lines.append(f"- Your goal in this conversation: **{goal}**.")
        lines += [f"- You said: “{clip(text, 80, strip=LOOSE_ENDS)}”" for text in asked[-3:]]
        if note and note.critical_context:
            lines += ["", "Keep in mind:", *(f"- {line}" for line in note.critical_context)]
        step = (note.plan_steps[0] if note and note.plan_steps else None) or (
            goal_plan(goal)[0] if goal else None
        )
        if step:
            lines += ["", f"Next step: {step.rstrip('.')}."]
        return "\n".join(lines)

    def reply_help(self, **_) -> str:
        return (
            "I'm the built-in assistant. I remember what you tell me about yourself "
            "(“my name is …”, “my goal is …”, “remember that …”), keep a plan for your goal, "
            "and answer “where were we?” with a recap — even after a restart."
        )

    def reply_learn(self, *, plan: dict, goal: str | None, **_) -> str:
        facts = plan["facts"]
        parts = []
        if "name" in facts:
            parts.append(f"Nice to meet you, **{facts['name']}**! I'll remember your name.")
        if plan.get("goal"):  # set by this message (`goal` is it, said back)
            steps = "\n".join(f"{i}. {s}" for i, s in enumerate(plan["steps"], 1))
            parts.append(f"Your goal in this conversation: **{goal}**. Here's a plan:\n\n{steps}")
        if "likes" in facts:
            parts.append(f"Noted that you like {facts['likes']}.")
        if "note" in facts:
            parts.append(f"I'll remember that {facts['note']}.")
        return "\n\n".join(parts)

    def reply_calculate(self, *, plan: dict, results: dict, **_) -> str:
        if found := results.get("calculate"):
            return f"{found}."
        return f"I can't work out “{plan['expression']}” right now: my calculator isn't available."

    def reply_search(self, *, plan: dict, results: dict, **_) -> str:
        if "search_conversations" not in results:
            return "I can't search your conversations right now."
        return f"Here is what I found about “{plan['topic']}”:\n\n{results['search_conversations']}"

    def reply_forget(self, *, plan: dict, results: dict, **_) -> str:
        if found := results.get("forget"):
            return f"{found.rstrip('.')}."
        return f"I can't forget “{plan['forget']}” from here: use the memory page."

    def reply_remind(self, *, plan: dict, results: dict, **_) -> str:
        said = results.get("set_reminder")
        if said is None:
            return "I can't set reminders right now."
        if said.startswith("Reminder set for "):
            when, _, what = said.removeprefix("Reminder set for ").partition(": ")
            return f"I'll remind you on {when}: {what.rstrip('.')}."
        return f"I couldn't set that reminder: {said}"

    def reply_greet(self, *, name: str | None, goal: str | None, **_) -> str:
        hello = f"Hello, {name}!" if name else "Hello!"
        if goal:
            return f"{hello} Shall we continue with your goal, **{goal}**?"
        return f"{hello} What would you like to work on?"

    def reply_thanks(self, *, name: str | None, **_) -> str:
        return f"You're welcome{', ' + name if name else ''}."

    def reply_discuss(self, *, context: Context, goal: str | None, **_) -> str:
        said = worded(DISCUSS_SAID, context.retelling).format(
            said=clip(context.text, 80, strip=LOOSE_ENDS)
        )
        if goal:
            return f"{said} {worded(DISCUSS_GOAL, context.retelling).format(goal=goal)}"
        return f"{said} {worded(DISCUSS_NO_GOAL, context.retelling)}"

    def task_state(self, context: Context, plan: dict, reply: str) -> dict | None:
        """The conversation's working memory changes only when the message set its goal: what
        it works on, the plan as next steps, and the decision. What the person said about
        themselves is their memory's, not this conversation's notes."""
        goal = plan.get("goal")
        if not goal:
            return None
        note = context.handoff
        state = [
            line
            for line in (note.current_state.splitlines() if note else [])
            if not line.startswith(WORKING_ON) and line.strip()
        ]
        return {
            "current_state": "\n".join([f"{WORKING_ON}{goal}", *state]),
            "next_steps": plan["steps"],
            "decisions": [
                *(note.decisions if note else []),
                f"Drafted a three-step plan for “{goal}”",
            ],
        }

    def title(self, context: Context, reply: str) -> str:
        """The goal when one was stated; else the first sentence, without a greeting, at most
        TITLE_WORDS words."""
        if goal := self.goal_in(context.text):
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
                if (self.facts_in(sentence) or self.goal_in(sentence)) and line not in lines:
                    lines.append(line)
        return "\n".join(lines) or "(Nothing you stated needed keeping.)"


def reminder_asked(rest: str) -> dict | None:
    """The set_reminder call "remind me …" asks for: when (in minutes, or at a time of the
    person's day) and what; None without a when or a what."""
    arguments: dict = {}
    if found := REMIND_IN.search(rest):
        count = found["count"].lower()
        amount = int(count) if count.isdigit() else COUNTS[count]
        arguments["in_minutes"] = amount * UNIT_MINUTES[found["unit"][0].lower()]
    elif found := REMIND_AT.search(rest):
        day = (found["day"] or found["alone"] or "").lower()
        time_of_day = found["time"] or "9:00"  # "tomorrow" alone: in the morning
        arguments["at"] = f"{day} {time_of_day}".strip()
    else:
        return None
    what = " ".join(f"{rest[: found.start()]} {rest[found.end() :]}".split())
    what = clip(REMIND_WHAT.sub("", re.sub(r"\s+(?=[.,!?])", "", what)), 200, strip=LOOSE_ENDS)
    what = what.rstrip(" .!?")
    if not what:
        return None
    return {"text": what, **arguments}
