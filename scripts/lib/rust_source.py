"""Reading Rust sources for the layering checks (scripts/check-layering.sh): the code of a
file with its comments, string and char literals blanked, so a mention in either is never
taken for an import or a name."""
import re

CHAR = re.compile(r"'(\\u\{[0-9a-fA-F_]*\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'")


def code_only(text):
    """Comments, string and char literals blanked; newlines kept, so line numbers hold."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2) + 2
        elif re.match(r'b?r#*"', text[i:i + 8]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r'b?r(#*)"', text[i:]).group(1)
            j = text.find('"' + hashes, text.index('"', i) + 1) + 1 + len(hashes)
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif CHAR.match(text, i):
            j = CHAR.match(text, i).end()
        else:
            i += 1
            continue
        j = n if j <= i else j
        for k in range(i, min(j, n)):
            out[k] = out[k] if out[k] == "\n" else " "
        i = j
    return "".join(out)
