"""``python -m app``: the ``vllm-gateway`` command (app/cli.py)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
