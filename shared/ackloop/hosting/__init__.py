"""Serving a process: its start-up, its clients (``runtime``), one step function as an app
(``function_app``)."""
