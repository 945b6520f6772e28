"""``ackloop chaos``: durability under injected faults, measured on the full local stack.

Many agent runs go through the emulators, the function processes, the push delivery (production's
retry policy) and the scripted model served over the Gemini REST API while deliveries are
duplicated, processes are SIGKILLed at commit boundaries, the model and the tool APIs misbehave,
poison messages arrive, follow-ups queue behind a long run, a 429 storm blows and a poisoned step
goes to the dead-letter topic; then every run and every conversation is checked and the figures
are printed beside Temporal's worker-kill recovery. Everything runs on the shipped numbers, with
one time factor on every duration.

Modules (in this package): :mod:`.timing` (the shipped numbers and the factor), :mod:`.config`
(what to inject), :mod:`.stackup` (the stack and its fault hooks), :mod:`.runner` (the phases, in
order), :mod:`.phases`, :mod:`.scenarios`, :mod:`.deadletter` (what each phase does),
:mod:`.checks` (per-run and per-conversation verdicts), :mod:`.report` (the table),
:mod:`.targets` (the targets).
"""
