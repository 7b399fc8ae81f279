"""What `streamshop kafka-cluster start` reports of a node that exited while starting."""

from __future__ import annotations

from pathlib import Path

from streamshop.kafka_cluster import _why_stopped


def test_the_first_error_of_the_server_log_is_reported_with_its_exception(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text(
        "[2026-01-01 00:00:00,000] INFO starting (kafka.server.KafkaRaftServer)\n"
        "[2026-01-01 00:00:01,000] ERROR Exiting Kafka due to fatal exception (kafka.Kafka$)\n"
        "KafkaException: Socket server failed to bind to 127.0.0.1:29092: Address already in use.\n"
        "[2026-01-01 00:00:02,000] ERROR a later consequence (kafka.Kafka$)\n"
    )
    (tmp_path / "stdout.log").write_text("nothing of interest\n")
    report = _why_stopped(tmp_path, limit=2)
    assert report.splitlines() == [
        "",
        f"{tmp_path / 'server.log'}:",
        "  [2026-01-01 00:00:01,000] ERROR Exiting Kafka due to fatal exception (kafka.Kafka$)",
        "  KafkaException: Socket server failed to bind to 127.0.0.1:29092: Address already in use.",
    ]


def test_without_an_error_logged_the_last_lines_the_jvm_printed_are_reported(tmp_path: Path) -> None:
    (tmp_path / "stdout.log").write_text("Error occurred during initialization of VM\nToo small maximum heap\n")
    report = _why_stopped(tmp_path)
    assert report.splitlines()[1:] == [
        f"{tmp_path / 'stdout.log'}:",
        "  Error occurred during initialization of VM",
        "  Too small maximum heap",
    ]
