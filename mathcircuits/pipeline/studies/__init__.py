"""The built-in studies, one folder each, in pipeline order.

data → identify → validate → analyze → circuit → numbers → finetune → evaluate → compare; the report, which
reads them all, runs last (:mod:`mathcircuits.pipeline.registry`). Each folder's ``STUDY`` record is plain data:
a study's code (and with it torch and the model libraries) is imported only when it runs or reports, so the CLI
parses its arguments and prints ``--help`` without them. No folder imports another; what several read of one
another lives in :mod:`.shared`.
"""

from __future__ import annotations

from mathcircuits.pipeline.studies.analyze import STUDY as ANALYZE
from mathcircuits.pipeline.studies.circuit import STUDY as CIRCUIT
from mathcircuits.pipeline.studies.compare import STUDY as COMPARE
from mathcircuits.pipeline.studies.data import STUDY as DATA
from mathcircuits.pipeline.studies.evaluate import STUDY as EVALUATE
from mathcircuits.pipeline.studies.finetune import STUDY as FINETUNE
from mathcircuits.pipeline.studies.identify import STUDY as IDENTIFY
from mathcircuits.pipeline.studies.numbers import STUDY as NUMBERS
from mathcircuits.pipeline.studies.validate import STUDY as VALIDATE

__all__: list[str] = []

BUILTIN = (DATA, IDENTIFY, VALIDATE, ANALYZE, CIRCUIT, NUMBERS, FINETUNE, EVALUATE, COMPARE)
