"""Pass pipelines as data, and the Python rewrites between them."""

from .pipeline import LOWER_TO_LLVM, SPARSIFY, STAGES, pipeline_text

__all__ = ["LOWER_TO_LLVM", "SPARSIFY", "STAGES", "pipeline_text"]
