"""Model clients: the port (:mod:`.base`), Gemini through google-genai, and the scripted model."""
