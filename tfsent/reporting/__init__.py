"""An analyst's report of a tfsent output: one self-contained HTML page (``python -m tfsent.report``).

``tables`` recognises a tfsent output by its columns and reads it in chunks; ``topk``, ``rows``, ``timeline`` and
``documents`` keep what the page needs as bounded aggregates; ``training`` reads a training run folder; ``svg``
draws the charts in pure Python; ``page`` and ``sections`` assemble the escaped HTML; ``build`` runs it all and
writes the page atomically.
"""
