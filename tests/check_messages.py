#!/usr/bin/env python3
"""Every message xferd raises is one line: an error a user reads (on stderr, in the journal,
in node-problem-detector's condition, in check-config's file:line: form) is escaped on its
way out (platform/printable.h), so a newline written into one shows as a literal \\x0a.

Reads the C++ sources of the executable's layers and fails on a string literal holding a
control character escape (\\n, \\r, \\t, \\x..) inside a statement that throws or fails
with a message: `throw ...;`, `Fail(...)`, `FailAt(...)`, and the error types' constructors.

  tests/check_messages.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

LAYERS = ("platform", "probes", "daemon")
# A statement that makes a message: from one of these to its `;`.
TRIGGER = re.compile(r"\bthrow\b|\b(?:Fail|FailAt|ConfigError|UsageError|NoDeviceError|HttpError|"
                     r"FileError|Error|ProbeAbort)\s*[({]")
CONTROL = re.compile(r"\\[nrt]|\\x[0-1][0-9a-fA-F]")


def literals_and_code(text):
    """Yields (kind, start, end) for string literals; comments are blanked in `code`."""
    code = list(text)
    literals = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            code[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            code[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) + len(m.group(1)) + 2
            literals.append((i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                literals.append((i, j + 1))
            i = j + 1
        else:
            i += 1
    return "".join(code), literals


def statement_end(code, start):
    """The index of the `;` that ends the statement starting at `start` (depth 0)."""
    depth, i = 0, start
    in_string = None
    while i < len(code):
        c = code[i]
        if in_string:
            if c == "\\":
                i += 2
                continue
            if c == in_string:
                in_string = None
        elif c in "\"'":
            in_string = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i
        i += 1
    return len(code)


def problems(path):
    text = path.read_text(errors="replace")
    code, literals = literals_and_code(text)
    found = []
    for m in TRIGGER.finditer(code):
        # A trigger inside a literal is text, not code.
        if any(a <= m.start() < b for a, b in literals):
            continue
        end = statement_end(code, m.start())
        for a, b in literals:
            if m.start() <= a < end and CONTROL.search(text[a:b]):
                line = text.count("\n", 0, a) + 1
                found.append(f"{path}:{line}: a message holds {CONTROL.search(text[a:b]).group(0)}: "
                             f"{text[a:b][:60]}")
    return found


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = [p for layer in LAYERS for p in sorted((root / layer).rglob("*"))
             if p.suffix in (".cc", ".h", ".cu")]
    found = sorted({f for p in files for f in problems(p)})
    for f in found:
        print(f)
    print(f"check_messages: {len(files)} files, {len(found)} message(s) of more than one line"
          + ("; write each as one line (a fix after '; ', an example inline)" if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
