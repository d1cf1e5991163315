"""The direct server over TLS (settings ``tls_cert``/``tls_key``): HTTPS and wss on the same port,
links that say so, and a clear error for a certificate it cannot use."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import ConfigError, TransportError
from lineup_plugin.transports.direct.api import request_stats
from lineup_plugin.transports.direct.server import DirectServer
from lineup_plugin.transports.direct.tls import certificate_names
from tests.fakes.certificates import NAME, self_signed
from tests.wsapp import hello_text

TOKEN = "tls-test-token-0123456789"


def server_for(tmp_path: Path, cert: Path, key: Path) -> DirectServer:
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path / "data", tls_cert=cert, tls_key=key)
    return DirectServer.from_settings(Hub(load_registry(load_entrypoints=False)), settings)


async def test_with_a_certificate_the_app_and_its_websocket_are_served_over_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    trust = ssl.create_default_context(cafile=str(cert))
    async with server_for(tmp_path, cert, key) as server:
        assert server.url == f"https://127.0.0.1:{server.port}/"
        assert server.ws_url == f"wss://127.0.0.1:{server.port}/ws"
        async with httpx.AsyncClient(verify=trust, trust_env=False) as client:
            page = await client.get(server.url)
            assert page.status_code == 200 and "<title>LineUp</title>" in page.text
            by_name = await client.get(f"https://127.0.0.1:{server.port}/", headers={"Host": f"{NAME}:{server.port}"})
            assert by_name.status_code == 200  # the certificate's name is one of this server's names
        async with connect(server.ws_url, ssl=trust) as ws:
            await ws.send(hello_text("phone", TOKEN))
            assert '"lineup.v1.device.welcome"' in str(await ws.recv())
        async with httpx.AsyncClient(trust_env=False) as client:
            with pytest.raises(httpx.HTTPError):
                await client.get(f"http://127.0.0.1:{server.port}/")  # no plain HTTP on a TLS port
        # lineup stats asks over HTTPS (this hub keeps no SQLite store, so the answer is a 503 saying so)
        with pytest.raises(TransportError, match="answered 503: this agent keeps its calls in memory"):
            await asyncio.to_thread(request_stats, "127.0.0.1", server.port, TOKEN, tmp_path / "data", tls=True)


def test_the_certificate_names_its_hosts(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "box.tailnet.ts.net")
    assert certificate_names(cert) == ["box.tailnet.ts.net", "localhost"]
    assert certificate_names(tmp_path / "missing.pem") == []


async def test_a_certificate_it_cannot_use_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "one")
    other_cert, _ = self_signed(tmp_path / "two")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    cases = [
        (tmp_path / "missing.pem", key, "'tls_cert': no such file"),
        (cert, tmp_path / "missing.pem", "'tls_key': no such file"),
        (other_cert, key, "the key does not match the certificate"),
        (garbage, key, "not a PEM certificate and key"),
    ]
    for cert_path, key_path, why in cases:
        server = server_for(tmp_path, cert_path, key_path)
        with pytest.raises(ConfigError, match=why):
            await server.start()
        await server.close()


def test_a_certificate_without_its_key_is_refused_by_the_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        Settings(tls_cert=tmp_path / "cert.pem")
