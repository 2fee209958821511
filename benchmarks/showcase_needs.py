"""What ``make showcase`` needs from the machine beyond ``make setup``:
Prometheus, whose data the dashboards are drawn from, and chromium, which
takes the live page's picture. Checked before anything is set up or
started — ``python3 -m benchmarks.showcase_needs`` uses the standard
library alone, so it runs before the virtualenv exists — and named in one
line with the package that gives each, exit status 2."""

import shutil
import sys

from loadtests.live_page import CHROMIUM

# (the command, the Debian package that gives it)
NEEDS = (("prometheus", "prometheus"), (CHROMIUM, "chromium"))


def missing() -> list[str]:
    """What the showcase needs and this machine lacks, each with the
    package that gives it (empty: nothing)."""
    return [
        f"`{command}` (apt-get install {package})"
        for command, package in NEEDS
        if shutil.which(command) is None
    ]


def main() -> int:
    lacking = missing()
    if lacking:
        print(f"make showcase needs {'; '.join(lacking)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
