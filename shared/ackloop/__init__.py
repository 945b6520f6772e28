"""ackloop: durable AI agents on Pub/Sub and Firestore.

Every step of the agent loop (one model call, one tool call) is a stateless function triggered
by one Pub/Sub message. Firestore holds the conversation and the step records; Pub/Sub's
at-least-once redelivery plus the step records' dedupe make the loop durable.
Start reading at ``docs/architecture.md``.
"""

__version__ = "0.1.0"
