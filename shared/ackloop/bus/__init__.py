"""Publishing messages: the port, the Pub/Sub adapter and an in-memory one."""
