"""The durable agent loop: one handler per kind of message (query, model step, tool step,
dead letter). Each handler is a pure function of its message and the store."""
