"""What a run prints: our own lines and one progress bar per long step; dependencies' noise goes to a log file.

Dependencies speak a lot during a run: ``datasets`` draws a bar for every
``filter``/``save_to_disk``, ``transformers`` for every weight load, and
deprecation ``FutureWarning``s repeat on every forward (``past_key_values`` under
transformers 5.24). Within :func:`quiet_dependencies` those bars are off, and
warnings (``warnings.warn``) and the log records of the dependencies' loggers are
written to ``logs/warnings.log`` in the run folder instead of the console. The
toolkit's own progress bars (tqdm, one per long step) and log lines are kept.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
from transformers.utils import logging as hf_logging

__all__: list[str] = []

DEPENDENCY_LOGGERS = ("transformers", "transformer_lens", "datasets", "accelerate", "peft", "lm_eval", "torch")


@contextmanager
def quiet_dependencies(log_file: Path) -> Iterator[None]:
    """Within the block, dependencies' progress bars are off and their warnings go to ``log_file``.

    Args:
        log_file: the run folder's ``logs/warnings.log`` (appended to; its folder is created).

    Returns:
        A context manager; everything is restored on exit.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    targets = [logging.getLogger(n) for n in ("py.warnings", *DEPENDENCY_LOGGERS)]
    saved = [(lg, lg.propagate, list(lg.handlers)) for lg in targets]
    bars = datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    logging.captureWarnings(True)
    for lg in targets:
        lg.handlers = [handler]
        lg.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # each distinct warning once per place, into the file
            yield
    finally:
        logging.captureWarnings(False)
        for lg, propagate, handlers in saved:
            lg.handlers, lg.propagate = handlers, propagate
        handler.close()
        if bars[0]:
            datasets.enable_progress_bars()
        if bars[1]:
            hf_logging.enable_progress_bar()
