"""``robolearn keys generate DIR [--clients NAME ...]``: the CurveZMQ key folders of a run across machines."""

from __future__ import annotations

import argparse

from robolearn.transport.security import KeysError, generate_keys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="robolearn keys", description=__doc__)
    sub = ap.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write a server key pair and one client key pair per machine")
    gen.add_argument("dir", help="a new, empty folder")
    gen.add_argument("--clients", nargs="*", default=[], metavar="NAME",
                     help="one name per machine that connects to the learner's (e.g. robot-pc-1)")
    args = ap.parse_args(argv)
    try:
        folders = generate_keys(args.dir, args.clients)
    except KeysError as exc:
        ap.error(str(exc))
    print(f"server folder (the learner's machine: runtime.keys_dir={folders['server']}):")
    for name, path in folders.items():
        if name != "server":
            print(f"  give {path} to {name} (its runtime.keys_dir); it holds no server secret")
    print("secret files are 0600; never copy the server folder off the learner's machine")
    return 0
