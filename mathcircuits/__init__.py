"""mathcircuits: find, explain and fine-tune the circuits LLMs use for arithmetic.

Pipeline (one subpackage per stage, imports flow downwards only):
data -> models -> patching / ablation / analysis -> viz, finetune, evaluation -> pipeline -> cli.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
