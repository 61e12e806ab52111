"""physai-fleet keys: create and manage a fleet keystore (physai_ros.security.keystore).

    physai-fleet keys init DIR [--server NAME]
    physai-fleet keys add-robot DIR NAME        (add-worker DIR NAME, add-operator DIR NAME)
    physai-fleet keys revoke DIR KIND/NAME
    physai-fleet keys list DIR
    physai-fleet keys token DIR ROBOT           (an openpi client's api_key for the gateway; run it
                                                 with the fleet's ROS_DOMAIN_ID: the token is bound to it)
"""
from __future__ import annotations

import argparse
import sys

from physai_ros.security.gateway_token import robot_token
from physai_ros.security.keystore import KINDS, Identity, Keystore, KeystoreError, fingerprint


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="physai-fleet keys", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("init", help="create a keystore with the server's identity")
    p.add_argument("dir")
    p.add_argument("--server", default="policy_server", help="the server identity's name")
    for kind in ("robot", "worker", "operator"):
        p = sub.add_parser(f"add-{kind}", help=f"add a {kind} identity")
        p.add_argument("dir")
        p.add_argument("name", nargs="+")
    p = sub.add_parser("revoke", help="revoke an identity (refused at its next message)")
    p.add_argument("dir")
    p.add_argument("identity", help="KIND/NAME, e.g. robot/robot_3")
    p = sub.add_parser("list", help="identities, fingerprints and revocations")
    p.add_argument("dir")
    p = sub.add_parser("token", help="a robot's token for the openpi gateway (its client's api_key)")
    p.add_argument("dir")
    p.add_argument("robot")
    return ap.parse_args(argv)


def _identity(text: str) -> Identity:
    kind, sep, name = text.partition("/")
    if not sep:
        raise KeystoreError(f"expected KIND/NAME with KIND one of {KINDS}, got {text!r}")
    return Identity(kind, name)


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        if a.command == "init":
            ks = Keystore.init(a.dir, a.server)
            print(f"created keystore {ks.root} with server/{a.server}")
        elif a.command.startswith("add-"):
            ks = Keystore(a.dir)
            for name in a.name:
                fp = ks.add(Identity(a.command[4:], name))
                print(f"added {a.command[4:]}/{name} (fingerprint {fp})")
        elif a.command == "token":
            print(robot_token(Keystore(a.dir), a.robot))
        elif a.command == "revoke":
            ident = _identity(a.identity)
            Keystore(a.dir).revoke(ident)
            print(f"revoked {ident}: refused at its next message")
        else:
            ks = Keystore(a.dir)
            ks.check()
            print(f"fleet id {ks.fleet_id or '(none: made before fleet ids)'}")
            for ident in ks.identities():
                state = "REVOKED" if ks.is_revoked(ident) else "active"
                print(f"{str(ident):40s} {fingerprint(ks.public_key(ident))}  {state}")
    except KeystoreError as e:
        print(f"physai-fleet keys: {e}", file=sys.stderr)
        return 2
    return 0
