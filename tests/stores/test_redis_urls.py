"""A Redis URL whose password holds an unencoded URL delimiter: every Redis client refuses it with the project's
error, naming the URL without any part of the password and saying to percent-encode it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis_server import free_port, require_redis

from toolsearch._errors import SessionStoreError
from toolsearch.mcp.shared import RedisCatalogBoard
from toolsearch.stores import store_from_url
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.usage import UsageError

PASSWORD_PARTS = ("Xy7", "kQ2pLm")

CLIENTS: list[tuple[str, Callable[[str], Any], type[Exception]]] = [
    ("session store", lambda url: store_from_url(url, ttl_seconds=60, timeout=0.3), SessionStoreError),
    ("usage store", lambda url: RedisUsageStore(url, timeout=0.3), UsageError),
    ("catalog board", lambda url: RedisCatalogBoard(url, timeout=0.3), SessionStoreError),
]


@pytest.mark.parametrize("delimiter", ["#", "?", "/"])
@pytest.mark.parametrize(("what", "make", "error"), CLIENTS, ids=[c[0] for c in CLIENTS])
def test_a_password_with_a_url_delimiter_is_refused_without_showing_it(
    delimiter: str, what: str, make: Callable[[str], Any], error: type[Exception]
) -> None:
    # Before: redis-py's `ValueError: Port could not be cast to integer value as 'Xy7'`, the start of the password
    require_redis()
    url = f"redis://:Xy7{delimiter}kQ2pLm@127.0.0.1:{free_port()}/0"
    with pytest.raises(error) as caught:
        make(url)
    message = str(caught.value)
    assert not any(part in message for part in PASSWORD_PARTS), message
    assert f"{what} URL 'redis://***@127.0.0.1:" in message and "percent-encode" in message, message


def test_a_percent_encoded_password_is_taken() -> None:
    require_redis()
    url = f"redis://:Xy7%23kQ2pLm@127.0.0.1:{free_port()}/0"
    for _, make, _ in CLIENTS:
        client = make(url)  # nothing is sent before the first command: no Redis needed
        assert "Xy7" not in repr(getattr(client, "url", ""))
