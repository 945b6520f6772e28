"""Tools: the port (:mod:`.base`), the typed tool framework and the seed's tools.

Make tools with :func:`tool`, :func:`typed_tool` or :func:`text_tool`, put them in a
:class:`ToolSet` (the :class:`Toolbox` the engine calls), and raise :class:`ToolError` for failures
the model can act on. :func:`ackloop.tools.seed.seed_toolset` builds the seed agent's tools;
``ackloop_dev.fakes.sandbox_apis`` (in ackloop-dev) serves offline stand-ins for the APIs they
call.
"""

from ackloop.telemetry.masking import SecretMaskingFilter, install_secret_masking, mask_secrets
from ackloop.tools.base import Toolbox, ToolContext, ToolOutcome
from ackloop.tools.definition import Tool, text_tool, tool, typed_tool
from ackloop.tools.errors import FinalResult, ToolError
from ackloop.tools.files import File
from ackloop.tools.parameters import NoArguments
from ackloop.tools.toolset import ToolSet

__all__ = [
    "File",
    "FinalResult",
    "NoArguments",
    "SecretMaskingFilter",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolSet",
    "Toolbox",
    "install_secret_masking",
    "mask_secrets",
    "text_tool",
    "tool",
    "typed_tool",
]
