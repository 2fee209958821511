"""The ``vllm-gateway`` command (also ``python -m app``).

    vllm-gateway            run the gateway (the same as ``vllm-gateway serve``)
    vllm-gateway settings   print the settings it would run with, secrets masked
    vllm-gateway --version

Settings come from ``GATEWAY_*`` environment variables only (docs/configuration.md
lists them); the command line picks what to do. The arguments are
parsed before any setting is read, so ``--help`` and ``--version`` start
nothing and work whatever the environment holds.
"""

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from app import __version__
from app.serve.run import run_gateway
from app.settings import Settings, effective_settings, get_settings, unknown_variables


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = get_settings()
    except ValidationError as error:
        sys.stderr.write(f"vllm-gateway: invalid settings\n{error}\n")
        return 2
    if args.command == "settings":
        print_settings(settings)
        return 0
    run_gateway(settings)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-gateway",
        usage="%(prog)s [-h] [--version] [serve | settings]",
        description=(
            "The front door for vLLM engines: admission control, SSE relay, cancellation,"
            " API keys, metrics. Settings are GATEWAY_* environment variables, e.g."
            " GATEWAY_UPSTREAM_URL=http://127.0.0.1:8001 (the engine) and GATEWAY_PORT=8000."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser("serve", help="run the gateway (the default)")
    commands.add_parser(
        "settings",
        help="print every setting as GATEWAY_NAME=value, as the gateway would run with it"
        " (secrets masked), and warn about GATEWAY_* variables that name no setting",
    )
    return parser


def print_settings(settings: Settings) -> None:
    for name, value in effective_settings(settings):
        sys.stdout.write(f"{name}={value}\n")
    for unknown, closest in unknown_variables(os.environ):
        hint = f" (did you mean {closest}?)" if closest else ""
        sys.stderr.write(f"warning: {unknown} is not a setting and is ignored{hint}\n")
