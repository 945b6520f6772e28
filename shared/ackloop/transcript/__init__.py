"""A conversation as a model call is sent it: the contents built from what the store holds (the
context policy is :mod:`ackloop.domain.context_window`)."""
