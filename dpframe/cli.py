"""The ``dpframe`` command line (filled in below)."""


def main() -> None:
    """Entry point."""
