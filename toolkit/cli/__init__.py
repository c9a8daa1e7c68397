"""The ``edgekit`` command line: one module per command group, imports deferred so ``edgekit
--help`` stays instant. The app and its entry point are in ``edgekit.cli.app``."""


def main() -> None:
    """Console-script entry point (also ``python -m edgekit.cli``)."""
    from edgekit.cli.app import main as run

    run()
