"""Goals were stored as the person's memory facts, so one conversation's goal showed in all of
them. Each goal becomes its conversation's (the one it was stated in, the newest stated there,
superseded or not: "Working on: …" in a new version of that conversation's handoff), and copies of the person's facts ("name: …",
"likes: …", "note: …", "goal: …") leave the conversations' newest handoffs, where a forgotten
fact outlived its forgetting. A "Working on: …" line (and the steps and decisions naming it)
whose goal no message of that conversation stated came from another conversation, and goes.
Goal facts, every version, are then deleted. A goal whose message was deleted has no
conversation to go to, and goes."""

from django.db import migrations
from django.db.models import Max, Q

PERSON_KEYS = ("name: ", "likes: ", "note: ", "goal: ")
WORKING_ON = "Working on: "


def lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


def stated_here(Message, conversation_id, goal):
    words = goal.rstrip("…").strip()
    return Message.objects.filter(
        conversation_id=conversation_id, role="user", text__icontains=words
    ).exists()


def goals_to_conversations(apps, schema_editor):
    MemoryFact = apps.get_model("continuity", "MemoryFact")
    Handoff = apps.get_model("continuity", "Handoff")
    Message = apps.get_model("continuity", "Message")
    goals = {}  # conversation id -> the newest goal stated in it (a version may be superseded)
    stated = MemoryFact.objects.filter(key="goal").exclude(source_message=None)
    for fact in stated.select_related("source_message").order_by("created_at", "pk"):
        goals[fact.source_message.conversation_id] = fact.value
    noted = Handoff.objects.values("conversation_id").annotate(newest=Max("version"))
    conversations = set(goals) | {row["conversation_id"] for row in noted}
    for conversation_id in sorted(conversations):
        # The newest of the shown branch, as the engine reads it: a version written by a run on
        # a hidden branch (an edit or a regenerate left it) is not the conversation's state.
        shown = Q(run__isnull=True) | Q(run__message__hidden_with__isnull=True)
        latest = (
            Handoff.objects.filter(shown, conversation_id=conversation_id)
            .order_by("-version")
            .first()
        )
        newest = Handoff.objects.filter(conversation_id=conversation_id).aggregate(v=Max("version"))
        state = lines(latest.current_state) if latest else []
        critical = lines(latest.critical_context) if latest else []
        steps = lines(latest.next_steps) if latest else []
        decisions = lines(latest.decisions) if latest else []
        kept = [line for line in critical if not line.startswith(PERSON_KEYS)]
        foreign = [
            line.removeprefix(WORKING_ON)
            for line in state
            if line.startswith(WORKING_ON)
            and not stated_here(Message, conversation_id, line.removeprefix(WORKING_ON))
        ]
        state = [line for line in state if line.removeprefix(WORKING_ON) not in foreign]
        steps = [s for s in steps if not any(f"“{goal}”" in s for goal in foreign)]
        decisions = [d for d in decisions if not any(f"“{goal}”" in d for goal in foreign)]
        if goal := goals.get(conversation_id):
            state = [f"{WORKING_ON}{goal}", *(s for s in state if not s.startswith(WORKING_ON))]
        if latest and (kept, state, steps, decisions) == (
            critical,
            lines(latest.current_state),
            lines(latest.next_steps),
            lines(latest.decisions),
        ):
            continue
        if latest is None and not goal:
            continue
        Handoff.objects.create(
            conversation_id=conversation_id,
            version=(newest["v"] or 0) + 1,
            reason="scopes_split",
            current_state="\n".join(state),
            critical_context="\n".join(kept),
            next_steps="\n".join(steps),
            decisions="\n".join(decisions),
        )
    MemoryFact.objects.filter(key="goal").delete()


class Migration(migrations.Migration):
    dependencies = [("continuity", "0019_conversation_goals_and_forgetting")]

    operations = [migrations.RunPython(goals_to_conversations, migrations.RunPython.noop)]
