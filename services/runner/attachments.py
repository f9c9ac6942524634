"""How a message that is not plain text reads to the model.

Agents cannot see attachments (no provider call carries the media). Left as the caption
alone, a photo without one was an empty message: the run was told "no new customer
message" and answered as if nothing had been sent. So a non-text message reads as a
bracketed note of what was sent, followed by its caption, in the new messages and in
the history alike. A location's text is its description and coordinates (ingest).
"""

from __future__ import annotations

from typing import Final

TEXT: Final = "text"
LOCATION: Final = "location"
_NAMES: Final = {
    "image": "an image",
    "audio": "an audio message",
    "video": "a video",
    "document": "a document",
}


def model_text(content_type: str, text: str) -> str:
    """``text`` as the model reads it: unchanged for plain text, else a note of what was attached."""
    if content_type == TEXT:
        return text
    caption = text.strip()
    if content_type == LOCATION:
        return f"[shared a location: {caption}]" if caption else "[shared a location]"
    note = f"[sent {_NAMES.get(content_type, 'an attachment')}; its content is not available to you]"
    return f"{note} {caption}" if caption else note
