"""A wrong model name was stored as an alert by each worker that found it at the same moment
(they looked, found none, and each stored one). One open alert per problem is now a constraint;
the extra copies already stored are closed first, the oldest of each kept open."""

from django.db import migrations, models

# Longer texts (model names of any length, quoted whole before they were clipped) could pass
# PostgreSQL's limit for an index entry. Closed too: the next worker to start says it again.
LONGEST_KEPT_OPEN = 1_000


def duplicates_closed(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        # A worker of the release before, starting meanwhile, must not store a copy between
        # this step and the index's creation.
        schema_editor.execute("LOCK TABLE continuity_alert IN SHARE ROW EXCLUSIVE MODE")
    Alert = apps.get_model("continuity", "Alert")
    open_alerts = Alert.objects.filter(kind="model_missing", acknowledged_at__isnull=True)
    kept: dict[str, int] = {}
    for alert in open_alerts.order_by("created_at", "id").only("id", "text", "created_at"):
        if alert.text in kept or len(alert.text) > LONGEST_KEPT_OPEN:
            # Closed as of its own creation: a copy of the one kept, or too long to index.
            Alert.objects.filter(pk=alert.pk).update(acknowledged_at=alert.created_at)
        else:
            kept[alert.text] = alert.pk


class Migration(migrations.Migration):
    dependencies = [("continuity", "0031_words_after_a_reply_and_exchanges")]

    operations = [
        migrations.RunPython(duplicates_closed, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="alert",
            constraint=models.UniqueConstraint(
                condition=models.Q(("acknowledged_at__isnull", True), ("kind", "model_missing")),
                fields=("kind", "text"),
                name="alert_one_open_model_missing_per_problem",
            ),
        ),
    ]
