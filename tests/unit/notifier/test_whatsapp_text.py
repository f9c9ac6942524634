"""Markdown a model writes, as a WhatsApp customer should see it (services/notifier/channels/whatsapp_text.py)."""

from __future__ import annotations

import time

import pytest

from services.notifier.channels.whatsapp_text import to_whatsapp


@pytest.mark.parametrize(
    ("markdown", "whatsapp"),
    [
        ("**Horário:** 9h às 18h", "*Horário:* 9h às 18h"),
        ("__Atenção__, pedido _urgente_", "*Atenção*, pedido _urgente_"),
        ("~~R$ 90~~ R$ 70", "~R$ 90~ R$ 70"),
        ("### Seu pedido", "*Seu pedido*"),
        ("## **Resumo** ##", "*Resumo*"),
        ("* um\n- dois", "- um\n- dois"),
        ("  * **Item**: texto", "  - *Item*: texto"),
        ("Veja [nosso site](https://loja.example/p?id=1).", "Veja nosso site (https://loja.example/p?id=1)."),
        ("[https://loja.example](https://loja.example)", "https://loja.example"),
        ("![foto](https://cdn.example/a.png)", "https://cdn.example/a.png"),
        ("antes\n---\ndepois", "antes\n\ndepois"),
        ("```PIX123``` e **isso**", "```PIX123``` e *isso*"),  # one-line monospace is not a fence
    ],
)
def test_markdown_becomes_whatsapp_markup(markdown: str, whatsapp: str) -> None:
    assert to_whatsapp(markdown) == whatsapp


@pytest.mark.parametrize(
    "text",
    [
        "Olá! Seu pedido 123 chega amanhã.",
        "2 * 3 * 4 = 24",
        "o campo order_id e o snake_case ficam",
        "*já em negrito do WhatsApp*",
        "> uma citação",
        "1. primeiro\n2. segundo",
        "CPF ***.456.789-**",  # a masked document, not bold
        "veja https://loja.example/?__hstc=1&__hssc=2 ok",  # a query, not bold
        "+ R$ 10 de entrega",  # an addition, not a list item
        "snake__case__name",
    ],
)
def test_plain_text_and_whatsapp_forms_are_left_alone(text: str) -> None:
    assert to_whatsapp(text) == text


def test_code_is_never_converted() -> None:
    text = "Use `**não**` assim:\n```\n# comentário\n**literal** * item\n```\n**fim**"
    assert to_whatsapp(text) == "Use `**não**` assim:\n```\n# comentário\n**literal** * item\n```\n*fim*"


@pytest.mark.parametrize(
    "text",
    ["# " + " " * 50_000 + "x", "[" * 20_000 + "](", "**a" * 20_000, "~~a b" * 20_000, "[a](" + "x" * 50_000],
)
def test_hostile_text_is_converted_in_linear_time(text: str) -> None:
    """The notifier's event loop runs this on every reply: no pattern may backtrack (a heading line
    with a long run of spaces was cubic)."""
    started = time.process_time()
    to_whatsapp(text)
    assert time.process_time() - started < 0.5
