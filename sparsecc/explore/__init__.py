"""Format exploration and autotuning on the user's own data.

``sc.explore(expression, *operands, ...)`` compiles the expression for every candidate
combination of storage formats (and, if asked, index widths, vector lengths and thread
counts), runs each once, checks its result against an independent reference, times it and
returns an :class:`ExploreReport`, ranked fastest first.  ``sc.compile(..., autotune=True)``
explores on its first call and remembers the choice on disk (:class:`AutotunedKernel`).

One job per module:

- :mod:`.report`: ``Row``, ``ExploreReport`` (text, HTML, JSON, chart), format specs as JSON
- :mod:`.compare`: comparing two results within a dtype-aware tolerance
- :mod:`.reference`: the independent check of each candidate (sampled reference entries,
  or a majority of the candidates when the statement is beyond the sampler)
- :mod:`.candidates`: format, option and thread candidates
- :mod:`.runner`: :func:`explore` (compile, run, check, time)
- :mod:`.storage`: the tuning key and the stored choices (memory and disk)
- :mod:`.autotune`: ``AutotunedKernel``

Every result comes from a compiled kernel; the reference is a check, never a result.
"""

from .autotune import AUTOTUNE_BUDGET_S, AUTOTUNE_REPEAT, AutotunedKernel
from .candidates import MAX_CANDIDATES, _block_candidates, _default_candidates
from .compare import DENSE_COMPARE_LIMIT, compare
from .report import ExploreReport, Row, decode_format, encode_format
from .runner import MIN_SAMPLE_S, explore
from .storage import load_choice, store_choice, tuning_key

__all__ = ["explore", "ExploreReport", "Row", "AutotunedKernel", "compare", "encode_format", "decode_format",
           "load_choice", "store_choice", "tuning_key", "MAX_CANDIDATES", "MIN_SAMPLE_S", "DENSE_COMPARE_LIMIT",
           "AUTOTUNE_BUDGET_S", "AUTOTUNE_REPEAT"]
