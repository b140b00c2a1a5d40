"""Staff tools in the Django admin. History (attempts, checkpoints, chunks, crashes, contexts,
recoveries, the audit log) is evidence: shown, linked, never edited. Changes go through the
services, as admin actions that ask for confirmation and a reason and leave a StaffAction row.

`base` holds what the pages share; `records` the engine's records, `staff` what staff act on,
`versions` what they edit as new versions, `tools` the MCP servers and the record of every tool
call. Importing them registers their pages."""

from . import records, staff, tools, versions

__all__ = ["records", "staff", "tools", "versions"]
