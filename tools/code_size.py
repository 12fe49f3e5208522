#!/usr/bin/env python3
"""Sizes of the C++ code per folder: the largest files and functions, against the targets
of docs/architecture.md ("Size targets": no file over 400 lines, no function over 60).

  python3 tools/code_size.py                 # report: per folder, the largest files and functions
  python3 tools/code_size.py --check         # exit 1 on a file or function over its target that
                                             # tools/code_size_baseline.txt does not allow
  python3 tools/code_size.py --write-baseline  # record today's excesses as the allowed ceiling

The baseline is a ratchet: an entry allows one file or function to stay at most its
recorded size; anything new over a target, or an allowed one that grows, fails --check.
Declarative tables (the config schema: one entry per config key) are exempt by name below,
from both targets.

Functions are found with a brace scanner, not a C++ parser: comments, string and
character literals are skipped; a `{` at namespace or class scope whose statement has a
parameter list and no `=` opens a function body, which runs to its matching `}`. Its
length counts the lines from the signature's first line to the closing brace.
"""
import argparse
import os
import re
import sys

FOLDERS = ["chunkmem", "optim", "trainer", "models", "data", "tokenizer", "chat", "comm", "tools"]
FILE_LIMIT_LINES = 400
FUNCTION_LIMIT_LINES = 60
EXEMPT = {"trainer/config/config_schema.cc"}  # declarative tables
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, "tools", "code_size_baseline.txt")


def strip_comments_and_literals(text):
    """The text with comments and string/char literals blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(text):
    """(name, first line, line count) of every function body in C++ source `text`."""
    code = strip_comments_and_literals(text)
    stack = []  # scope kinds: namespace, class, function, block
    statement_start = 0
    found = []
    line_of = lambda pos: code.count("\n", 0, pos) + 1
    for pos, c in enumerate(code):
        if c == ";":
            statement_start = pos + 1
        elif c == "{":
            head = code[statement_start:pos]
            words = head.split()
            if any(k in stack for k in ("function", "block")) or stack and stack[-1] in ("function", "block"):
                kind = "block"
            elif re.search(r"\bnamespace\b", head) or head.strip().startswith('extern'):
                kind = "namespace"
            elif re.search(r"\b(class|struct|union|enum)\b", head) and "(" not in head.split(":")[0]:
                kind = "class"
            elif "(" in head and "=" not in head.split("(")[0]:
                kind = "function"
                first = statement_start + len(head) - len(head.lstrip())
                name = re.findall(r"([~\w:]+)\s*\(", head)
                found.append([name[0] if name else "?", line_of(first), pos])
            else:
                kind = "block"
            stack.append(kind)
            statement_start = pos + 1
        elif c == "}":
            kind = stack.pop() if stack else "block"
            if kind == "function" and not any(k == "function" for k in stack):
                start = next(f for f in reversed(found) if len(f) == 3)
                start.append(line_of(pos) - start[1] + 1)
            statement_start = pos + 1
        elif c == ":" and stack and stack[-1] == "class" and code[statement_start:pos].strip() in (
                "public", "private", "protected"):
            statement_start = pos + 1
    return [(f[0], f[1], f[3]) for f in found if len(f) == 4]


def measure(root):
    """{key: lines} for every file and function, keys 'path' and 'path:function@line'."""
    files, funcs = {}, {}
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8", errors="replace").read()
                if rel in EXEMPT:
                    continue
                files[rel] = text.count("\n")
                for fname, line, length in functions(text):
                    funcs[f"{rel}:{fname}@{line}"] = length
    return files, funcs


def excesses(files, funcs):
    over = {k: v for k, v in files.items() if v > FILE_LIMIT_LINES}
    over.update({k.rsplit("@", 1)[0]: v for k, v in funcs.items() if v > FUNCTION_LIMIT_LINES})
    return over  # a function is keyed without its line, so moving it is not a new entry


def read_baseline(path):
    allowed = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.split("#", 1)[0].strip()
            if line:
                key, lines = line.rsplit(None, 1)
                allowed[key] = max(allowed.get(key, 0), int(lines))
    return allowed


def report(files, funcs, top):
    for folder in FOLDERS:
        fs = sorted(((v, k) for k, v in files.items() if k.startswith(folder + "/")), reverse=True)
        gs = sorted(((v, k) for k, v in funcs.items() if k.startswith(folder + "/")), reverse=True)
        if not fs:
            continue
        print(f"== {folder}/: {len(fs)} files, {sum(v for v, _ in fs)} lines; "
              f"{sum(v > FILE_LIMIT_LINES for v, _ in fs)} files over {FILE_LIMIT_LINES}, "
              f"{sum(v > FUNCTION_LIMIT_LINES for v, _ in gs)} functions over {FUNCTION_LIMIT_LINES}")
        for v, k in fs[:top]:
            print(f"  file {v:5d}  {k}")
        for v, k in gs[:top]:
            print(f"  func {v:5d}  {k}")


def check(over, allowed):
    """Messages for excesses the baseline does not allow."""
    bad = []
    for key, lines in sorted(over.items()):
        limit = FILE_LIMIT_LINES if ":" not in key else FUNCTION_LIMIT_LINES
        if key not in allowed:
            bad.append(f"{key}: {lines} lines, over the target of {limit} (split it; tools/code_size.py)")
        elif lines > allowed[key]:
            bad.append(f"{key}: {lines} lines, grown past its allowed {allowed[key]} (target {limit}; "
                       f"tools/code_size_baseline.txt only ever shrinks)")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    files, funcs = measure(a.root)
    over = excesses(files, funcs)
    if a.write_baseline:
        with open(a.baseline, "w") as f:
            f.write("# Allowed excesses over the size targets (tools/code_size.py): key, most lines.\n"
                    "# A ratchet: lower or delete entries as code is split; never raise one.\n")
            for key, lines in sorted(over.items()):
                f.write(f"{key} {lines}\n")
        print(f"{len(over)} entries written to {a.baseline}")
        return 0
    if a.check:
        bad = check(over, read_baseline(a.baseline))
        for msg in bad:
            print(msg, file=sys.stderr)
        print(f"code size: {len(over)} excesses, {len(bad)} not allowed by {os.path.relpath(a.baseline, a.root)}")
        return 1 if bad else 0
    report(files, funcs, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
