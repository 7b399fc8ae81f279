"""A write the disk refuses is KAFKA_STORAGE_ERROR, not a closed connection, logged once per
burst, and the log takes appends again once there is room.  The broker process gets a file-size limit
(RLIMIT_FSIZE, set on the running process with prlimit): writes past it fail with EFBIG
exactly as a full disk fails them with ENOSPC."""

from __future__ import annotations

import resource
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import batch, connect


@pytest.mark.parametrize("acks", [pytest.param(1, marks=pytest.mark.slow), -1])
def test_a_full_disk_answers_storage_error_and_the_log_resumes_when_space_returns(
    broker_process_factory: Callable[..., BrokerProcess], acks: int
) -> None:
    proc = broker_process_factory()
    assert proc.proc is not None
    pid = proc.proc.pid
    acknowledged: list[bytes] = []
    with connect(proc.bootstrap) as c:
        assert c.create_topic("full", 1).error_code == ErrorCode.none
        assert c.produce("full", 0, batch([b"first"]), acks=acks).error_code == ErrorCode.none
        acknowledged.append(b"first")
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (64 * 1024, hard))
        errors = []
        for i in range(40):  # 40 x 4 KiB: the limit is reached part-way through a batch
            value = f"{i:04d}".encode() * 1024
            response = c.produce("full", 0, batch([value]), acks=acks)
            if response.error_code == ErrorCode.none:
                acknowledged.append(value)
            else:
                errors.append(response.error_code)
        assert errors
        assert set(errors) == {ErrorCode.kafka_storage_error}
        assert 1 < len(acknowledged) < 41
        # Logged as Kafka logs it, naming the partition and the error, once for the burst.
        logged = [line for line in proc.log_path.read_text().splitlines() if "cannot write to the log" in line]
        assert len(logged) == 1
        assert '"topic":"full"' in logged[0]
        assert "File too large" in logged[0]
        # Refused writes left nothing behind: the log is exactly what was acknowledged.
        assert [r.value for r in c.read_all("full", 0)] == acknowledged

        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        response = c.produce("full", 0, batch([b"after"]), acks=acks)
        assert response.error_code == ErrorCode.none
        acknowledged.append(b"after")
        assert [r.value for r in c.read_all("full", 0)] == acknowledged
    proc.kill()
    proc.start()
    with connect(proc.bootstrap) as c:
        assert [r.value for r in c.read_all("full", 0)] == acknowledged
