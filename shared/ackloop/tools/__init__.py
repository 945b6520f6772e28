"""Tools: the port (:mod:`.base`), the typed tool framework and the seed's tools."""
