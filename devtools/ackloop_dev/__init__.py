"""Tools that work on ackloop rather than run it: the local stack (:mod:`.devstack`), the
benchmark (:mod:`.bench`), the chaos suite (:mod:`.chaos`), the fakes (:mod:`.fakes`) and their
``ackloop`` commands (:mod:`.cli`).

A distribution apart from the runtime so that the image and ``pip install ackloop`` carry none
of this code or its dependencies.
"""
