"""The MCP server: memoryd's tools for agents over stdio and streamable HTTP."""
