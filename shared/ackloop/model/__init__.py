"""Model clients behind one port (:mod:`.base`).

- :mod:`.gemini`: :class:`~.gemini.GeminiModel`, Gemini through google-genai
  (:func:`~.gemini.build_gemini_model` builds it from settings).
- :mod:`.scripted`: :class:`~.scripted.ScriptedModel`, the deterministic offline model; by default
  it plays the seed agent (:mod:`.seed_agent`); :func:`~.scripted.reference_workload_script`.
- ``ackloop_dev.fakes.gemini_server`` (in ackloop-dev): a local server speaking the Gemini REST
  API, with fault injection.

Nothing here creates a client or reads the environment at import time.
"""
