"""Count the public names: the entries of every ``__all__`` in the package.

Imports ``mathcircuits`` and every module below it, reads each module's ``__all__`` and prints
how many (module, name) pairs there are, how many distinct names (a name re-exported by a
package counts once) and how many names the packages' ``__init__.py`` export (the public surface
that docs/api.md documents).

Usage::

    python scripts/count_public_names.py             # the two counts
    python scripts/count_public_names.py --by-module # and one line per module
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "mathcircuits"


def modules_with_all() -> dict[str, list[str]]:
    """Module name → its ``__all__``, for the package and every module below it that has one."""
    pkg = importlib.import_module(PACKAGE)
    found = {PACKAGE: list(getattr(pkg, "__all__", []))}
    for info in pkgutil.walk_packages(pkg.__path__, prefix=PACKAGE + "."):
        mod = importlib.import_module(info.name)
        names = getattr(mod, "__all__", None)
        if names is not None:
            found[info.name] = list(names)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by-module", action="store_true", help="also print each module's count")
    args = parser.parse_args(argv)
    found = modules_with_all()
    pairs = {(mod, name) for mod, names in found.items() for name in names}
    names = {name for _, name in pairs}
    packages = {(mod, name) for mod, name in pairs if hasattr(importlib.import_module(mod), "__path__")}
    if args.by_module:
        for mod in sorted(found):
            print(f"{len(set(found[mod])):4d}  {mod}")
    print(f"modules with __all__: {len(found)}")
    print(f"(module, name) pairs: {len(pairs)}")
    print(f"distinct names: {len(names)}")
    print(f"names in the packages' __init__ __all__: {len(packages)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
