"""The cyclic collector is off while any holder works and back as it was afterwards."""

from __future__ import annotations

import gc
import threading

from broker.log.gcpause import collector_paused


def test_nested_and_concurrent_holders_restore_the_collector_once_the_last_is_done() -> None:
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        thread.start()
        entered.wait(10)
        with collector_paused():
            assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still holds it
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
