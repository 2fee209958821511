"""Wait until a URL answers 200, or fail after a timeout.

python deploy/wait_for_http.py http://127.0.0.1:8001/health --timeout 600
"""

import argparse
import sys
import time
import urllib.error
import urllib.request


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(args.url, timeout=2) as response:
                if response.status == 200:
                    return 0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    print(f"{args.url} did not answer 200 within {args.timeout:.0f}s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
