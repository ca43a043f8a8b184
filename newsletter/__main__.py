"""``python -m newsletter``."""

from .cli import main

main(prog_name="newsletter")
