"""The dependencies' warnings that say nothing to a user of mathcircuits, filtered by message and category.

``transformers`` 5.24 deprecates the ``past_key_values=`` keyword that TransformerLens 4.3's attention bridge
still passes, and warns on every forward (tens of times per verb); ``tqdm.auto`` in a notebook without
ipywidgets warns that it falls back to a text bar. The CLI sends every dependency warning to the run
folder's ``logs/warnings.log`` (:mod:`mathcircuits.pipeline.console`); the library, imported in a notebook,
ignores these known ones only (each by its message and category), and every other warning still shows.
``warnings.filterwarnings("default", category=FutureWarning)`` after the import shows them again.
"""

from __future__ import annotations

import warnings

from tqdm import TqdmWarning

__all__: list[str] = []

#: (message regex, category) of each known dependency warning that does not concern the user
NOISY_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`past_key_values` is deprecated and will be removed", FutureWarning),  # transformers >= 5.24, every forward
    (r"IProgress not found", TqdmWarning),  # tqdm.auto in a notebook without ipywidgets: a text bar instead
)


def filter_dependency_warnings() -> None:
    """Ignore :data:`NOISY_WARNINGS`, after any filter the user set (``append=True``: theirs win)."""
    for message, category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, append=True)
