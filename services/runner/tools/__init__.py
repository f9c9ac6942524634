"""Tools as the runner sees them: the internal MCP server behind the :class:`ToolBox` interface."""

from services.runner.tools.base import NoTools, ToolBox, ToolServerUnavailable
from services.runner.tools.mcp import McpToolBox, ToolCatalog

__all__ = ["McpToolBox", "NoTools", "ToolBox", "ToolCatalog", "ToolServerUnavailable"]
