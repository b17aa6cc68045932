#!/usr/bin/env python3
"""What the docs name exists, and says whose it is.

- Metric names: every `xferd_...` name in the docs is a metric the exporter names
  (daemon/exporter), a recording rule of deploy/prometheus/xferd.rules.yml, or a build
  target; only docs/metrics.md's account of what was cut may name a metric that is gone.
- Flags: a command line of xferd in the docs (`xferd probe ...` in code) uses only flags of
  that command (daemon/cmd/main.cc); a flag of one of the repository's scripts or bench
  programs that xferd does not have is said in a paragraph (or the caption above a table)
  that names the script, so that nobody reads it as xferd's.

  tests/check_docs.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])")


def exporter_metrics(root):
    names = set()
    for pattern in ("*.cc", "*.def"):  # families.def: the table of every family
        for p in (root / "daemon").rglob(pattern):
            names |= set(re.findall(r'"(xferd_[a-z0-9_]+)"', p.read_text()))
    rules = root / "deploy/prometheus/xferd.rules.yml"
    for record in re.findall(r"record:\s*(\S+)", rules.read_text()):
        names |= set(re.findall(r"xferd_[a-z0-9_]*[a-z0-9]", record))
    return names


def build_targets(root):
    targets = {}
    for p in root.rglob("CMakeLists.txt"):
        for m in re.finditer(r"add_(?:executable|library)\((xferd_[a-z0-9_]+)\s+([^)]*)\)",
                             p.read_text()):
            targets[m.group(1)] = [p.parent / s for s in m.group(2).split()
                                   if "." in s and not s.startswith("$")]
    return targets


def xferd_flags(root):
    """Each command's flags, from where main.cc adds them."""
    main = (root / "daemon/cmd/main.cc").read_text()
    commands = {}
    for m in re.finditer(r"CLI::App\* Add(\w+)Command\(.*?\n}\n", main, re.S):
        name = re.sub(r"(?<!^)([A-Z])", r"-\1", m.group(1)).lower()
        commands[name] = {f for o in re.findall(r'add_(?:option|flag)\(\s*"([^"]+)"', m.group(0))
                          for f in o.split(",") if f.startswith("--")}
    version = re.search(r'add_subcommand\("version".*?\n\n', main, re.S)
    commands["version"] = set(re.findall(r'add_flag\("(--[a-z-]+)"', version.group(0)))
    for flags in commands.values():
        flags.add("--help")
    return commands


def script_flags(root, targets):
    """Flag -> the names a doc may call its owner by (the script's path and file name, a
    program's target name)."""
    owners = {}

    def add(flag, *names):
        owners.setdefault(flag, set()).update(names)

    program_of = {src.resolve(): t for t, srcs in targets.items() for src in srcs}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or ".git" in p.parts or "build" in p.parts[0:1]:
            continue
        rel = str(p.relative_to(root))
        if not rel.startswith(("bench/", "tests/", "deploy/", "dashboards/", ".ci/")):
            continue
        if p.suffix not in (".py", ".sh", ".cu", ".cc", ""):
            continue
        text = p.read_text(errors="replace")
        if p.suffix in (".cu", ".cc"):
            target = program_of.get(p.resolve())
            if target is None or not rel.startswith("bench/"):
                continue
            flags = set(re.findall(r'"(--[a-z][a-z0-9-]*)', text))
            names = (target, rel, p.name)
        else:
            flags = set(re.findall(r'add_argument\(\s*"(--[a-z][a-z0-9-]*)"', text))
            flags |= set(re.findall(r'^\s*(--[a-z][a-z0-9-]*)\)', text, re.M))
            flags |= set(re.findall(r'"(--[a-z][a-z0-9-]*)" in sys\.argv', text))
            # Its usage lines: the script's name, then its flags.
            for usage in re.findall(r"^[#\s]*(?:\S*/)?" + re.escape(p.name) + r"\b[^\n]*", text,
                                    re.M):
                flags |= set(FLAG.findall(usage))
            names = (rel, p.name)
        for f in flags:
            add(f, *names)
    return owners


def metric_problems(root, docs):
    known = exporter_metrics(root) | set(build_targets(root))
    problems = []
    for d in docs:
        text = d.read_text()
        if d.name == "metrics.md":  # its account of the cuts names what is gone
            text = re.sub(r"\*\*What (was cut|paid for).*?(?=\n## |\Z)", "", text, flags=re.S)
        for m in re.finditer(r"\bxferd_[a-z0-9_]*[a-z0-9]\b(?!\()", text):
            name = m.group(0)
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            # "xferd_x (since removed ...)": a name the text itself says is gone.
            said_gone = re.match(r"\W{0,4}\s*since removed", text[m.end():m.end() + 40])
            if name not in known and base not in known and not said_gone:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{d}:{line}: {name} is no metric xferd exports (nor a rule "
                                "or a build target): correct it, or say it was removed")
    return problems


def code_spans(text):
    """(start, code) of every inline code span and every line of a fenced block."""
    spans = [(m.start(1), m.group(1)) for m in re.finditer(r"(?<!`)`([^`\n]+)`(?!`)", text)]
    for block in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S):
        offset = block.start(1)
        for line in block.group(1).split("\n"):
            spans.append((offset, line))
            offset += len(line) + 1
    return spans


def flag_problems(root, docs):
    commands = xferd_flags(root)
    every_xferd_flag = set().union(*commands.values())
    owners = script_flags(root, build_targets(root))
    problems = []
    for d in docs:
        text = d.read_text()
        # A command line of xferd: its flags are the command's.
        for start, code in code_spans(text):
            for m in re.finditer(r"(?:^|[\s/$])xferd ([a-z-]+)((?: +[^|;&`]*)?)", code):
                cmd, rest = m.group(1), m.group(2)
                if cmd not in commands:
                    continue
                for f in FLAG.findall(rest):
                    if f.split("=")[0] not in commands[cmd]:
                        line = text.count("\n", 0, start) + 1
                        problems.append(f"{d}:{line}: `xferd {cmd}` has no flag {f}")
        # A script's flag: said with its script.
        paragraphs = re.split(r"\n\s*\n", text)
        offset = 0
        for i, para in enumerate(paragraphs):
            context = para + "\n" + (paragraphs[i - 1] if i > 0 and para.lstrip().startswith("|")
                                     else "")
            for m in FLAG.finditer(para):
                f = m.group(1)
                if f in every_xferd_flag or f not in owners:
                    continue  # xferd's own, or another tool's (cmake, curl, promtool, ...)
                if not any(name in context for name in owners[f]):
                    line = text.count("\n", 0, text.find(para, offset) + m.start()) + 1
                    problems.append(f"{d}:{line}: {f} is not xferd's; name its script here "
                                    f"({', '.join(sorted(owners[f]))})")
            offset = text.find(para, offset) + len(para)
    return problems


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    docs = sorted((root / "docs").glob("*.md")) + [root / "README.md"] + sorted(
        p for p in root.glob("*/**/README.md") if "build" not in p.parts)
    problems = metric_problems(root, docs) + flag_problems(root, docs)
    for p in problems:
        print(p)
    print(f"check_docs: {len(docs)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
