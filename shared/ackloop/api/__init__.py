"""The HTTP service: start runs and read them (``ackloop serve``, or FUNCTION_TARGET=api)."""
