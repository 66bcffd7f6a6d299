"""`python -m perfmodel` = the `perfmodel` console script."""

import sys

from perfmodel.cli import main

sys.exit(main())
