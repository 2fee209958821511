"""``python -m app.keys new --id ID --tenant T``: make a key.

Prints the key once (keep it: only its hash is stored) and the YAML entry to
add to the keys file.
"""

import argparse
import secrets
import sys

import yaml
from pydantic import ValidationError

from app.keys.file import KeyEntry
from app.keys.ring import hash_key
from app.request.identity import PRIORITIES

_PREFIX = "vgw-"


def new_entry(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    key = _PREFIX + secrets.token_urlsafe(32)
    entry: dict[str, object] = {
        "id": args.id,
        "tenant": args.tenant,
        "sha256": hash_key(key),
        "priorities": args.priorities.split(","),
    }
    for name in ("requests_per_minute", "tokens_per_minute", "max_concurrent"):
        value = getattr(args, name)
        if value is not None:
            entry[name] = value
    if args.models is not None:
        entry["models"] = args.models.split(",")
    return key, entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.keys")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="make a key and print its keys-file entry")
    new.add_argument("--id", required=True)
    new.add_argument("--tenant", required=True)
    new.add_argument(
        "--priorities", default="normal", help=f"comma-separated, of {', '.join(PRIORITIES)}"
    )
    new.add_argument("--requests-per-minute", type=int)
    new.add_argument("--tokens-per-minute", type=int)
    new.add_argument("--max-concurrent", type=int)
    new.add_argument(
        "--models", help="comma-separated names or patterns (acme-*) it may call; unset: all"
    )
    args = parser.parse_args(argv)
    key, entry = new_entry(args)
    try:
        KeyEntry.model_validate(entry)
    except ValidationError as exc:
        parser.error(str(exc.errors()[0]["msg"]))
    sys.stdout.write(f"key (shown once; only its hash is stored): {key}\n\n")
    sys.stdout.write("add to the keys file, under `keys:`\n")
    sys.stdout.write(yaml.safe_dump([entry], sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
