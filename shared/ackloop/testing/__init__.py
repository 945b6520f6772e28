"""Running ackloop on one machine, for tests: agents through the real engine in one process
(``agent_tester``: :func:`run_agent`, :class:`AgentTester`), the durable loop fed from an
in-memory publisher (``inprocess``), and the local stack's state file (``localstack``)."""
