"""The gateway's settings shown by `repr` (a debugger, an error reporter recording locals, a test's diff) keep the
store URLs' passwords hidden, through `GatewaySettings` too."""

from __future__ import annotations

import pytest

from toolsearch.mcp.settings import GatewaySettings, WorkerSettings


@pytest.mark.parametrize(("session_store", "store", "shown"), [
    # before: the dataclass repr, both passwords whole
    ("redis://:PWSECRET444@cache.internal:6379/0", "postgresql://toolsearch:PWSECRET444@db.internal:5432/tools",
     "session_store='redis://***@cache.internal:6379/0', session_header=None, session_ttl=None, index_dir=None, "
     "store='postgresql://***@db.internal:5432/tools', catalog='default'"),
    ("rediss://default:PWSECRET444@cache:6380/1?ssl_cert_reqs=none", "host=db user=ts password='PWSECRET444 x'",
     "session_store='rediss://***@cache:6380/1?ssl_cert_reqs=***', session_header=None, session_ttl=None, "
     "index_dir=None, store='host=db user=ts password=***'"),
])
def test_the_settings_repr_hides_the_store_passwords(session_store: str, store: str, shown: str) -> None:
    workers = WorkerSettings(session_store=session_store, store=store, catalog_poll=2.0)
    for text in (repr(workers), repr(GatewaySettings(workers=workers)), str(workers)):
        assert "PWSECRET444" not in text, text
        assert f"WorkerSettings({shown}" in text
        assert "catalog_poll=2.0" in text and "trust_proxy_header=False)" in text


def test_settings_without_a_credential_show_as_the_dataclass_showed_them() -> None:
    workers = WorkerSettings()
    assert repr(workers) == (
        "WorkerSettings(session_store='memory', session_header=None, session_ttl=None, index_dir=None, store=None, "
        "catalog='default', catalog_poll=1.0, reuse_port=False, trust_proxy_header=False)"
    )


def test_the_auth_settings_repr_hides_the_urls_credentials() -> None:
    from toolsearch.mcp.auth import AuthSettings

    auth = AuthSettings(issuer="https://bob:PWSECRET444@iss.example/", jwks_url="https://iss.example/keys?token=QT0K",
                        resource_url="https://gw.example/mcp", rate_limit=5.0)
    for text in (repr(auth), repr(GatewaySettings(transport="http", auth=auth))):
        # before: the dataclass repr, the issuer's password and the key set's token whole
        assert "PWSECRET444" not in text and "QT0K" not in text, text
        assert "AuthSettings(issuer='https://***@iss.example/', jwks_url='https://iss.example/keys?token=***'" in text
        assert "resource_url='https://gw.example/mcp'" in text and "rate_limit=5.0" in text
