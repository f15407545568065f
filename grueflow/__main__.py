"""``python -m grueflow``: the ``grueflow`` command (:func:`grueflow.cli.main`, pyproject's ``[project.scripts]``)."""

import sys

from grueflow.cli import main

sys.exit(main())
