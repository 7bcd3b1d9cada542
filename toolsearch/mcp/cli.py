"""`toolsearch mcp serve`: the command-line face of the gateway (wired in by toolsearch.cli)."""

from __future__ import annotations

import argparse

from .._errors import AuthConfigError, InvalidArgumentError, PolicyError, ToolSearchError
from ..augment import Augmentation
from ..backends import get_backend_spec
from ..model_option import check_model
from .auth import AuthSettings, add_auth_arguments
from .options import GatewayOptions, add_mcp_arguments
from .policy import add_policy_arguments, policy_from_args
from .settings import GatewaySettings
from .startup import serve
from .workers import add_worker_arguments, check_worker_arguments, run_workers, worker_settings

__all__ = ["add_arguments", "check", "main", "settings_from_args"]

# Flags only the HTTP transport reads: on stdio (the client launches the gateway and talks over its pipes) they
# would be accepted and do nothing, so a user who forgot `--transport http` would never learn it.
_HTTP_ONLY = (
    "host", "port", "path", "resource_url", "allowed_origins", "allowed_hosts", "rate_limit", "rate_burst",
    "header_timeout", "body_timeout", "auth_failures", "sessions_per_caller", "sessions_per_address",
    "trust_proxy_header", "forwarded_allow_ips",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mcp_arguments(parser)
    add_worker_arguments(parser)
    add_auth_arguments(parser)
    add_policy_arguments(parser)


def _check_combinations(args: argparse.Namespace) -> None:
    """Refuse flags that would be accepted and ignored or that contradict each other, naming them (an
    InvalidArgumentError: the command line is wrong); a --usage-log that is a folder is a ToolSearchError."""
    if args.transport != "http":
        defaults = argparse.ArgumentParser()
        add_arguments(defaults)
        given = [name for name in _HTTP_ONLY if getattr(args, name, None) != defaults.get_default(name)]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            verb = "applies" if len(given) == 1 else "apply"
            raise InvalidArgumentError(
                f"{flags} {verb} to the HTTP transport only: add --transport http, or leave them "
                "out (on stdio the client that launches the gateway talks to it over its pipes)"
            )
    if args.no_usage_log and args.usage_log is not None:
        raise InvalidArgumentError("--no-usage-log and --usage-log FILE contradict each other: give one of them")
    if args.no_usage_log and args.usage_privacy != "hashed":
        raise InvalidArgumentError("--usage-privacy says what the usage log keeps, and --no-usage-log keeps none: "
                              "give one of them")
    if args.usage_log is not None and args.usage_log.is_dir():
        raise ToolSearchError(f"--usage-log {args.usage_log} is a folder: name a JSON file, e.g. "
                              f"--usage-log {args.usage_log / 'usage.json'}")


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    """The one settings value the parsed flags describe.

    A flag value out of range or a combination of flags that cannot work is an InvalidArgumentError (an unknown
    backend a BackendError), found before any upstream server starts: `toolsearch mcp serve` exits 2 on it. A file
    that cannot be used (--tool-policy, --augment, --auth-tokens, a --usage-log that is a folder) keeps its own
    error, a ToolSearchError (exit 1).
    """
    _check_combinations(args)
    try:
        auth = AuthSettings.from_args(args, read_files=False)  # the message names the flag
    except AuthConfigError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if args.backend != "auto":  # an unknown one fails here, before any upstream server starts (and is said once)
        get_backend_spec(args.backend)
    if args.model is not None:
        check_model(get_backend_spec(args.backend), args.model)  # a BackendError that says which backends embed
    try:
        options = GatewayOptions.from_args(args)
        workers = worker_settings(args)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    policy = policy_from_args(args)
    augment = Augmentation.from_file(args.augment) if args.augment else None
    try:
        settings = GatewaySettings(
            transport=args.transport,
            host=args.host,
            port=args.port,
            path=args.path,
            backend=args.backend,
            backend_options={"model": args.model} if args.model is not None else {},
            pinned=tuple(args.pin),
            max_discovered=args.max_discovered,
            min_relative_score=args.min_relative_score,
            call_tool=not args.no_call_tool,
            require_discovery=args.require_discovery,
            contexts=not args.no_context,
            policy=policy,
            auth=auth,
            options=options,
            workers=workers,
            augment=augment,
        )
    except PolicyError:  # the policy file names an issuer the flags do not: the file's fault, said as it is
        raise
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    auth.check_files()  # AuthConfigError naming the --auth-tokens entry at fault
    return settings


def check(args: argparse.Namespace) -> None:
    """Every check `toolsearch mcp serve` makes before any upstream server starts; toolsearch.cli runs it
    before `main`, answering a usage error (InvalidArgumentError, BackendError) with exit code 2 and any
    other ToolSearchError (a file that cannot be used) with 1. The settings are kept for `main`."""
    check_worker_arguments(args)
    args.gateway_settings = settings_from_args(args)


def main(args: argparse.Namespace) -> int:
    settings = getattr(args, "gateway_settings", None)
    if not isinstance(settings, GatewaySettings):  # called without `check` (python -m toolsearch.mcp, a test)
        check_worker_arguments(args)
        settings = settings_from_args(args)  # every check before any upstream server starts
    if args.workers > 1:
        parser = argparse.ArgumentParser()
        add_arguments(parser)  # the workers get every option this command has
        return run_workers(parser, args)
    serve(args.config, settings, quiet=bool(getattr(args, "quiet", False)))
    return 0
