from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from continuity.delivery import working_state_prune


class Command(BaseCommand):
    help = "Delete checkpoints and reply chunks of finished messages past the retention period."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days",
            type=float,
            default=None,
            help="Keep this many days (default: CONTINUITY_CHECKPOINT_RETENTION_DAYS).",
        )

    def handle(self, *args, days: float | None, **options):
        if days is not None and days < 0:
            raise CommandError("--days must not be negative.")
        pruned = working_state_prune(older_than_days=days)
        self.stdout.write(
            f"Pruned {pruned['checkpoints']} checkpoint(s), {pruned['chunks']} chunk(s)."
        )
