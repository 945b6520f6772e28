"""Calling Google Cloud: the hot-path RPCs on a gRPC channel (``rpc``), which the Firestore and
Pub/Sub adapters share."""
