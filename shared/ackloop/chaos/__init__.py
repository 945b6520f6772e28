"""``ackloop chaos``: durability under injected faults, measured on the full local stack.

Many agent runs go through the emulators, the function processes, the push delivery (production's
retry policy) and the scripted model served over the Gemini REST API while deliveries are
duplicated, processes are SIGKILLed at commit boundaries, the model and the tool APIs misbehave,
poison messages arrive, follow-ups queue behind a long run, a 429 storm blows and a poisoned step
goes to the dead-letter topic; then every run and every conversation is checked and the figures
are printed beside Temporal's worker-kill recovery. Everything runs on the shipped numbers, with
one time factor on every duration.

Modules: :mod:`~ackloop.chaos.timing` (the shipped numbers and the factor),
:mod:`~ackloop.chaos.config` (what to inject), :mod:`~ackloop.chaos.stackup` (the stack and its
fault hooks), :mod:`~ackloop.chaos.runner` (the phases, in order),
:mod:`~ackloop.chaos.phases`, :mod:`~ackloop.chaos.scenarios`, :mod:`~ackloop.chaos.deadletter`
(what each phase does), :mod:`~ackloop.chaos.checks` (per-run and per-conversation verdicts),
:mod:`~ackloop.chaos.report` (the table), :mod:`~ackloop.chaos.targets` (the targets).
"""
