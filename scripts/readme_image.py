"""Draw the README's image with the README's own example, and stamp it with that example's digest.

Runs the README's ```python block that starts with ``import mathcircuits as mc`` exactly as written, saves the
figure its last line returns to ``docs/img/first-heatmap-add.png`` (the layout's size, scale 1) and adds a PNG text
chunk ``mathcircuits-readme-example`` holding the digest of the block. ``tests/test_first_call.py`` compares the
stamp with the README's current example, so an edited example with an old image fails there. Usage::

    .venv/bin/python scripts/readme_image.py        # the example's time: a few minutes on a 2-core CPU
"""

from __future__ import annotations

import ast
import hashlib
import re
import struct
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "docs" / "img" / "first-heatmap-add.png"
KEY = "mathcircuits-readme-example"


def readme_example(readme: Path = ROOT / "README.md") -> str:
    """The README's one ```python block that starts with ``import mathcircuits as mc``."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    found = [b for b in blocks if b.startswith("import mathcircuits as mc\n")]
    if len(found) != 1:
        raise SystemExit(f"{readme}: expected one ```python block starting with `import mathcircuits as mc`.")
    return found[0]


def digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    out, at = [], 8
    while at < len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        out.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + n]))
        at += 12 + n
    return out


def stamped(data: bytes, key: str, value: str) -> bytes:
    """The PNG ``data`` with a ``tEXt`` chunk ``key``=``value`` before its end (an older one of ``key`` dropped)."""
    out = [b"\x89PNG\r\n\x1a\n"]
    for kind, body in _chunks(data):
        if kind == b"tEXt" and body.split(b"\0", 1)[0] == key.encode():
            continue
        if kind == b"IEND":
            text = key.encode() + b"\0" + value.encode()
            out.append(struct.pack(">I", len(text)) + b"tEXt" + text + struct.pack(">I", zlib.crc32(b"tEXt" + text)))
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)))
    return b"".join(out)


def stamp_of(path: Path, key: str = KEY) -> str | None:
    """The value of the PNG's ``tEXt`` chunk ``key``, or None."""
    for kind, body in _chunks(path.read_bytes()):
        if kind == b"tEXt":
            name, _, value = body.partition(b"\0")
            if name == key.encode():
                return value.decode()
    return None


def main() -> None:
    from mathcircuits.viz import save_figure

    code = readme_example()
    *body, last = ast.parse(code).body
    scope: dict = {"__name__": "__main__"}
    exec(compile(ast.Module(body=body, type_ignores=[]), "README.md", "exec"), scope)
    fig = eval(compile(ast.Expression(last.value), "README.md", "eval"), scope)
    save_figure(fig, IMAGE, scale=1.0)
    IMAGE.write_bytes(stamped(IMAGE.read_bytes(), KEY, digest(code)))
    print(f"wrote {IMAGE.relative_to(ROOT)} ({fig.layout.width}x{fig.layout.height}), stamp {digest(code)}")


if __name__ == "__main__":
    sys.exit(main())
