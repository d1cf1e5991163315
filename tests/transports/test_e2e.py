"""End-to-end encryption and pairing on the agent's side: the channel, the pairing file, GET /api/pair,
and the relay refusing what is not sealed for a paired device (through the fake WuKongIM)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lineup_plugin.config.settings import Settings, WuKongIMSettings
from lineup_plugin.errors import ConfigError, RelayProtocolError
from lineup_plugin.transports import transport_for
from lineup_plugin.transports.both import DirectAndRelay
from lineup_plugin.transports.direct.server import DirectServer
from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession
from lineup_plugin.transports.wukongim.e2e import WINDOW, AgentKey, Channel, aad, b64url, derive
from lineup_plugin.transports.wukongim.pair_command import pairing_status
from lineup_plugin.transports.wukongim.pairing import Pairings
from lineup_plugin.transports.wukongim.relay import Relay, max_envelope_text
from tests.fakes.wukongim import FakeWuKongIM

from .test_relay import FAST, GUARD, make_hub

AGENT, APP = "lineup-agent", "app-user"
TOKEN = "direct-token-0123456789"


class AppSide:
    """What the App does (lineup_plugin/app/e2e.js), in Python: its key pair and the two keys."""

    def __init__(self, agent_public: str, pairing_id: str) -> None:
        self.private = X25519PrivateKey.generate()
        self.public = b64url(self.private.public_key().public_bytes_raw())
        self.pairing_id = pairing_id
        self.agent_public = agent_public
        self.counter = 0

    def keys(self) -> tuple[AESGCM, AESGCM]:
        from_agent, to_agent = derive(self.private, self.agent_public, self.pairing_id)
        return AESGCM(from_agent), AESGCM(to_agent)

    def seal(self, text: str, *, counter: int | None = None, to: str = AGENT, sender: str = APP) -> dict[str, Any]:
        self.counter = counter if counter is not None else self.counter + 1
        iv = secrets.token_bytes(12)
        sealed = self.keys()[1].encrypt(iv, text.encode(), aad(self.pairing_id, sender, to, self.counter))
        return {"v": 1, "p": self.pairing_id, "n": self.counter, "iv": b64url(iv), "c": b64url(sealed)}

    def open(self, box: dict[str, Any]) -> str:
        import base64

        def raw(text: str) -> bytes:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

        iv, sealed = raw(box["iv"]), raw(box["c"])
        return self.keys()[0].decrypt(iv, sealed, aad(self.pairing_id, AGENT, APP, box["n"])).decode()


def paired(tmp_path: Path) -> tuple[Pairings, AppSide, str]:
    pairings = Pairings(tmp_path, AGENT, APP)
    key = AgentKey()
    app = AppSide(key.public, "")
    state, device = pairings.pair(app.public)
    app.agent_public, app.pairing_id = AgentKey.load(state.agent_key).public, device.pairing_id
    return pairings, app, device.pairing_id


# -- the channel ---------------------------------------------------------------------------------


def test_sealed_round_trip_both_ways(tmp_path: Path) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    content = json.loads(channel.seal('{"hello": "世界"}', 9527))
    assert set(content) == {"type", "e2e"} and content["type"] == 9527
    assert app.open(content["e2e"]) == '{"hello": "世界"}'
    assert channel.open(app.seal('{"answer": 1}')) == '{"answer": 1}'


def test_replayed_and_old_counters_are_refused(tmp_path: Path) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    box = app.seal("{}", counter=100)
    channel.open(box)
    with pytest.raises(RelayProtocolError, match="replayed"):
        channel.open(box)
    channel.open(app.seal("{}", counter=50))  # out of order but inside the window: accepted once
    for n in range(200, 200 + WINDOW + 1):
        channel.open(app.seal("{}", counter=n))
    with pytest.raises(RelayProtocolError, match="too old"):
        channel.open(app.seal("{}", counter=150))


@pytest.mark.parametrize(
    "change",
    [
        lambda box: {**box, "n": box["n"] + 1},  # another counter
        lambda box: {**box, "c": box["c"][:-2] + ("AA" if box["c"][-2:] != "AA" else "BB")},  # flipped bits
        lambda box: {**box, "iv": b64url(b"\0" * 12)},
    ],
    ids=["counter", "ciphertext", "iv"],
)
def test_tampered_messages_are_refused(tmp_path: Path, change: Any) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    with pytest.raises(RelayProtocolError, match="does not authenticate"):
        channel.open(change(app.seal('{"a": 1}')))
    assert channel.window.recent == []  # a forged counter moves nothing


def test_a_message_sealed_for_other_uids_does_not_open(tmp_path: Path) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    with pytest.raises(RelayProtocolError, match="does not authenticate"):
        channel.open(app.seal("{}", sender="mallory"))
    with pytest.raises(RelayProtocolError, match="does not authenticate"):
        channel.open(app.seal("{}", to="another-agent"))


@pytest.mark.parametrize(
    "box",
    [{}, {"v": 2, "n": 1}, {"v": 1, "n": -1}, {"v": 1, "n": True}, {"v": 1, "n": 1, "iv": "!!", "c": "AA"}],
)
def test_malformed_boxes_get_a_clear_error(tmp_path: Path, box: dict[str, Any]) -> None:
    pairings, _, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    with pytest.raises(RelayProtocolError, match="e2e: "):
        channel.open(box)


# -- the pairing file ----------------------------------------------------------------------------


def test_pairing_file_is_private_and_survives_a_restart_with_its_floor(tmp_path: Path) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    assert stat.S_IMODE(os.stat(pairings.path).st_mode) == 0o600
    channel = pairings.channel(pairing_id)
    assert channel is not None
    box = app.seal("{}", counter=7)
    channel.open(box)
    pairings.keep_floors(now=True)
    again = Pairings(tmp_path, AGENT, APP).channel(pairing_id)  # the agent restarted
    assert again is not None
    with pytest.raises(RelayProtocolError, match="too old"):
        again.open(box)


def test_pairing_the_same_key_twice_is_one_device(tmp_path: Path) -> None:
    pairings, app, pairing_id = paired(tmp_path)
    _, device = pairings.pair(app.public)
    assert device.pairing_id == pairing_id
    assert pairings.state is not None and len(pairings.state.devices) == 1


def test_revoke_drops_devices_and_keys_and_a_running_agent_sees_it(tmp_path: Path) -> None:
    pairings, _, pairing_id = paired(tmp_path)
    before = pairings.state
    assert before is not None and pairings.channel(pairing_id) is not None
    Pairings(tmp_path, AGENT, APP).revoke()  # another process: `lineup pair --revoke`
    os.utime(pairings.path, ns=(0, 1))  # a file rewritten within the same mtime tick is still noticed
    after = pairings.state
    assert after is not None
    assert pairings.channel(pairing_id) is None and pairings.revoked(pairing_id)
    assert (after.app_token, after.agent_key) != (before.app_token, before.agent_key)


def test_a_flood_of_pairings_never_drops_the_phone_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 pairings in a moment (someone with the App token) dropped the oldest device: the real phone."""
    from lineup_plugin.errors import RelayError
    from lineup_plugin.transports.wukongim import pairing

    pairings, app, phone = paired(tmp_path)
    channel = pairings.channel(phone)
    assert channel is not None
    channel.open(app.seal("{}"))  # the phone is in use: it sent a message (its floor is not written yet)

    def stranger() -> str:
        return b64url(X25519PrivateKey.generate().public_key().public_bytes_raw())

    outcomes = []
    for _ in range(40):
        try:
            pairings.pair(stranger())
            outcomes.append("paired")
        except RelayError as exc:
            outcomes.append(str(exc))
    assert outcomes[: pairing.PAIR_RATE - 1] == ["paired"] * (pairing.PAIR_RATE - 1)  # the phone was the first
    assert all("too many new pairings" in outcome for outcome in outcomes[pairing.PAIR_RATE - 1 :])
    assert pairings.channel(phone) is not None and not pairings.revoked(phone)

    monkeypatch.setattr(pairing, "PAIR_RATE", 1000)  # a slow flood, past the cap: unused devices go first
    for _ in range(40):
        pairings.pair(stranger())
    state = pairings.state
    assert state is not None and len(state.devices) == pairing.MAX_DEVICES and phone in state.devices
    for pairing_id in list(state.devices):  # every device now has sent a message: none is dropped for a new one
        state.devices[pairing_id].floor = max(state.devices[pairing_id].floor, 1)
    pairings.save(state)
    with pytest.raises(RelayError, match="each has been used: run `lineup pair --revoke`"):
        pairings.pair(stranger())
    assert pairings.state is not None and phone in pairings.state.devices


def test_a_damaged_pairing_file_names_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "pairing.json").write_text('{"v": 1, "devices": 3}')
    with pytest.raises(ConfigError, match="lineup pair --revoke"):
        _ = Pairings(tmp_path, AGENT, APP).state


def test_a_bad_app_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RelayProtocolError, match="32 bytes"):
        Pairings(tmp_path, AGENT, APP).pair(b64url(b"short"))
    with pytest.raises(RelayProtocolError, match="base64url"):
        Pairings(tmp_path, AGENT, APP).pair("\ud800" * 3)


def test_pairing_status_names_devices_but_no_secret(tmp_path: Path) -> None:
    pairings, _, pairing_id = paired(tmp_path)
    wk = WuKongIMSettings(api_url="http://127.0.0.1:1", uid=AGENT, app_uid=APP)
    status = pairing_status(Settings(data_dir=tmp_path, wukongim=wk))
    state = pairings.state
    assert state is not None
    assert pairing_id in status and state.app_token not in status and state.agent_key not in status
    with pytest.raises(ConfigError, match="pairing needs the relay"):
        pairing_status(Settings(data_dir=tmp_path))


def test_sealed_messages_leave_room_in_one_frame() -> None:
    assert 500_000 < max_envelope_text(APP, 9527, sealed=True) < max_envelope_text(APP, 9527)


# -- through the fake WuKongIM -------------------------------------------------------------------


@pytest.fixture
async def im() -> AsyncIterator[FakeWuKongIM]:
    async with FakeWuKongIM() as fake:
        yield fake


async def test_relay_seals_for_the_paired_device_and_refuses_clear_envelopes(
    im: FakeWuKongIM, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pairings, app, _ = paired(tmp_path)
    hub = make_hub()
    wk = WuKongIMSettings(api_url=im.api_url, uid=AGENT, app_uid=APP)
    relay = Relay(wk, hub, timers=FAST, pairings=pairings)
    session = await ImSession.open(im.ws_url, ClientOptions(uid=APP, token="", device_flag=1, timers=FAST))
    stream = session.messages()

    async def next_envelope(kind: str) -> dict[str, Any]:
        with anyio.fail_after(GUARD):
            async for message in stream:
                await session.ack(message)
                content = json.loads(message.payload)
                envelope = json.loads(app.open(content["e2e"]))
                if envelope["type"] == f"lineup.v1.{kind}":
                    return dict(envelope)
        raise AssertionError("closed")

    async with relay:
        with anyio.fail_after(GUARD):
            await relay.connected.wait()
        call = asyncio.create_task(hub.agent_call("choice", {"question": "Q?", "options": ["a", "b"]}))
        request = await next_envelope("tool.call")
        result = {
            "v": 1,
            "id": "r1",
            "type": "lineup.v1.tool.result",
            "conversation_id": "default",
            "sender": {"kind": "device", "id": "py"},
            "target": {"kind": "agent", "id": AGENT},
            "payload": {"call_id": request["payload"]["call_id"], "result": {"selected": "b", "index": 1}},
        }
        clear = json.dumps({"type": 9527, "envelope": {**result, "id": "r0"}}).encode()
        with caplog.at_level("WARNING"):
            await session.send(AGENT, 1, clear)  # in clear: refused
            await session.send(AGENT, 1, json.dumps({"type": 9527, "e2e": app.seal(json.dumps(result))}).encode())
            with anyio.fail_after(GUARD):
                assert (await call).result == {"selected": "b", "index": 1}
        assert "an envelope in clear" in caplog.text
        assert all(set(json.loads(m.payload)) == {"type", "e2e"} for m in im.messages_from(AGENT))
    await session.close()


async def test_transport_for_mode_both_runs_direct_and_relay_and_pairs_over_http(
    im: FakeWuKongIM, tmp_path: Path
) -> None:
    wk = WuKongIMSettings(api_url=im.api_url, ws_url=im.ws_url, uid=AGENT, app_uid=APP)
    settings = Settings(mode="both", host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, wukongim=wk)
    assert settings.describe_mode().startswith("lineup: direct and relay (mode: both)")
    hub = make_hub()
    transport = transport_for(settings, hub)
    assert isinstance(transport, DirectAndRelay)
    key = b64url(X25519PrivateKey.generate().public_key().public_bytes_raw())
    async with transport:
        assert "direct mode" in transport.describe() and "relay mode" in transport.describe()
        url = f"http://127.0.0.1:{transport.direct.port}/api/pair"
        async with httpx.AsyncClient() as http:
            wrong = await http.get(url, headers={"Authorization": "Bearer nope", "X-LineUp-Key": key})
            missing = await http.get(url, headers={"X-LineUp-Key": key})
            bad_key = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}", "X-LineUp-Key": "x"})
            good = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}", "X-LineUp-Key": key})
            probe = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert (probe.status_code, probe.json()) == (200, {"relay": True})
    assert (wrong.status_code, missing.status_code, wrong.json()) == (401, 401, {"error": "wrong token"})
    assert bad_key.status_code == 400 and "App key" in bad_key.json()["error"]
    assert good.status_code == 200 and good.headers["cache-control"] == "no-store"
    offer = good.json()
    assert (offer["uid"], offer["agent"], offer["ws"], offer["content_type"]) == (APP, AGENT, im.ws_url, 9527)
    state = Pairings(tmp_path, AGENT, APP).state
    assert state is not None and state.devices[offer["id"]].app_key == key


async def test_the_apps_pair_probe_hears_no_relay_with_200_and_a_pair_request_404(tmp_path: Path) -> None:
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, store="memory")
    key = b64url(X25519PrivateKey.generate().public_key().public_bytes_raw())
    async with DirectServer.from_settings(make_hub(), settings) as server, httpx.AsyncClient() as http:
        url = f"http://127.0.0.1:{server.port}/api/pair"
        probe = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
        pair = await http.get(url, headers={"Authorization": f"Bearer {TOKEN}", "X-LineUp-Key": key})
        stranger = await http.get(url)
    # the probe (every page load) is never an error status: a browser logs those in its console
    assert (probe.status_code, probe.json(), probe.headers["cache-control"]) == (200, {"relay": False}, "no-cache")
    assert pair.status_code == 404 and "no relay to pair for" in pair.json()["error"]
    assert stranger.status_code == 401


# -- the lineup pair command ---------------------------------------------------------------------


async def test_lineup_pair_link_status_and_errors(
    im: FakeWuKongIM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lineup_plugin.cli import main as lineup

    assert await asyncio.to_thread(lineup, ["pair", "--data-dir", str(tmp_path)]) == 2
    assert "pairing needs the relay" in capsys.readouterr().err
    for key, value in {"API_URL": im.api_url, "UID": AGENT, "APP_UID": APP, "WS_URL": im.ws_url}.items():
        monkeypatch.setenv(f"LINEUP_WUKONGIM_{key}", value)
    assert await asyncio.to_thread(lineup, ["pair", "--link", "ftp://x/", "--data-dir", str(tmp_path)]) == 2
    assert "expected the address of the exported App" in capsys.readouterr().err
    args = ["pair", "--link", "https://app.example.org/", "--data-dir", str(tmp_path)]
    assert await asyncio.to_thread(lineup, args) == 0
    out = capsys.readouterr().out
    link = next(line for line in out.splitlines() if line.startswith("https://app.example.org/#pair="))
    import base64

    fragment = link.split("#pair=", 1)[1]
    offer = json.loads(base64.urlsafe_b64decode(fragment + "=" * (-len(fragment) % 4)))
    assert (offer["uid"], offer["agent"], offer["ws"]) == (APP, AGENT, im.ws_url)
    app = Channel.for_app(offer["secret"], offer["agent_key"], offer["id"], APP, AGENT)
    agent_side = Pairings(tmp_path, AGENT, APP).channel(offer["id"])
    assert agent_side is not None
    assert agent_side.open(json.loads(app.seal('{"ok": 1}', 9527))["e2e"]) == '{"ok": 1}'
    assert await asyncio.to_thread(lineup, ["pair", "--data-dir", str(tmp_path)]) == 0
    status = capsys.readouterr().out
    assert f"paired: {offer['id']}" in status and offer["secret"] not in status and offer["token"] not in status


async def test_relay_attaches_the_app_user_only_once_a_device_is_paired(im: FakeWuKongIM, tmp_path: Path) -> None:
    hub = make_hub()
    pairings = Pairings(tmp_path, AGENT, APP)
    wk = WuKongIMSettings(api_url=im.api_url, ws_url=im.ws_url, uid=AGENT, app_uid=APP, text_cards="never")
    async with Relay(wk, hub, timers=FAST, pairings=pairings) as relay:
        with anyio.fail_after(GUARD):
            await relay.connected.wait()
        assert hub.peers == []  # nobody could read a call: it fails no_app instead of waiting
        result = await hub.agent_call("choice", {"question": "Q?", "options": ["a", "b"]})
        assert result.result["error"] == "no_app"
        offer = await relay.pair(b64url(X25519PrivateKey.generate().public_key().public_bytes_raw()))
        assert [peer.device_id for peer in hub.peers] == [f"wukongim:{APP}/{offer['id']}"]  # one device per pairing
        state, device, secret = pairings.pair_link()
        app = Channel.for_app(secret, AgentKey.load(state.agent_key).public, device.pairing_id, APP, AGENT)
        pairings.revoke()  # `lineup pair --revoke` meanwhile
        session = await ImSession.open(im.ws_url, ClientOptions(uid=APP, token="", device_flag=1, timers=FAST))
        stream = session.messages()
        await session.send(AGENT, 1, app.seal("{}", 9527))
        with anyio.fail_after(GUARD):
            async for message in stream:
                await session.ack(message)
                refused = json.loads(message.payload)["refused"]
                break
        assert refused["code"] == "pairing_revoked" and "pair it again" in refused["message"]
        assert hub.peers == []  # calls fail no_app again
        await session.close()


async def test_after_lineup_pair_revoke_a_new_call_fails_no_app_instead_of_waiting_for_its_deadline(
    im: FakeWuKongIM, tmp_path: Path
) -> None:
    hub = make_hub()
    pairings = Pairings(tmp_path, AGENT, APP)
    _, device = pairings.pair(b64url(X25519PrivateKey.generate().public_key().public_bytes_raw()))
    wk = WuKongIMSettings(api_url=im.api_url, ws_url=im.ws_url, uid=AGENT, app_uid=APP, text_cards="never")
    async with Relay(wk, hub, timers=FAST, pairings=pairings) as relay:
        with anyio.fail_after(GUARD):
            await relay.connected.wait()
        assert [peer.device_id for peer in hub.peers] == [f"wukongim:{APP}/{device.pairing_id}"]
        Pairings(tmp_path, AGENT, APP).revoke()  # `lineup pair --revoke` in another process; the phone is silent
        with anyio.fail_after(GUARD):
            while hub.peers:  # the relay looks at the pairing file while it runs (a condition, not a time)
                await asyncio.sleep(0.05)
            result = await hub.agent_call("choice", {"question": "Q?", "options": ["a", "b"]}, deadline=600)
        assert result.result["error"] == "no_app"


def test_counters_go_up_after_a_restart_with_the_clock_set_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pairings, _, pairing_id = paired(tmp_path)
    channel = pairings.channel(pairing_id)
    assert channel is not None
    first = json.loads(channel.seal("{}", 9527))["e2e"]["n"]
    pairings.keep_floors(now=True)
    import time as time_module

    monkeypatch.setattr(time_module, "time_ns", lambda: 0)  # the clock went back to 1970
    restarted = Pairings(tmp_path, AGENT, APP).channel(pairing_id)
    assert restarted is not None
    assert json.loads(restarted.seal("{}", 9527))["e2e"]["n"] == first + 1
