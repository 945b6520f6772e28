"""What every part of ackloop shares: the stored documents (``records``), the messages (``wire``),
the step keys, the error tree, the clock, the prices."""
