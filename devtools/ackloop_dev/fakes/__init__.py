"""Offline stand-ins for what ackloop calls: a server speaking the Gemini REST API with fault
injection (:mod:`.gemini_server`) and the tool APIs' sandbox (:mod:`.sandbox_apis`). The local
stack starts them as ``python -m`` processes; the tests and the chaos suite use them too."""
