"""Configuration: the settings every process reads once, and where its agents come from (``agents``,
``catalog``, ``agent_catalog``)."""
