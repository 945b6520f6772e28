"""What every part of ackloop shares: the stored documents (``records``), the messages (``wire``),
the step keys, the error tree, the clock, the prices, the sizes Firestore gives what it stores,
an agent's context window and an eval's report."""
