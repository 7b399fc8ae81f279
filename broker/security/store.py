"""SCRAM users and ACLs, durable in the cluster metadata log.

Records sit beside the topics' in `__cluster_metadata` (compacted, fsynced before a change is
acknowledged): `["scram", user, mechanism]` → salt, iterations, StoredKey and ServerKey, and
`["acl", [binding fields]]` → present.  A delete is a tombstone.  A record that does not
decode at start is skipped and counted, never fatal.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import msgpack

from broker.replay import need
from broker.security.acls import AclBinding
from broker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, SALT_BYTES, ScramCredential

if TYPE_CHECKING:
    from broker.metadata import MetadataStore


class SecurityStore:
    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self.acls: set[AclBinding] = set()
        self._decoys: dict[tuple[str, ...], tuple[str, int, int]] = {}
        for key_bytes, (offset, value) in meta.other_records.items():
            try:
                key = msgpack.unpackb(key_bytes)
                if key[0] == "quota":
                    continue  # `broker.quotas`
                self._load(key, value)
            except Exception as e:
                meta.skipped.skip(meta.meta_log.topic, offset, f"{type(e).__name__}: {e}")

    def _load(self, key: list[object], value: bytes | None) -> None:
        if key[0] == "scram":
            need(len(key) == 3 and isinstance(key[1], str) and key[1] != "", "user name is not a string")
            need(key[2] in MECHANISMS, "unknown SCRAM mechanism")
            user, mechanism = str(key[1]), str(key[2])
            if value is None:
                self._forget(user, mechanism)
                return
            v = msgpack.unpackb(value)
            need(isinstance(v, dict), "credential is not a map")
            salt, iterations, stored, server = v.get("salt"), v.get("iterations"), v.get("stored"), v.get("server")
            need(isinstance(salt, bytes) and 0 < len(salt) <= 1024, "salt is not bytes")
            need(isinstance(iterations, int) and MIN_ITERATIONS <= iterations <= MAX_ITERATIONS, "bad iterations")
            need(isinstance(stored, bytes) and isinstance(server, bytes) and len(stored) == len(server), "bad keys")
            assert isinstance(salt, bytes)
            assert isinstance(iterations, int)
            assert isinstance(stored, bytes)
            assert isinstance(server, bytes)
            self.users.setdefault(user, {})[mechanism] = ScramCredential(salt, iterations, stored, server)
        else:
            need(len(key) == 2, "ACL key is not [acl, binding]")
            binding = AclBinding.from_list(key[1])
            if value is None:
                self.acls.discard(binding)
            else:
                self.acls.add(binding)

    def _forget(self, user: str, mechanism: str) -> None:
        mechanisms = self.users.get(user)
        if mechanisms is not None:
            mechanisms.pop(mechanism, None)
            if not mechanisms:
                del self.users[user]

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def decoy(self, mechanisms: tuple[str, ...]) -> tuple[str, int, int]:
        """(mechanism, iterations, salt length) to answer an unknown user with: those of the
        credential most users are checked against (the first of `mechanisms` each has), so that
        an unknown name gets the same answer, and costs the same hashing, as a real one."""
        found = self._decoys.get(mechanisms)
        if found is None:
            shapes: Counter[tuple[str, int, int]] = Counter()
            for credentials in self.users.values():
                for mechanism in mechanisms:
                    if (c := credentials.get(mechanism)) is not None:
                        shapes[(mechanism, c.iterations, len(c.salt))] += 1
                        break
            found = shapes.most_common(1)[0][0] if shapes else (mechanisms[0], MIN_ITERATIONS, SALT_BYTES)
            self._decoys[mechanisms] = found
        return found

    # --- changes: written to the metadata log first (the caller fsyncs it) -----------

    def change_credentials(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None:
        entries: list[tuple[list[object], object | None]] = [(["scram", user, mech], None) for user, mech in deletions]
        entries += [
            (
                ["scram", user, mech],
                {"salt": c.salt, "iterations": c.iterations, "stored": c.stored_key, "server": c.server_key},
            )
            for user, mech, c in upserts
        ]
        if not entries:
            return
        self.meta.write_records(entries)
        self._decoys.clear()
        for user, mech in deletions:
            self._forget(user, mech)
        for user, mech, c in upserts:
            self.users.setdefault(user, {})[mech] = c

    def add_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        """Adds those of `bindings` not there yet, and returns them."""
        new = [b for b in dict.fromkeys(bindings) if b not in self.acls]
        if new:
            self.meta.write_records([(["acl", b.as_list()], 1) for b in new])
            self.acls.update(new)
        return new

    def remove_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        """Removes those of `bindings` that are there, and returns them."""
        gone = [b for b in dict.fromkeys(bindings) if b in self.acls]
        if gone:
            self.meta.write_records([(["acl", b.as_list()], None) for b in gone])
            self.acls.difference_update(gone)
        return gone
