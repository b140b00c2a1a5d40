"""What the tests share: factories, waiting on conditions, real processes, relays and outages,
the session's redis-server, test brains, and the small steps many tests take (sending a message,
checking the promise). Test modules import from here, never from one another."""
