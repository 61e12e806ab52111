"""Operator commands, signed by a person's key (keystore kind `operator`, `physai-fleet keys
add-operator`), so that no node on the domain can release a stopped robot or speak for an operator.

  resume       /<ns>/operator_command (OperatorCommand) on the robot client: leave the STOPPED
               state of an SLO escalation (a latched pipeline escalation is cleared with it)
  acknowledge  the same service: clear a latched pipeline escalation
  ask          /policy_server/ask_robot (AskRobot): a question for the robot's next frame

A request names its operator and carries an auth field (wire.pack_auth: version, counter, Ed25519
signature) over its digest (every field but auth: the robot, the command, its text, the operator's
name) in the command's own domain, so a signature for one robot or command is worth nothing for
another. The checker refuses, with the reason: a malformed or unknown operator name, a revoked
one, a bad signature, a counter (the signer's wall clock in ns) further than `max_skew_s` from its
own clock (a captured command cannot be replayed later, even to a restarted checker), or one not
newer than the last accepted of that operator for that robot and command (replayed at once).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict

from physai_ros.security.endpoints import PeerSigner, PeerVerifier, named_identity
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity, Keystore
from physai_ros.security.wire import unpack_auth

COMMANDS = ("resume", "acknowledge", "ask")
DOMAINS = {c: b"operator_" + c.encode() for c in COMMANDS}
DEFAULT_OPERATOR = "operator"  # the identity `physai-fleet operator` uses unless told --as NAME


class OperatorSigner:
    """The operator tool's side: signs one command's digest."""

    def __init__(self, keystore: Keystore, name: str = DEFAULT_OPERATOR):
        self.ident = Identity("operator", name)
        self._signer = PeerSigner(keystore, self.ident)

    def sign(self, command: str, digest: bytes) -> bytes:
        return self._signer.sign(DOMAINS[command], digest)


class OperatorCheck:
    """The robot client's and the server's side: who signed a command, or AuthError."""

    def __init__(self, keystore: Keystore, max_skew_s: float = 30.0, clock: Callable[[], float] = time.time):
        self.keystore, self.max_skew_s, self.clock = keystore, max_skew_s, clock
        # operator name -> its checker (replay guard per command and robot), for the names the
        # keystore has: a made-up name gets a throwaway one, so such names cannot grow this
        self._operators: Dict[str, PeerVerifier] = {}
        self._lock = threading.Lock()

    def check(self, operator: str, command: str, robot_id: str, digest: bytes, blob) -> Identity:
        if command not in DOMAINS:
            raise AuthError("malformed", f"unknown command {command[:32]!r}")
        unpack_auth(blob, "sig")  # first: an unsigned request is "missing", whatever it names
        ident = named_identity("operator", operator)
        with self._lock:
            peer = self._operators.get(ident.name)
            if peer is None:
                peer = PeerVerifier(self.keystore, ident)
                if self.keystore.public_path(ident).is_file():
                    self._operators[ident.name] = peer
        peer.check(DOMAINS[command], digest, blob, stream=(command, robot_id), fresh=self._fresh)
        return ident

    def _fresh(self, counter: int) -> None:
        skew = self.clock() - counter / 1e9
        if not abs(skew) <= self.max_skew_s:
            raise AuthError("stale", f"signed {skew:+.1f} s from now (at most {self.max_skew_s:g} s apart)")
