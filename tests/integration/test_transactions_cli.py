"""`streamshop transactions list|describe|find-hanging` against a broker with one open and one
completed transaction: states, producer ids, and the LSO lag the open one causes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.harness import ThreadBroker, streamshop_cli
from tests.support.kafka_clients import create_topic
from tests.support.txn_clients import TxnProducer, producer


def transactions(broker: ThreadBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return streamshop_cli("transactions", "--bootstrap", broker.bootstrap, *args)


def as_json(broker: ThreadBroker, *args: str) -> Any:
    done = transactions(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def open_and_done(broker: ThreadBroker) -> Iterator[tuple[TxnProducer, TxnProducer]]:
    create_topic(broker.bootstrap, "ledger", 2)
    done = producer("confluent", broker.bootstrap, "done")
    done.init()
    done.begin()
    done.send("ledger", b"committed", partition=0)
    done.commit()
    pending = producer("confluent", broker.bootstrap, "pending")
    pending.init()
    pending.begin()
    for i in range(4):
        pending.send("ledger", b"open-%d" % i, partition=1)
    pending.flush()
    yield pending, done
    for p in (pending, done):
        p.close()


def test_list_shows_every_transactional_id_with_its_state(
    broker: ThreadBroker, open_and_done: tuple[TxnProducer, TxnProducer]
) -> None:
    listed = {t["transactional_id"]: t["state"] for t in as_json(broker, "list")}
    assert listed == {"done": "CompleteCommit", "pending": "Ongoing"}
    only_open = as_json(broker, "list", "--state", "Ongoing")
    assert [t["transactional_id"] for t in only_open] == ["pending"]
    text = transactions(broker, "list")
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].split() == ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]
    assert text.stderr == ""  # the admin client's connection steps are not the answer


def test_describe_shows_the_lso_lag_an_open_transaction_causes(
    broker: ThreadBroker, open_and_done: tuple[TxnProducer, TxnProducer]
) -> None:
    [pending, done] = as_json(broker, "describe", "pending", "done")
    assert (pending["state"], pending["producer_epoch"], pending["timeout_ms"]) == ("Ongoing", 0, 60_000)
    assert pending["duration_ms"] >= 0
    assert pending["partitions"] == [
        {"topic": "ledger", "partition": 1, "high_watermark": 4, "last_stable_offset": 0, "lso_lag": 4}
    ]
    assert (done["state"], done["partitions"], done["duration_ms"]) == ("CompleteCommit", [], None)
    text = transactions(broker, "describe", "pending")
    assert "LSO-LAG" in text.stdout
    assert text.stderr == ""
    unknown = transactions(broker, "describe", "never-used")
    assert unknown.returncode == 1
    # The error alone, in the CLI's own format: no client library's log line around it.
    [error] = unknown.stderr.splitlines()
    assert error.startswith("streamshop transactions: ")
    assert "TransactionalIdNotFound" in error


def test_find_hanging_reports_transactions_older_than_the_bound(
    broker: ThreadBroker, open_and_done: tuple[TxnProducer, TxnProducer]
) -> None:
    young = transactions(broker, "find-hanging", "--json")
    assert (young.returncode, young.stderr) == (0, "")  # young: not hanging
    time.sleep(0.3)
    found = transactions(broker, "find-hanging", "--max-timeout-ms", "100", "--json")
    assert (found.returncode, found.stderr) == (1, "")
    assert [t["transactional_id"] for t in json.loads(found.stdout)] == ["pending"]
