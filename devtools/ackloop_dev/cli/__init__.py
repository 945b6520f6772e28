"""The ``ackloop bench`` and ``ackloop chaos`` commands, found by the ``ackloop`` CLI through the
``ackloop.commands`` entry points of this distribution."""
