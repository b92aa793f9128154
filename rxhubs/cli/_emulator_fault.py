"""``rxhubs emulator fault ...``: inject faults into a running ``rxhubs emulator --control-port N``.

Each command is one JSON request to the emulator's control API (:mod:`rxhubs.emulator._control`) on the
address ``--control`` names (or ``$RXHUBS_EMULATOR_CONTROL``); bad input and refusals print one line and exit 2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
from typing import Any

from rxhubs.errors import ConfigurationError, EmulatorError

CONTROL_VARIABLE = "RXHUBS_EMULATOR_CONTROL"

EXAMPLES = """examples:
  rxhubs emulator --hub telemetry:4 --port 0 --control-port 8474     # prints: fault control on 127.0.0.1:8474
  rxhubs emulator fault busy --seconds 10 --control 127.0.0.1:8474   # attach, flow and management refused
  rxhubs emulator fault busy --seconds 5 --on attach,flow --hub telemetry --control 127.0.0.1:8474
  rxhubs emulator fault close --control 127.0.0.1:8474               # every connection: amqp:connection:forced
  rxhubs emulator fault steal --hub telemetry --partition 1 --control 127.0.0.1:8474
  rxhubs emulator fault partitions --hub telemetry --count 6 --control 127.0.0.1:8474
  rxhubs emulator fault promote --control 127.0.0.1:8474             # geo-replication: new segment, string offsets
  rxhubs emulator fault clear --control 127.0.0.1:8474               # end server-busy windows now
  export RXHUBS_EMULATOR_CONTROL=127.0.0.1:8474; rxhubs emulator fault status

What the real service does in each case: docs/emulator.md, "Fault control".
"""


def add_fault_parser(emulator_parser: argparse.ArgumentParser) -> None:
    """Register ``rxhubs emulator fault {busy,close,steal,partitions,promote,clear,status}``."""
    commands = emulator_parser.add_subparsers(dest="emulator_command", metavar="fault",
                                              parser_class=type(emulator_parser))
    fault = commands.add_parser("fault", help="inject a fault into a running emulator (see --control-port)",
                                description="Inject the service's faults into a running 'rxhubs emulator'.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = fault.add_subparsers(dest="fault", metavar="FAULT", required=True, parser_class=type(emulator_parser))

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = kinds.add_parser(name, help=help_text, description=help_text, epilog=EXAMPLES,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--control", metavar="HOST:PORT",
                            help=f"the emulator's control address (default ${CONTROL_VARIABLE})")
        parser.set_defaults(run=run)
        return parser

    busy = add("busy", "answer com.microsoft:server-busy for a while (the SDK backs off 4 s and retries)")
    busy.add_argument("--seconds", type=float, required=True, help="how long the window lasts")
    busy.add_argument("--on", default="attach,flow,management", metavar="KINDS",
                      help="comma-separated: attach, flow, management (default all three)")
    busy.add_argument("--hub", help="only this event hub (default every hub)")
    close = add("close", "close client connections with amqp:connection:forced")
    close.add_argument("--hub", help="only connections with links to this event hub")
    steal = add("steal", "detach a partition's receivers with amqp:link:stolen (as a higher owner level does)")
    steal.add_argument("--hub", required=True)
    steal.add_argument("--partition", required=True)
    steal.add_argument("--consumer-group", default="$Default")
    grow = add("partitions", "add partitions to a live event hub (never fewer)")
    grow.add_argument("--hub", required=True)
    grow.add_argument("--count", type=int, required=True, help="the new partition count")
    add("promote", "a geo-replication promotion: new replication segment, string offsets, connections closed")
    add("clear", "end every timed fault (server-busy windows) now")
    add("status", "print the faults in force, connections and consumer links")


def parse_control(text: str | None) -> tuple[str, int]:
    """``"127.0.0.1:8474"`` -> ``("127.0.0.1", 8474)``.

    Raises:
        ConfigurationError: Missing or not HOST:PORT.

    Example:
        >>> parse_control("127.0.0.1:8474")
        ('127.0.0.1', 8474)
    """
    if not text:
        raise ConfigurationError(f"no control address: pass --control HOST:PORT (printed by 'rxhubs emulator "
                                 f"--control-port N') or set {CONTROL_VARIABLE}")
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"bad control address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8474")
    return host, int(port)


def request(control: str | None, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One call to the control API; its JSON answer.

    Raises:
        ConfigurationError: The emulator refused the request (its one-line reason).
        EmulatorError: Nothing answers at the address, or the answer is not the control API's.
    """
    host, port = parse_control(control)
    conn = http.client.HTTPConnection(host, port, timeout=15)
    try:
        payload = json.dumps(body or {}).encode()
        conn.request(method, path, body=payload if method == "POST" else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise EmulatorError(f"no emulator fault control at {host}:{port}: {getattr(exc, 'strerror', None) or exc}"
                            ) from None
    finally:
        conn.close()
    try:
        answer = json.loads(raw)
    except ValueError:
        raise EmulatorError(f"{host}:{port} did not answer as the emulator's fault control") from None
    if not isinstance(answer, dict):
        raise EmulatorError(f"{host}:{port} did not answer as the emulator's fault control")
    if response.status != 200:
        raise ConfigurationError(str(answer.get("error", f"status {response.status}")))
    return answer


def run(args: argparse.Namespace) -> int:
    """Send the fault named on the command line; print what the emulator answered. Returns the exit code."""
    control = args.control or os.environ.get(CONTROL_VARIABLE)
    fault = args.fault
    if fault == "busy":
        body: dict[str, Any] = {"seconds": args.seconds, "on": args.on, "hub": args.hub}
        answer = request(control, "POST", "/faults/busy", body)
        print("\n".join(answer["active"]))
    elif fault == "close":
        answer = request(control, "POST", "/faults/close", {"hub": args.hub})
        print(f"closed {answer['closed']} connection(s) with amqp:connection:forced")
    elif fault == "steal":
        answer = request(control, "POST", "/faults/steal", {"hub": args.hub, "partition": args.partition,
                                                            "consumer_group": args.consumer_group})
        print(f"detached {answer['stolen']} receiver link(s) of partition {args.partition} with amqp:link:stolen")
    elif fault == "partitions":
        answer = request(control, "POST", "/faults/partitions", {"hub": args.hub, "count": args.count})
        print(f"event hub {args.hub} has {answer['partition_count']} partitions")
    elif fault == "promote":
        answer = request(control, "POST", "/faults/promote")
        print(f"promoted: replication segment {answer['segment']}, closed {answer['closed']} connection(s); offsets "
              "now take the geo-replicated form")
    elif fault == "clear":
        request(control, "POST", "/faults/clear")
        print("no fault in force")
    else:
        _print_status(request(control, "GET", "/status"))
    return 0


def _print_status(status: dict[str, Any]) -> None:
    active = status.get("active") or []
    print("active faults: " + ("none" if not active else "; ".join(active)))
    print(f"connections: {status.get('connections', 0)}; replication segment: {status.get('replication_segment', 0)}")
    links = status.get("consumer_links") or {}
    print("consumer links: " + (", ".join(f"{hub}={n}" for hub, n in links.items()) or "none"))
    log = status.get("link_log") or {}
    conditions = ", ".join(f"{c}={n}" for c, n in (log.get("conditions") or {}).items()) or "none"
    print(f"link log: {log.get('attach', 0)} attach, {log.get('detach', 0)} detach, {log.get('refuse', 0)} refuse; "
          f"conditions: {conditions}")
    sys.stdout.flush()
