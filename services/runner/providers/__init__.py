"""Model providers: one module per provider, registered here and nowhere else.

``build_providers`` is the one place that knows every provider; the loop asks
the resulting :class:`ProviderRegistry` for the version's provider by name.
Tests register fakes by passing their own mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.runner.providers.anthropic import AnthropicProvider
from services.runner.providers.base import ModelProvider
from services.runner.providers.demo import DemoProvider
from services.runner.providers.google import GoogleProvider
from services.runner.providers.openai import OpenAIProvider
from switchboard.credentials import ProviderSettings


class UnknownProvider(LookupError):
    code = "unknown_provider"


class ProviderRegistry:
    """Provider adapters by name."""

    def __init__(self, providers: Iterable[ModelProvider]) -> None:
        self._providers: Mapping[str, ModelProvider] = {p.name: p for p in providers}

    def get(self, name: str) -> ModelProvider:
        try:
            return self._providers[name]
        except KeyError:
            raise UnknownProvider(f"no provider adapter named {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._providers)

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()


def build_providers(settings: ProviderSettings) -> ProviderRegistry:
    """Every provider we ship, pointed at the configured default endpoints."""
    return ProviderRegistry(
        [
            AnthropicProvider(default_base_url=settings.base_url("anthropic")),
            OpenAIProvider(default_base_url=settings.base_url("openai")),
            GoogleProvider(default_base_url=settings.base_url("google")),
            DemoProvider(),
        ]
    )


__all__ = ["ModelProvider", "ProviderRegistry", "UnknownProvider", "build_providers"]
