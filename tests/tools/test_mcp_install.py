"""The MCP SDK is optional: loaded only when a server is used, and named when missing."""

from __future__ import annotations

import subprocess
import sys

from tests.tools.mcp_fixtures import ROOT


def test_the_sdk_is_not_imported_until_a_server_is_used():
    code = (
        "import sys\n"
        "import ackloop.engine.model_step, ackloop.engine.tool_step\n"
        "from ackloop.tools.mcp import MCPServer, mcp_tools\n"
        "mcp_tools(MCPServer.stdio('server'))\n"
        "mcp_tools(MCPServer.http('http://127.0.0.1:1/mcp'))\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_without_the_sdk_making_a_server_names_the_extra_to_install():
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "from ackloop.tools.mcp import MCPServer\n"
        "MCPServer.stdio('server')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ackloop.tools.mcp.MCPNotInstalled: MCP tools need the MCP SDK: "
        "pip install 'ackloop[mcp]'"
    )
