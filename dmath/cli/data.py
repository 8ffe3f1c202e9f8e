"""``dmath data fetch mnist|fashion-mnist [--dir DIR]``: get a data set (see dmath.train.downloads)."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dmath data", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download and unpack a data set as IDX files")
    f.add_argument("name", choices=["mnist", "fashion-mnist"])
    f.add_argument("--dir", default=None, help="data directory (default $DMATH_DATA or ./data)")
    f.add_argument("--gz", action="store_true",
                   help="keep Fashion-MNIST's .gz IDX files (30 MB) instead of unpacking them")
    args = ap.parse_args(argv)
    from ..train.downloads import fetch
    d = fetch(args.name, args.dir, args.gz)
    print(f"{args.name}: {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
