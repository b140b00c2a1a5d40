"""Hiding a branch hid every message from its first question's id on, and a reply's id says
only when it was written: after a burst of questions, regenerating the last one also hid the
first one's reply, which then left exports and search while its question stayed shown. A
hidden reply to a shown question is shown again (its version bumped, so open pages redraw)."""

from django.db import migrations
from django.db.models import F


def replies_follow_their_questions(apps, schema_editor):
    Message = apps.get_model("continuity", "Message")
    Message.objects.filter(
        role="assistant", hidden_with__isnull=False, reply_to__hidden_with__isnull=True
    ).update(hidden_with=None, version=F("version") + 1)


class Migration(migrations.Migration):
    dependencies = [("continuity", "0021_dead_letters_replaced_by_edits")]

    operations = [migrations.RunPython(replies_follow_their_questions, migrations.RunPython.noop)]
