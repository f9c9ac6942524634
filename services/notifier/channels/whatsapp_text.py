"""Markdown as WhatsApp shows it.

Models write Markdown even when told not to; WhatsApp has its own, smaller markup
(``*bold*``, ``_italic_``, ``~strike~``, ```` ``` ```` blocks, `` `code` ``, ``-`` lists, ``>``
quotes) and shows everything else as typed. Unconverted, a customer got ``**Horário:**``,
``### Pedido`` and ``[site](https://…)`` with every symbol. So the WAHA channel converts
what a model wrote (never what a person typed in the inbox) where it has a WhatsApp form:

- ``**x**`` / ``__x__`` → ``*x*``; ``~~x~~`` → ``~x~``; a single ``*x*`` stays: it is WhatsApp's
  bold (the reply rules ask for it), and Markdown's italic shown bold still stresses it
- ``# Heading`` → ``*Heading*``; a ``* item`` bullet → ``- item``; a ``---`` rule → nothing
- ``[text](url)`` → ``text (url)``; ``![alt](url)`` → ``url``

Left alone: code (fenced blocks and `` `spans` ``, which WhatsApp shows monospace), bare URLs
(``?__hstc=1`` is not bold), runs of three or more asterisks (a masked ``***.456.789-**``),
and ``+`` at a line's start (``+ R$ 10 de entrega`` is not a list item). The patterns are
linear: a line is matched without nested quantifiers that could backtrack.
"""

from __future__ import annotations

import re
from typing import Final

_FENCE: Final = re.compile(r"^\s*```(?!.*```)")  # a fence line, not a one-line ```monospace```
_CODE_SPAN: Final = re.compile(r"(`[^`\n]+`)")
_URL: Final = re.compile(r"(https?://[^\s<>()]+)")
_HEADING: Final = re.compile(r"^ {0,3}#{1,6} +(\S.*)$")
_BULLET: Final = re.compile(r"^( *)\* +(?=\S)")
_RULE: Final = re.compile(r"^ {0,3}(?:-{3,}|\*{3,}|_{3,}) *$")
_IMAGE: Final = re.compile(r"!\[[^\[\]\n]*\]\(([^\s()]+)\)")
_LINK: Final = re.compile(r"\[([^\[\]\n]+)\]\(([^\s()]+)\)")
_BOLD: Final = re.compile(
    r"(?<!\*)\*\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*\*(?!\*)|(?<!\w)__(?=[^\s_])([^_\n]+?)(?<=[^\s_])__(?!\w)"
)
_STRIKE: Final = re.compile(r"(?<!~)~~(?=[^\s~])([^~\n]+?)(?<=[^\s~])~~(?!~)")


def to_whatsapp(text: str) -> str:
    """``text`` with its Markdown in WhatsApp's markup (see the module's docstring)."""
    out: list[str] = []
    in_fence = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
        elif in_fence:
            out.append(line)
        elif _RULE.match(line):
            out.append("")
        else:
            out.append(_line(line))
    return "\n".join(out)


def _line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        title = _inline(heading.group(1).rstrip().rstrip("#").rstrip()).strip("*").strip()
        return f"*{title}*" if title else ""
    return _inline(_BULLET.sub(r"\1- ", line))


def _inline(text: str) -> str:
    """Inline markup outside code spans (a ``*`` or a link inside code is not markup)."""
    parts = _CODE_SPAN.split(text)
    for index in range(0, len(parts), 2):  # even indexes: outside code spans
        parts[index] = _emphasis(_LINK.sub(_link, _IMAGE.sub(r"\1", parts[index])))
    return "".join(parts)


def _emphasis(text: str) -> str:
    """Bold and strike outside URLs (``?__hstc=1&__hssc=2`` is a query, not bold)."""
    parts = _URL.split(text)
    for index in range(0, len(parts), 2):
        part = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", parts[index])
        parts[index] = _STRIKE.sub(r"~\1~", part)
    return "".join(parts)


def _link(match: re.Match[str]) -> str:
    label, url = match.group(1).strip(), match.group(2)
    return url if label in (url, url.removeprefix("https://"), url.removeprefix("http://")) else f"{label} ({url})"
