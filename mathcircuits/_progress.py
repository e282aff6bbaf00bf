"""Progress bars of the long library calls: on by default, off where ``MATHCIRCUITS_PROGRESS=0``.

``path_patch``, ``knockout_curve``, ``attention_by_role``, ``discover_circuit`` and ``eap_scores`` take
``progress: bool | None = None``: ``True`` or ``False`` decides, ``None`` shows a bar unless the environment
variable ``MATHCIRCUITS_PROGRESS`` is ``0`` (the test suite sets it, so test output holds no bars).
"""

from __future__ import annotations

import os
from typing import Any

from tqdm.auto import tqdm

__all__: list[str] = []  # internal: the verbs take `progress=`; MATHCIRCUITS_PROGRESS=0 turns bars off

ENV_VAR = "MATHCIRCUITS_PROGRESS"


def wants_progress(progress: bool | None) -> bool:
    """``progress`` when given; else on unless ``MATHCIRCUITS_PROGRESS`` is ``0``, ``false``, ``no`` or ``off``."""
    if progress is not None:
        return bool(progress)
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def progress_bar(progress: bool | None, desc: str, **kwargs: Any) -> tqdm:
    """A tqdm bar (to stderr; a widget in a notebook) labelled ``desc``, disabled unless :func:`wants_progress`."""
    return tqdm(desc=desc, disable=not wants_progress(progress), **kwargs)
