"""Pass pipelines as data, and the Python rewrites between them."""

from .pipeline import LOWER_TO_LLVM, SPARSIFY, STAGES, pipeline_text
from .widen_i1 import widen_i1_memrefs

__all__ = ["LOWER_TO_LLVM", "SPARSIFY", "STAGES", "pipeline_text", "widen_i1_memrefs"]
