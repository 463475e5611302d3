"""``python -m unstable.cli``: the ``unstable`` command."""

import sys

from unstable.cli.commands import main

sys.exit(main())
