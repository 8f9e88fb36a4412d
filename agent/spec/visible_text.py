"""Model-written text made safe to show: control characters (but tabs and line ends) as
visible escapes. A kernel's source, a rationale or a name may hold terminal escape
sequences (clear the screen, set the window title, write the clipboard through OSC 52);
printed raw or handed to a widget, the terminal would act on them."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with each control character other than tab and line feed written as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
