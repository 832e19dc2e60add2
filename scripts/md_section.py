#!/usr/bin/env python3
"""Puts a generated section into a Markdown file between <!-- NAME:begin --> and <!-- NAME:end -->.

    md_section.py NAME FILE SECTION_FILE

SECTION_FILE holds the section's body (without the markers). The markers and what is between
them are replaced when present; otherwise the section is appended.
"""
import re
import sys
from pathlib import Path


def put_section(name, path, body):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{body.rstrip()}\n{end}"
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section + "\n"
    path.write_text(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: md_section.py NAME FILE SECTION_FILE")
    put_section(sys.argv[1], sys.argv[2], Path(sys.argv[3]).read_text())
