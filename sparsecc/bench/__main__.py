"""``python -m sparsecc.bench``: the same as ``python -m sparsecc bench``."""

import sys

from .cli import main

sys.exit(main())
