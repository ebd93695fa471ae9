"""Pass pipelines as data, and the Python rewrites between them."""

from .pipeline import (BUFFERIZE, LOWER_TO_LLVM, OPENMP, SPARSIFY, STAGES, PipelineFacts, fingerprint, lower,
                       pipeline_text)

__all__ = ["BUFFERIZE", "LOWER_TO_LLVM", "OPENMP", "PipelineFacts", "SPARSIFY", "STAGES", "fingerprint", "lower", "pipeline_text"]
