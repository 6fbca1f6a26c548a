"""`python -m hwtune` is the `hwtune` command."""

import sys

from hwtune.cli import main

sys.exit(main())
