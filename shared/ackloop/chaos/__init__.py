"""``ackloop chaos``: durability under injected faults, measured on the full local stack.

Many agent runs go through the emulators, the function processes and the scripted model served
over the Gemini REST API while deliveries are duplicated, processes are SIGKILLed at commit
boundaries, the model and the tool APIs misbehave and poison messages arrive; then every run is
checked and the figures are printed beside Temporal's worker-kill recovery.

Modules: :mod:`~ackloop.chaos.config` (what to inject), :mod:`~ackloop.chaos.stackup` (the
stack and its fault hooks), :mod:`~ackloop.chaos.runner` (the phases), :mod:`~ackloop.chaos.checks`
(per-run verdicts), :mod:`~ackloop.chaos.report` (the table).
"""
