"""Fails when code of tenantci-dispatch outside `src/backend/` names a backend: a backend's
kind constructed (`BackendKind::new(...)`, outside a test module), a backend's own constant
(`pod::KIND`, `vm::FACTS`, ...) or the test-only fake backend's module. Everything outside
`backend/` keys by `BackendKind` and reads a backend's facts from `backend::catalog`, so a
new backend is its folder and a line in the catalog (docs/architecture.md).

Usage: backend_named.py SRC_DIR BACKEND_DIR...   (BACKEND_DIR: the backends' folder names)
Comments and string literals do not count; `#[cfg(test)]` modules may construct kinds (test
data), never a backend's constants."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rust_source import code_only  # noqa: E402

src, backends = sys.argv[1], sys.argv[2:]
CONSTANTS = re.compile(r"\b(" + "|".join(map(re.escape, backends)) + r")\s*::\s*(KIND|FACTS|PROVIDER)\b")
FAKE = re.compile(r"\bbackend\s*::\s*fake\b")
NEW = re.compile(r"\bBackendKind\s*::\s*new\s*\(")


def test_start(code):
    """Where the file's `#[cfg(test)]` module starts (tests sit at the end here); len if none."""
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+", code)
    return m.start() if m else len(code)


errors = []
for root, _, names in os.walk(src):
    rel_root = os.path.relpath(root, src)
    if rel_root == "backend" or rel_root.startswith("backend" + os.sep):
        continue
    for name in sorted(names):
        if not name.endswith(".rs"):
            continue
        path = os.path.join(root, name)
        code = code_only(open(path, encoding="utf-8").read())
        tests = test_start(code) if name not in ("tests.rs",) else 0
        for pattern, what, in_tests_too in ((CONSTANTS, "a backend's own constant", True),
                                            (FAKE, "the test-only fake backend", True),
                                            (NEW, "a backend kind constructed", False)):
            for m in pattern.finditer(code):
                if not in_tests_too and m.start() >= tests:
                    continue
                line = code.count("\n", 0, m.start()) + 1
                errors.append(f"layering: {path}:{line}: `{m.group(0).strip()}` is {what} outside "
                              "backend/; key by BackendKind and ask backend::catalog for the "
                              "backend's facts (docs/architecture.md, \"A third backend\")")
for e in errors:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
