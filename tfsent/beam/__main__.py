"""``python -m tfsent.beam``: see :mod:`tfsent.beam.cli`."""

from tfsent.beam.cli import main

main()
