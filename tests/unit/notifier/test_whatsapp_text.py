"""Markdown a model writes, as a WhatsApp customer should see it (services/notifier/channels/whatsapp_text.py)."""

from __future__ import annotations

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
        ("* um\n+ dois\n- três", "- um\n- dois\n- três"),
        ("  * **Item**: texto", "  - *Item*: texto"),
        ("Veja [nosso site](https://loja.example/p?id=1).", "Veja nosso site (https://loja.example/p?id=1)."),
        ("[https://loja.example](https://loja.example)", "https://loja.example"),
        ("![foto](https://cdn.example/a.png)", "https://cdn.example/a.png"),
        ("antes\n---\ndepois", "antes\n\ndepois"),
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
    ],
)
def test_plain_text_and_whatsapp_forms_are_left_alone(text: str) -> None:
    assert to_whatsapp(text) == text


def test_code_is_never_converted() -> None:
    text = "Use `**não**` assim:\n```\n# comentário\n**literal** * item\n```\n**fim**"
    assert to_whatsapp(text) == "Use `**não**` assim:\n```\n# comentário\n**literal** * item\n```\n*fim*"
