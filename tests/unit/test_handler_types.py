"""Each handler is typed with kio's classes of the versions its API serves: the unions of
broker/handlers/kio_types.py (and kio_types_txn.py and kio_types_share.py), named by the
`Messages[Request, Response]` annotation of the API in its handler module.  The broker never
loads those unions (they are for type checking); what it hands a handler is kio's decoding
of a frame, and what it answers with is built from `Messages.response`, both the class kio's
index gives for the frame's version.  Here: every API of the table has its `Messages`, over
the versions the table serves, and its unions hold exactly kio's classes of those versions."""

from __future__ import annotations

import functools
import importlib
import sys
import typing

import broker.handlers
from broker.handlers import APIS
from broker.handlers.base import Messages
from broker.protocol.codec import request_type, response_type

_MODULES = [m for name, m in sorted(sys.modules.items()) if name.startswith("broker.handlers.") and m is not None]
# The unions' modules load every class of kio's (seconds of CPU): loaded by the first test here,
# not when the suite's every worker collects this module.
_UNION_MODULES = ("kio_types", "kio_types_txn", "kio_types_share")


def _classes(alias: object) -> set[object]:
    return set(typing.get_args(alias)) or {alias}  # a single version's alias is the class itself


@functools.cache
def _namespace() -> dict[str, object]:
    unions = [importlib.import_module(f"broker.handlers.{name}") for name in _UNION_MODULES]
    return {name: value for module in unions for name, value in vars(module).items()} | {"Messages": Messages}


def _declared() -> dict[int, tuple[Messages[object, object], set[object], set[object]]]:
    """Every `Messages` of the handler modules, with the classes its annotation names."""
    found = {}
    namespace = _namespace()
    for module in _MODULES:
        for attr, annotation in getattr(module, "__annotations__", {}).items():
            value = getattr(module, attr, None)
            if isinstance(value, Messages):
                request, response = typing.get_args(eval(annotation, namespace))
                assert value.key not in found, f"{attr} of {module.__name__}: API key {value.key} declared twice"
                found[value.key] = (value, _classes(request), _classes(response))
    return found


def test_every_api_has_its_messages_over_the_versions_it_serves() -> None:
    assert broker.handlers.BY_KEY
    declared = _declared()
    assert sorted(declared) == sorted(api.key for api in APIS)
    for api in APIS:
        messages = declared[api.key][0]
        assert (messages.min_version, messages.max_version) == (api.min_version, api.max_version), api.name


def test_each_union_holds_exactly_kios_classes_of_the_versions_served() -> None:
    declared = _declared()
    for api in APIS:
        _, requests, responses = declared[api.key]
        versions = range(api.min_version, api.max_version + 1)
        assert requests == {request_type(api.key, v) for v in versions}, api.name
        assert responses == {response_type(api.key, v) for v in versions}, api.name


def test_messages_answers_with_the_class_of_the_version_asked() -> None:
    for messages, _, responses in _declared().values():
        for version in range(messages.min_version, messages.max_version + 1):
            cls = messages.response(version)
            assert cls in responses
            assert cls.__version__ == version
