"""A call that waits, for a person's decision, a named event or its child run's end: one
mechanism (:mod:`.core`), the kinds (:mod:`.kinds`: each only what is its own), and what
arrives for a wait (:mod:`.arrivals`)."""
