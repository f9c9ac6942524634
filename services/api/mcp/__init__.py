"""The internal MCP tool server (CRM tools for agent runs); see ``services.api.mcp.server``."""
