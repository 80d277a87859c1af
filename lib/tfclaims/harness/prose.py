"""A claim's prose, kept beside its claim file as markdown (`experiments/<claim>/claim.md`), so that the
claim file reads as what it declares and runs.

The file is a title line and one `## ` section per field, in any order:

    # <claim id>: <title>
    ## Statement          the claim in our words (one paragraph)
    ## The notes say      what the notes claim (one paragraph)
    ## Anchors            one `- ` item per anchor (continuation lines indented)
    ## Anchor number      the anchors' headline number
    ## Method             how the experiment measures it (paragraphs)
    ## Regime             whether the committed profile reaches the claim's regime (scale, device):
                          one sentence

A section's lines join with single spaces into one string (blank lines too: paragraphs are for the reader).
Every section is a template filled from the experiment module's constants: `{NULL_OFFSET}` or `{MARGIN:g}` is
replaced by the constant, so the text cannot drift from the number the code uses; `{{` and `}}` are braces.
"""

from __future__ import annotations

import string
import textwrap
from collections.abc import Mapping
from pathlib import Path

WIDTH = 110
SECTIONS = {
    "Statement": "statement",
    "The notes say": "notes_say",
    "Anchors": "anchors",
    "Anchor number": "anchor_number",
    "Method": "method",
    "Regime": "regime",
    "Caveats": "caveat_templates",
}
LISTS = ("anchors", "caveat_templates")  # sections of `- ` items (continuation lines indented)
# Filled when the claim is analysed (`Experiment.caveats`), from the module's constants, the profile's
# settings `p` and what the analysis measured; the other sections are filled when the claim file is loaded.
DEFERRED = ("caveat_templates",)


class ProseError(ValueError):
    """A claim's markdown is malformed: the message names the file and the fault, in one line."""


def fill(text: str, names: Mapping, where: str) -> str:
    try:
        return string.Formatter().vformat(text, (), names)
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        raise ProseError(f"{where}: cannot fill {{...}} ({type(e).__name__}: {e})") from None


def read(path: Path, names: Mapping) -> dict:
    """The fields a claim's markdown gives (`SECTIONS`' values), each section filled from `names`."""
    fields: dict[str, list[str]] = {}
    current = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            head = line[3:].strip()
            if head not in SECTIONS or SECTIONS[head] in fields:
                raise ProseError(
                    f"{path}:{n}: unknown or repeated section {head!r} (one of {list(SECTIONS)})"
                )
            current = SECTIONS[head]
            fields[current] = []
        elif current is not None:
            fields[current].append(line)
        elif line.strip() and not line.startswith("# "):
            raise ProseError(f"{path}:{n}: text before the first '## ' section")
    out: dict = {}
    for key, lines in fields.items():
        where = f"{path} ({key})"
        if key in LISTS:
            items: list[list[str]] = []
            for line in lines:
                if line.startswith("- "):
                    items.append([line[2:]])
                elif line.strip():
                    if not items:
                        raise ProseError(f"{where}: an item starts with '- '")
                    items[-1].append(line)
            texts = [" ".join(x.strip() for x in item) for item in items]
            if key in DEFERRED:
                for t in texts:  # the template's syntax now; its names when it is filled
                    try:
                        list(string.Formatter().parse(t))
                    except ValueError as e:
                        raise ProseError(f"{where}: {e}") from None
                out[key] = tuple(texts)
            else:
                out[key] = [fill(t, names, where) for t in texts]
        else:
            out[key] = fill(" ".join(x.strip() for x in lines if x.strip()), names, where)
    return out


def write(title_line: str, fields: Mapping, breaks: Mapping[str, list[str]] | None = None) -> str:
    """The markdown for `fields` (templates, as `read` takes them), wrapped at WIDTH; `breaks[key]` lists the
    substrings before which that section starts a new paragraph."""
    out = [title_line]
    for head, key in SECTIONS.items():
        if key not in fields:
            continue
        out += ["", f"## {head}"]
        if key in LISTS:
            for item in fields[key]:
                out += textwrap.wrap(
                    item,
                    WIDTH,
                    initial_indent="- ",
                    subsequent_indent="  ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            continue
        paras, text = [], fields[key]
        for b in (breaks or {}).get(key, []):
            i = text.find(" " + b)
            if i > 0:
                paras.append(text[:i])
                text = text[i + 1 :]
        for i, para in enumerate([*paras, text]):
            out += ([""] if i else []) + textwrap.wrap(
                para, WIDTH, break_long_words=False, break_on_hyphens=False
            )
    return "\n".join(out) + "\n"
