#!/usr/bin/env python
import os
import sys

# Developer tools (devtools/), with settings of their own: the production settings never
# install them.
DEV_COMMANDS = {"bench", "chaos"}
PRODUCT_SETTINGS = "continuity.settings"

if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    chosen = os.environ.get("DJANGO_SETTINGS_MODULE", PRODUCT_SETTINGS)
    if command in DEV_COMMANDS and chosen == PRODUCT_SETTINGS:
        chosen = "devtools.settings"
    os.environ["DJANGO_SETTINGS_MODULE"] = chosen
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
