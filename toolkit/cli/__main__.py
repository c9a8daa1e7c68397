"""``python -m edgekit.cli``: the ``edgekit`` command."""

from edgekit.cli.app import main

main()
