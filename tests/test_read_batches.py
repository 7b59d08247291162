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
