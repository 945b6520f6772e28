"""Seeing a run: trace context and spans (``tracing``), the run and step a log line belongs to
(``context``), and metrics (``metrics``). Each module imports the OpenTelemetry SDK only when
it is switched on, so a cold start pays for none of it."""
