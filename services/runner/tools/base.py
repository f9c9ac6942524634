"""What the loop needs from tools: their specs, and a way to call one."""

from __future__ import annotations

from typing import Protocol

from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec


class ToolServerUnavailable(Exception):
    """The tool server cannot be reached (or answers nonsense): the run hands off [004 R6]."""

    code = "tool_server_unavailable"


class ToolBox(Protocol):
    async def specs(self) -> tuple[ToolSpec, ...]:
        """The tools this run is offered, in a stable order."""
        ...

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        """Run one call. Tool errors come back as ``is_error`` outcomes; an unreachable
        server raises :class:`ToolServerUnavailable`."""
        ...

    async def aclose(self) -> None: ...


class NoTools:
    """A run without tools (nothing granted): never touches the tool server."""

    async def specs(self) -> tuple[ToolSpec, ...]:
        return ()

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        return ToolOutcome(call.id, call.name, f"tool {call.name!r} is not available to this run", is_error=True)

    async def aclose(self) -> None:
        return None
