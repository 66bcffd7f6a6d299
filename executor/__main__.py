"""`python -m executor` = the `executor` console script."""

import sys

from executor.cli import main

sys.exit(main())
