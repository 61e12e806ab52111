"""The gateway's websocket side without ROS (client.openpi.server): over TLS, a real websocket
client gets the metadata and the engine's chunks from a real serving core behind a FleetLink, and
a token that is not its robot's gets HTTP 401 before any model time."""
import asyncio
import dataclasses
import datetime
import ipaddress
import ssl
import threading
import time

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from physai_ros.client.openpi.server import GatewayServer, tls_context
from physai_ros.client.openpi.session import OpenpiSession
from physai_ros.client.openpi.wire import decode, encode
from physai_ros.config.gateway import GatewayRobot, OpenpiGatewayConfig
from physai_ros.protocol.openpi_layouts import LAYOUTS
from physai_ros.security.gateway_token import TokenCheck, robot_token
from physai_ros.security.keystore import Identity, Keystore
from physai_ros.serving.startup.engine_builder import build_core


class CoreLink:
    """A FleetLink over an in-process ServingCore: what the ROS link does, minus the wire."""

    def __init__(self, core, fleet, tokens: TokenCheck):
        self.core, self.fleet, self.tokens = core, fleet, tokens
        self.loop = None
        self.model_calls = 0

    def authorize(self, authorization, path):
        return self.tokens.robot_for(authorization)

    async def open(self, robot_id):
        session = OpenpiSession(self.fleet.robot(robot_id), LAYOUTS["libero"], hold_fallback=False)
        return session if await self.registered(session) else session.refused

    async def registered(self, session):
        session.on_registered(self.core.register(session.registration()))
        return session.registered

    def submit(self, session, obs):
        future = self.loop.create_future()

        def run():
            answers = self.core.submit(obs, now=obs.stamp)
            while not answers:
                self.model_calls += 1
                answers = [c for c in self.core.step().chunks if c.round_id == obs.round_id]
            self.loop.call_soon_threadsafe(future.set_result, answers[0])
        threading.Thread(target=run, daemon=True).start()
        return future

    def close(self, session):
        pass


def _certificate(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return tmp_path / "cert.pem", tmp_path / "key.pem"


@pytest.fixture
def gateway(fleet, tmp_path):
    fleet = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=30.0))
    ks = Keystore.init(tmp_path / "ks")
    for r in ("robot_0", "robot_1"):
        ks.add(Identity("robot", r))
    link = CoreLink(build_core(fleet, instance_id="gw"), fleet, TokenCheck(ks, ["robot_0"]))
    cert, key = _certificate(tmp_path)
    cfg = OpenpiGatewayConfig(robots={"robot_0": GatewayRobot("robot_0", "libero")}, port=0)
    server = GatewayServer(cfg, link, clock=time.time, ssl_context=tls_context(cert, key),
                           log=lambda text: None)
    loop, stop, ready = asyncio.new_event_loop(), None, threading.Event()
    link.loop = loop

    def run():
        nonlocal stop
        asyncio.set_event_loop(loop)
        stop = asyncio.Event()
        loop.run_until_complete(server.run(stop, ready=lambda port: ready.set()))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30)
    client_tls = ssl.create_default_context(cafile=str(cert))
    yield server, link, f"wss://127.0.0.1:{server.port}", client_tls, {r: robot_token(ks, r) for r in ("robot_0", "robot_1")}
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def test_a_tls_client_with_its_robots_token_gets_the_engines_chunks(gateway, fleet):
    server, link, url, client_tls, tokens = gateway
    robot = fleet.robot("robot_0")
    rng = np.random.default_rng(0)
    with connect(url, ssl=client_tls, additional_headers={"Authorization": f"Api-Key {tokens['robot_0']}"},
                 max_size=None, open_timeout=30) as ws:
        meta = decode(ws.recv())
        assert meta["robot_id"] == "robot_0" and meta["joints"] == list(robot.joints)
        for _ in range(2):
            ws.send(encode({"observation/image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
                            "observation/wrist_image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
                            "observation/state": np.zeros(len(robot.joints), np.float32)}))
            out = decode(ws.recv(timeout=120))
            assert out["actions"].ndim == 2 and out["actions"].shape[1] == len(robot.joints)
            assert out["actions"].shape[0] >= out["physai"]["horizon"] >= 1
            assert np.isfinite(out["actions"]).all() and out["physai"]["engine_instance"]
    assert server.refused == {}


def test_a_robot_the_server_forgot_registers_again_and_its_message_is_answered(gateway, fleet):
    server, link, url, client_tls, tokens = gateway
    robot = fleet.robot("robot_0")
    msg = encode({"observation/image": np.zeros((224, 224, 3), np.uint8),
                  "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
                  "observation/state": np.zeros(len(robot.joints), np.float32)})
    with connect(url, ssl=client_tls, additional_headers={"Authorization": f"Api-Key {tokens['robot_0']}"},
                 max_size=None, open_timeout=30) as ws:
        decode(ws.recv())
        ws.send(msg)
        first = decode(ws.recv(timeout=120))["physai"]["round_id"]
        assert link.core.release("robot_0")  # as after server.robot_timeout_s of silence
        ws.send(msg)
        again = decode(ws.recv(timeout=120))
    assert again["physai"]["round_id"] > first and again["physai"]["engine_instance"]
    assert link.core.registration("robot_0") is not None


def test_another_robots_token_is_refused_before_any_model_time(gateway):
    server, link, url, client_tls, tokens = gateway
    for headers in ({"Authorization": f"Api-Key {tokens['robot_1']}"}, None):  # robot_1 is not the gateway's
        with pytest.raises(InvalidStatus) as e:
            connect(url, ssl=client_tls, additional_headers=headers, open_timeout=30)
        assert e.value.response.status_code == 401
    with pytest.raises(Exception):  # TLS: a client that does not trust the certificate does not connect
        connect(url, additional_headers={"Authorization": f"Api-Key {tokens['robot_0']}"}, open_timeout=30)
    assert server.refused == {"wrong_token": 1, "missing_token": 1} and link.model_calls == 0
