"""core/read_batches.py: single reads served in batches, and never left waiting."""

from __future__ import annotations

import asyncio
import time

import pytest

from icechunk_spark.core.read_batches import ReadBatches


def slow_execute(requests: list[int]) -> list[bytes | BaseException]:
    time.sleep(0.2)
    return [bytes([r]) for r in requests]


def test_a_read_cancelled_while_its_batch_is_served_leaves_later_reads_served() -> None:
    """A caller that gives up (a timeout, a gather cancelled by another chunk's error) cancels
    its future while the server thread is serving it; the server must go on serving."""
    batches = ReadBatches(slow_execute, 0.002)

    async def give_up_then_read() -> bytes:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(batches.read_async(1), 0.05)
        await asyncio.sleep(0.3)  # the cancelled read's batch has ended
        return await asyncio.wait_for(batches.read_async(2), 5)

    try:
        assert asyncio.run(give_up_then_read()) == b"\x02"
    finally:
        batches.close()


def test_reads_after_close_are_still_served() -> None:
    batches = ReadBatches(slow_execute, 0.002)
    assert asyncio.run(batches.read_async(3)) == b"\x03"
    batches.close()
    try:
        assert asyncio.run(asyncio.wait_for(batches.read_async(4), 5)) == b"\x04"
    finally:
        batches.close()


def test_a_burst_held_up_mid_way_still_joins_one_batch() -> None:
    """A gather queues its reads in one turn of the event loop; when that turn is held up
    half way (its thread preempted on a busy machine, as on shared CI cores: the virtual
    reader's 1,000-read test once saw 3 batches), the server must not serve the half it has
    seen as a batch of its own: it waits for the loop to finish the turn, up to the window."""
    served: list[list[int]] = []

    def execute(requests: list[int]) -> list[bytes | BaseException]:
        served.append(list(requests))
        return [bytes([r]) for r in requests]

    batches = ReadBatches(execute, 5.0)

    async def read(i: int) -> bytes:
        if i == 50:
            time.sleep(0.02)  # the loop's thread held up: 80 of the server's settling steps
        return await batches.read_async(i)

    async def burst() -> list[bytes]:
        return list(await asyncio.gather(*(read(i) for i in range(100))))

    try:
        start = time.perf_counter()
        assert asyncio.run(burst()) == [bytes([i]) for i in range(100)]
        assert time.perf_counter() - start < 2.5  # served once the turn ended, not at 5 s
    finally:
        batches.close()
    assert served == [list(range(100))]


def test_a_lone_read_waits_for_no_window() -> None:
    batches = ReadBatches(lambda requests: [b"x" for _ in requests], 5.0)
    try:
        start = time.perf_counter()
        assert asyncio.run(batches.read_async(1)) == b"x"
        assert time.perf_counter() - start < 2.5
    finally:
        batches.close()


def test_a_loop_stopped_mid_turn_does_not_hold_later_batches() -> None:
    """A loop that stops before the turn in which it queued a read ends (its callback never
    runs) must not make every later batch wait the whole window."""
    batches = ReadBatches(lambda requests: [b"x" for _ in requests], 5.0)
    stopped = asyncio.new_event_loop()
    try:
        first = stopped.create_task(batches.read_async(1))
        stopped.call_soon(stopped.stop)  # ends the loop in the turn that queues the read
        stopped.run_forever()
        start = time.perf_counter()
        assert asyncio.run(asyncio.wait_for(batches.read_async(2), 10)) == b"x"
        assert time.perf_counter() - start < 2.5
        assert stopped.run_until_complete(first) == b"x"  # served meanwhile
    finally:
        batches.close()
        stopped.close()
