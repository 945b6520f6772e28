"""Messages on Pub/Sub: the publishing port, the Pub/Sub adapter and an in-memory one, what a push
subscription delivers (``push``) and how it delivers (``delivery``)."""
