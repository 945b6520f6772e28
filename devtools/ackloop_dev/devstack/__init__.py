"""The local stack: the official emulators, the topics and push subscriptions, the functions."""
