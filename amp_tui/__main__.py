"""`python -m amp_tui`: the same as the `amp-tui` command."""

import sys

from amp_tui.cli import main

sys.exit(main())
