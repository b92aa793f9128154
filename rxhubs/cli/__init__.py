"""The ``rxhubs`` command line: ``demo``, ``consume``, ``checkpoints``, ``emulator``, ``bench``.

Every command prints one clear line and exits with code 2 on bad input (a malformed connection string,
an unreachable endpoint, an unknown hub): no traceback, and never a secret.

Example:
    >>> main(["--version"])  # doctest: +SKIP
    rxhubs 0.1.0
    receive path: native (compiled frame reader: _frames_c.cpython-311-x86_64-linux-gnu.so)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from collections.abc import Sequence

from rxhubs.errors import RxHubsError

__all__ = ["main"]

# subcommand -> module with add_parser(subparsers) and run(args) -> int
COMMANDS = {
    "demo": "rxhubs.cli._demo",
    "consume": "rxhubs.cli._consume",
    "checkpoints": "rxhubs.cli._checkpoints",
    "emulator": "rxhubs.cli._emulator",
    "bench": "rxhubs.cli._bench",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line (argparse's own code) and no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser with every available subcommand."""
    from rxhubs import __version__
    from rxhubs.transport._frames import receive_path

    parser = _Parser(
        prog="rxhubs",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the --version text's two lines
        description="Consume Azure Event Hubs with reactive pipelines.",
        epilog="Run 'rxhubs COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"rxhubs {__version__}\nreceive path: {receive_path()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module_name in COMMANDS.values():
        if importlib.util.find_spec(module_name) is None:
            continue  # a command still being built
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose == 0:
        # the SDK logs every retry and failed pull at WARNING; rxhubs reports the same failures itself
        logging.getLogger("azure").setLevel(logging.ERROR)
    from rxhubs.transport._connection_string import redact

    try:
        code: int = args.run(args)
        return code
    except RxHubsError as exc:
        print(f"rxhubs {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"rxhubs {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
