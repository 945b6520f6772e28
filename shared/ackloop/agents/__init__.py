"""Agents: what an agent is (``agent``: instructions, tools, model, limits, offline script), where a
deployment's agents come from (``catalog``; ``builtin`` when the user names none), and the
scripted model that plays a whole catalog (``scripts``)."""
