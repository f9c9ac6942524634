"""Markdown as WhatsApp shows it.

Models write Markdown even when told not to; WhatsApp has its own, smaller markup
(``*bold*``, ``_italic_``, ``~strike~``, ```` ``` ```` blocks, `` `code` ``, ``-`` lists, ``>``
quotes) and shows everything else as typed. Unconverted, a customer got ``**Horário:**``,
``### Pedido`` and ``[site](https://…)`` with every symbol. So the WAHA channel converts
what has a WhatsApp form and leaves the rest alone:

- ``**x**`` / ``__x__`` → ``*x*``; ``~~x~~`` → ``~x~``; a single ``*x*`` stays: it is WhatsApp's
  bold (the reply instructions ask for it), and Markdown's italic shown bold still stresses it
- ``# Heading`` → ``*Heading*``; ``* item`` / ``+ item`` → ``- item``; a ``---`` rule → nothing
- ``[text](url)`` → ``text (url)``; ``![alt](url)`` → ``url``

Code (fenced blocks and `` `spans` ``) is never touched: WhatsApp shows both as monospace.
The text stored in the inbox stays the model's; only what goes to WhatsApp changes.
"""

from __future__ import annotations

import re
from typing import Final

_FENCE: Final = re.compile(r"^\s*```")
_CODE_SPAN: Final = re.compile(r"(`[^`\n]+`)")
_HEADING: Final = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET: Final = re.compile(r"^(\s*)[*+]\s+")
_RULE: Final = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_IMAGE: Final = re.compile(r"!\[[^\]\n]*\]\((\S+?)\)")
_LINK: Final = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")
_BOLD: Final = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_STRIKE: Final = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")


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
        title = _inline(heading.group(1)).strip("*").strip()
        return f"*{title}*" if title else ""
    line = _BULLET.sub(r"\1- ", line)
    return _inline(line)


def _inline(text: str) -> str:
    """Inline markup outside code spans (split out so a `*` inside code is never read as markup)."""
    parts = _CODE_SPAN.split(text)
    for index in range(0, len(parts), 2):  # even indexes: outside code spans
        part = _IMAGE.sub(r"\1", parts[index])
        part = _LINK.sub(_link, part)
        part = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", part)
        parts[index] = _STRIKE.sub(r"~\1~", part)
    return "".join(parts)


def _link(match: re.Match[str]) -> str:
    label, url = match.group(1).strip(), match.group(2)
    return url if label in (url, url.removeprefix("https://"), url.removeprefix("http://")) else f"{label} ({url})"
