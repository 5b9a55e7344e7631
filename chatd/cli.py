"""The `chatd` command: dev stack, worker, gateway, migrations, API keys, quotas, usage
reports and retention."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import get_args

import uvloop

from chatd.client.options import add_client_commands
from chatd.store.quotas import LimitOverrides
from chatd.store.usage_reports import DEFAULT_DAYS, Grouping, PeriodError, parse_day

__all__ = ["main"]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def _add_dev(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser("dev", help="run Temporal, Postgres, a worker and the gateway locally")
    dev.add_argument(
        "--data-dir",
        default=_env("CHATD_DATA_DIR", ".data"),
        help="where Postgres and Temporal keep their state (env CHATD_DATA_DIR)",
    )
    dev.add_argument("--api-port", type=int, default=int(_env("CHATD_API_PORT", "8080") or 0))
    dev.add_argument(
        "--temporal-port", type=int, default=int(_env("CHATD_TEMPORAL_PORT", "7233") or 0)
    )
    dev.add_argument(
        "--temporal-ui-port", type=int, default=None, help="default: temporal port + 1000"
    )
    dev.add_argument(
        "--postgres-port",
        type=int,
        default=int(_env("CHATD_POSTGRES_PORT", "0") or 0),
        help="default: temporal port + 10",
    )
    dev.add_argument(
        "--demo-port",
        type=int,
        default=int(_env("CHATD_DEMO_PORT", "0") or 0),
        help="the demo model's port (default: any free port; env CHATD_DEMO_PORT)",
    )
    dev.add_argument(
        "--api-key",
        default=_env("CHATD_API_KEY"),
        help="use this API key instead of a generated one (env CHATD_API_KEY)",
    )
    dev.add_argument("--no-worker", action="store_true", help="start everything but the worker")


def _add_codec_server(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    codec = sub.add_parser(
        "codec-server",
        help="serve Temporal's codec endpoint, to read encrypted histories (CHATD_CODEC_KEYS)",
        description=(
            "Decrypts (and encrypts) payloads for `temporal workflow show --codec-endpoint"
            " URL --codec-auth 'Bearer TOKEN'` and the Temporal UI. Callers present"
            " CHATD_CODEC_SERVER_TOKEN as a bearer token; CHATD_CODEC_CORS_ORIGINS lists the"
            " browser origins (the Temporal UI's) allowed to call it."
        ),
    )
    codec.add_argument("--host", default=_env("CHATD_CODEC_SERVER_HOST", "127.0.0.1"))
    codec.add_argument(
        "--port", type=int, default=int(_env("CHATD_CODEC_SERVER_PORT", "8089") or 0)
    )


def _add_gc(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gc = sub.add_parser(
        "gc",
        help="run one retention round now (DATABASE_URL)",
        description=(
            "Delete what retention forgets, once, and print how much of each kind went:"
            " stream events older than CHATD_EVENT_RETENTION_HOURS (24), queued messages"
            " taken by a turn over CHATD_QUEUED_MESSAGE_RETENTION_HOURS (168) ago, tool"
            " results and start markers of turns ended over CHATD_TOOL_CALL_RETENTION_HOURS"
            " (24) ago, and workspaces under the workspace root of chats idle for"
            " CHATD_WORKSPACE_RETENTION_HOURS (720). 0 keeps a kind forever. Workers run"
            " the same round every CHATD_RETENTION_INTERVAL_SECONDS (600)."
        ),
    )
    gc.add_argument(
        "--dry-run", action="store_true", help="print what would be deleted, delete nothing"
    )
    gc.add_argument(
        "--workspace-root",
        type=Path,
        default=None,
        help="the workspaces to sweep (default: CHATD_WORKSPACE_ROOT, else .data/workspaces)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatd", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_dev(sub)
    add_client_commands(sub)
    sub.add_parser("worker", help="run a worker (TEMPORAL_ADDRESS, DATABASE_URL, provider keys)")
    api = sub.add_parser("api", help="run the HTTP gateway (TEMPORAL_ADDRESS, DATABASE_URL)")
    api.add_argument("--host", default=_env("CHATD_API_HOST", "127.0.0.1"))
    api.add_argument("--port", type=int, default=int(_env("CHATD_API_PORT", "8080") or 0))
    sub.add_parser("migrate", help="apply database migrations (DATABASE_URL)")
    _add_codec_server(sub)
    _add_gc(sub)
    where = _data_dir_option()
    _add_keys(sub, where)
    _add_limits(sub, where)
    _add_usage(sub, where)
    return parser


def _data_dir_option() -> argparse.ArgumentParser:
    """`--data-dir`, for the commands that reach a database (see `_admin_database_url`)."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--data-dir",
        help="the data dir of a running `chatd dev`, instead of DATABASE_URL (without either:"
        " the dev data dir, env CHATD_DATA_DIR or .data, if a `chatd dev` runs there)",
    )
    return where


def _add_keys(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], where: argparse.ArgumentParser
) -> None:
    keys = sub.add_parser("keys", help="manage API keys (DATABASE_URL, or a `chatd dev`)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", parents=[where], help="create a key and print it once")
    create.add_argument("--owner", required=True)
    create.add_argument("--name", default="")
    keys_sub.add_parser("list", parents=[where], help="list keys (never the secrets)")
    revoke = keys_sub.add_parser("revoke", parents=[where], help="revoke a key by id")
    revoke.add_argument("key_id", type=uuid.UUID)


def _limit_value(kind: type[int] | type[float]) -> Callable[[str], int | float | None]:
    """A limit as typed, or `default` (None: the value of the defaults row, or built in)."""

    def parse(text: str) -> int | float | None:
        if text == "default":
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number or `default`") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is negative")
        return value

    return parse


def _add_limits(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], where: argparse.ArgumentParser
) -> None:
    limits = sub.add_parser(
        "limits",
        help="show or set an owner's quotas (DATABASE_URL, or a `chatd dev`)",
        description="Owner `*` holds the defaults; an owner's own values override them."
        " Every gateway applies a change within 10 s.",
    )
    limits_sub = limits.add_subparsers(dest="limits_command", required=True)
    show = limits_sub.add_parser(
        "show", parents=[where], help="the limits that apply, and today's tokens"
    )
    show.add_argument("owner")
    change = limits_sub.add_parser(
        "set", parents=[where], help="set some of an owner's limits (`default` unsets one)"
    )
    change.add_argument("owner", help="an owner, or `*` for the defaults")
    for name, field in LimitOverrides.model_fields.items():
        kind = float if field.annotation == float | None else int
        change.add_argument(
            f"--{name.replace('_', '-')}",
            type=_limit_value(kind),
            default=argparse.SUPPRESS,
            metavar="N|default",
            help=f"{name.replace('_', ' ')} (`default`: unset)",
        )


def _day(param: str) -> Callable[[str], date]:
    """An argparse type: a `YYYY-MM-DD` day, its errors naming the option."""

    def parse(text: str) -> date:
        try:
            return parse_day(text, param)
        except PeriodError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _add_usage(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], where: argparse.ArgumentParser
) -> None:
    usage = sub.add_parser(
        "usage",
        parents=[where],
        help="report model steps' tokens and cost (DATABASE_URL, or a `chatd dev`)",
        description="Every attempt of a model step over UTC days, summed per group.",
    )
    usage.add_argument("--owner", help="one owner's spend (default: every owner's)")
    usage.add_argument(
        "--from",
        dest="first",
        type=_day("from"),
        metavar="YYYY-MM-DD",
        help=f"the first day (default: {DEFAULT_DAYS} days through --to)",
    )
    usage.add_argument(
        "--to",
        dest="last",
        type=_day("to"),
        metavar="YYYY-MM-DD",
        help="the last day, included (default: today)",
    )
    usage.add_argument("--group-by", choices=get_args(Grouping), default="day")
    usage.add_argument("--csv", action="store_true", help="CSV (no total row) instead of a table")


def _database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.exit("chatd: set DATABASE_URL (e.g. postgresql://user:pass@host:5432/chatd)")
    return url


def _admin_database_url(data_dir: str | None) -> str:
    """`--data-dir`'s running `chatd dev`, else DATABASE_URL, else the default dev data dir's."""
    if data_dir is None and os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from chatd.dev import database_url_file

    folder = Path(data_dir or _env("CHATD_DATA_DIR", ".data") or ".data")
    try:
        return database_url_file(folder.resolve()).read_text().strip()
    except FileNotFoundError:
        if data_dir is None:
            sys.exit("chatd: set DATABASE_URL, or pass --data-dir of a running `chatd dev`")
        sys.exit(f"chatd: no `chatd dev` is running with data dir {data_dir}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `chatd` console script."""
    args = _parser().parse_args(argv)
    if args.command in ("chat", "chats"):
        from chatd.client.chat import run_client

        sys.exit(run_client(args))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        # uvloop: its sockets and callbacks cost the worker and the gateway less CPU than
        # asyncio's own loop (bench/README.md, "uvloop").
        uvloop.run(_run(args))
    except KeyboardInterrupt:
        pass


async def _run(args: argparse.Namespace) -> None:
    from chatd import commands

    if args.command == "dev":
        from chatd.dev import DevOptions, run_dev

        await run_dev(DevOptions.from_args(args))
    elif args.command == "worker":
        await commands.run_worker(_database_url())
    elif args.command == "api":
        await commands.run_api(_database_url(), args.host, args.port)
    elif args.command == "migrate":
        await commands.run_migrate(_database_url())
    elif args.command == "codec-server":
        await commands.run_codec_server(args.host, args.port)
    elif args.command == "keys":
        await commands.run_keys(_admin_database_url(args.data_dir), args)
    elif args.command == "limits":
        await commands.run_limits(_admin_database_url(args.data_dir), args)
    elif args.command == "usage":
        await commands.run_usage(_admin_database_url(args.data_dir), args)
    elif args.command == "gc":
        await commands.run_gc(_database_url(), args.dry_run, args.workspace_root)


if __name__ == "__main__":
    main()
