#!/usr/bin/env python
import os
import sys

# Developer tools (devtools/): never installed by the production settings.
DEV_COMMANDS = {"bench", "chaos"}

if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    default = "devtools.settings" if command in DEV_COMMANDS else "continuity.settings"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", default)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
