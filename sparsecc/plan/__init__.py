"""The planner: how a statement of three or more factors is computed, in steps
(docs/planning.md).

A layer of its own: it reads the expression IR (``sparsecc.expr``), the operands'
statistics and the result's format, and returns a :class:`Plan` made of statements.  It
emits no MLIR and calls no kernels; ``sparsecc.planned`` runs plans through the usual
compile and call path.

* ``stats`` - operand statistics and estimates of an intermediate's stored entries;
* ``cost`` - a step's cost in bytes moved and operations;
* ``path`` - which statements may be reordered, and the contraction order;
* ``plan`` - the :class:`Plan` and its :class:`Step` s, the fusion rules, formats;
* ``nested`` - reductions computed in steps of their own (nested ones; several indices
  into a sparse result, one index a step);
* ``optimize`` - what ``optimize=`` may be;
* ``program`` - a program's steps across statements (:class:`ProgramPlan`: shared steps once,
  statements no output needs dropped).
"""

from .path import DISTRIBUTIVE, Product, product_form
from .optimize import check_optimize
from .plan import Plan, Step, make_plan, step_statement
from .program import ProgramPlan, ProgramStep, canonical
from .stats import TensorStats, degree_bound, estimate, of_operand, sampled_estimate, uniform_estimate

__all__ = ["DISTRIBUTIVE", "Plan", "Product", "Step", "TensorStats", "check_optimize", "degree_bound", "estimate",
           "make_plan", "of_operand", "ProgramPlan", "ProgramStep", "canonical", "product_form", "sampled_estimate",
           "step_statement", "uniform_estimate"]
