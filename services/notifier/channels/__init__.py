"""Channel plugins, registered here and only here: a new channel is one module plus one line.

``CHANNELS`` maps a channel session's ``provider`` to its plugin class.
"""

from __future__ import annotations

import httpx

from services.notifier.channels.base import Channel, ChannelError, Destination, SendResult
from services.notifier.channels.waha import WahaChannel
from services.notifier.channels.webhook import WebhookChannel

CHANNELS: dict[str, type[Channel]] = {
    WahaChannel.name: WahaChannel,
    WebhookChannel.name: WebhookChannel,
}


class ChannelRegistry:
    """One instance of each plugin, sharing the process's HTTP client."""

    def __init__(self, client: httpx.AsyncClient, *, timeout_s: float) -> None:
        self._channels = {name: cls(client, timeout_s=timeout_s) for name, cls in CHANNELS.items()}

    def get(self, name: str) -> Channel:
        channel = self._channels.get(name)
        if channel is None:
            raise ChannelError("unknown_channel", f"no channel plugin named {name!r}", transient=False)
        return channel


__all__ = ["CHANNELS", "Channel", "ChannelError", "ChannelRegistry", "Destination", "SendResult"]
