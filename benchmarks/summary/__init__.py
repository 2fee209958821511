"""A run's summary: the small page that stands for it in git.

Every benchmark writes its raw results (``result.json``, logs, profiles,
archives) under ``reports/``, which git ignores, and beside them
``summary.md``: a header stamping the run (the commit it measured, the
date, the command, the machine and the layout), the tables the benchmark
printed (medians of the rounds) and each round's cells, which pages quote
when a median is not enough. ``python -m benchmarks.keep`` copies a summary
into ``results/`` and stamps it in ``results/measurements.yaml``.

- ``page``: the stamp, the header it is written as, Markdown helpers;
- ``kinds``, ``overhead``, ``prefix``: what each benchmark kind adds to its
  tables (its layout, its rounds);
- ``write``: a summary from a run's result (``run_benchmark`` calls it);
- ``manifest``: ``results/measurements.yaml``;
- ``legacy``: the summaries of the runs whose raw results were kept under
  ``docs/`` before, made from those files.
"""
