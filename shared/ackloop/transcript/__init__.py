"""A conversation as a model call is sent it: the context policy and the contents built from what
the store holds."""
