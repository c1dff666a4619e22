"""Whether an address is loopback, and the rule every server bakeoff starts keeps:
off loopback, a token. Apart from the server so that a command that starts another
program's server (a generative engine's own) checks the same rule without the
serve extra."""

from __future__ import annotations

import ipaddress

from bakeoff.errors import UserError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere, so it needs a token


def check_exposure(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise UserError(
            f"--host {host} is not a loopback address: give --token T (or set "
            "BAKEOFF_SERVE_TOKEN) so that every request must carry it"
        )
