"""``python -m app``: the ``vllm-gateway`` command (app/serve/cli.py)."""

import sys

from app.serve.cli import main

if __name__ == "__main__":
    sys.exit(main())
