"""What the agent knows: handoffs, memory facts, compaction and the startup context assembly.

Context never imports delivery: delivery runs the steps and asks context what the brain should
know, holding the fencing locks around the writes made here.
"""
