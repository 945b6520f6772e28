"""Configuration: the settings every process reads once (``settings``), and which caller file URIs
a deployment allows (``file_uris``)."""
