"""An attempt's lifecycle: `lease` begins it, `finish` stores its reply, `failures` ends it
without one; `locking` holds the conversation's lock and the fence every write of an attempt
passes."""
