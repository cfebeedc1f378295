"""Reading the docs as GitHub renders them: sections, fenced code blocks, links and heading anchors.

Plain text parsing of the Markdown this repository writes (ATX headings, ``` fences, inline links);
enough to run the README's quick start and to check every relative link, no Markdown library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SHELL = {"bash", "sh", "shell"}
NOT_RUN = {"text", "console-output", "python", "json", "yaml"}  # shown, never run as shell


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # the fence's line number, 1-based


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of everything outside fenced code blocks."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
            fence = None
        elif fence is None:
            out.append((n, line))
    return out


def section(text: str, title: str) -> tuple[int, str]:
    """The body of the `## title` section (up to the next heading of its level or above) and its first
    line number; ValueError when there is no such heading."""
    lines = text.splitlines()
    prose = dict(prose_lines(text))
    start = level = None
    for n, line in enumerate(lines, 1):
        m = HEADING.match(line) if n in prose else None
        if m is None:
            continue
        if start is None and m.group(2).strip() == title:
            start, level = n, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:
            return start + 1, "\n".join(lines[start : n - 1])
    if start is None:
        raise ValueError(f"no heading {title!r}")
    return start + 1, "\n".join(lines[start:])


def blocks(text: str, first_line: int = 1) -> list[Block]:
    """Every fenced code block, with its info string's language ('' when untagged)."""
    out, fence, lang, body, at = [], None, "", [], 0
    for n, line in enumerate(text.splitlines(), first_line):
        m = FENCE.match(line)
        if fence is None and m:
            fence, lang, body, at = m.group(1), m.group(2).lower(), [], n
        elif fence is not None and line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
            out.append(Block(lang, "\n".join(body) + "\n", at))
            fence = None
        elif fence is not None:
            body.append(line)
    if fence is not None:
        raise ValueError(f"line {at}: a code block is never closed")
    return out


def shell_blocks(path: Path, title: str) -> list[Block]:
    """The shell blocks of one section, in order. A block tagged neither as shell nor as shown-only
    output is an error, so that no command of the section is silently left out of a test."""
    first, body = section(path.read_text(), title)
    found = blocks(body, first)
    odd = [f"line {b.line}: ```{b.lang}" for b in found if b.lang not in SHELL | NOT_RUN]
    if odd:
        raise ValueError(f"{path.name}, {title!r}: tag each block ```bash (run) or ```text (shown): " + ", ".join(odd))
    return [b for b in found if b.lang in SHELL]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, repeated headings numbered -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, root: Path) -> list[str]:
    """Relative links of one Markdown file whose file, or #anchor in it, does not exist. Links to
    other sites (a scheme, `//`) are not followed; a link may not leave `root`."""
    text = path.read_text()
    out = []
    for n, line in prose_lines(text):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:|^//", target, re.I):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path.resolve()
            where = f"{path.relative_to(root)}:{n}: {target}"
            if not dest.is_relative_to(root.resolve()):
                out.append(f"{where} (outside the repository)")
            elif not dest.exists():
                out.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                out.append(f"{where} (no heading #{anchor} in {dest.name})")
    return out
