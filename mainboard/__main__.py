"""`python -m mainboard` is the `mainboard` command."""

from mainboard.cli import main

main()
