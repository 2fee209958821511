"""The course's experiments as commands, against the running stack.

    make up                                    # in one terminal
    make experiments                           # in another: all four
    .venv/bin/python -m benchmarks.experiments sweep --help

Four experiments from the course's chapters "Why Inference Servers Exist"
and "Stage 1 — Core Concepts" (KV-cache capacity): ``batching``, ``sweep``,
``capacity`` and ``degradation``. Each writes a Markdown page with the
course's claim beside the measurement, its data as JSON and a plot, under
``reports/experiments-<time>/`` (or ``--out``), named after the engine's KV
cache size (results depend on it); the page is stamped as the run's summary,
which ``make keep`` keeps in ``results/experiments/``, its plot in
``docs/experiments/``. Nothing here starts an engine or a gateway.
"""
