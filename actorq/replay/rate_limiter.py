"""Keep actors and the learner in step by a target samples-per-insert ratio (Reverb's idea).

Pure logic over two counters, so the same rule can run in the learner (before sampling)
and in actors (before pushing) with counts read from Redis.
"""

from __future__ import annotations

import math


class SampleToInsertRatio:
    """Allow sampling and inserting only while the sample/insert ratio stays near a target.

    All counts are in transitions: `inserted` transitions ever inserted, `sampled`
    transitions ever sampled (a training batch of 256 counts 256).

    The rule, with ``s = samples_per_insert``, ``m = min_size_to_sample`` and
    ``e = error_buffer``, and the signed lead ``diff = inserted * s - sampled``:

    * Until ``inserted >= m`` sampling is refused and inserting is always allowed
      (warm-up).
    * After that, sampling ``batch_size`` is allowed if afterwards
      ``diff - batch_size >= s * m - e``: the learner may not run ahead of the actors by more
      than the buffer.
    * Inserting ``count`` is allowed if afterwards ``diff + count * s <= s * m + e``: the
      actors may not run ahead of the learner by more than the buffer.

    The allowed band is ``2 * e`` wide, so neither side can block the other forever as
    long as ``2 * e >= batch_size + count * s`` (see `is_deadlock_free`).
    """

    def __init__(
        self, samples_per_insert: float, min_size_to_sample: int, error_buffer: float
    ) -> None:
        if not math.isfinite(samples_per_insert) or samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}")
        if min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be >= 1, got {min_size_to_sample}")
        min_buffer = max(1.0, samples_per_insert)
        if not math.isfinite(error_buffer) or error_buffer < min_buffer:
            raise ValueError(
                f"error_buffer must be >= max(1, samples_per_insert) = {min_buffer}, "
                f"got {error_buffer}"
            )
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.error_buffer = float(error_buffer)
        offset = self.samples_per_insert * self.min_size_to_sample
        self.min_diff = offset - self.error_buffer
        self.max_diff = offset + self.error_buffer

    def can_sample(self, inserted: int, sampled: int, batch_size: int) -> bool:
        """Whether sampling `batch_size` more transitions keeps the ratio in the band."""
        _check_counts(inserted, sampled, batch_size, "batch_size")
        if inserted < self.min_size_to_sample:
            return False
        diff = inserted * self.samples_per_insert - sampled - batch_size
        return diff >= self.min_diff

    def batches_allowed(self, inserted: int, sampled: int, batch_size: int, most: int) -> int:
        """How many batches of `batch_size` (0 to `most`) may be sampled one after another:
        as many as `can_sample` would admit one at a time, each counted as sampled."""
        _check_counts(inserted, sampled, batch_size, "batch_size")
        if most < 0:
            raise ValueError(f"most must be >= 0, got {most}")
        if inserted < self.min_size_to_sample:
            return 0
        room = inserted * self.samples_per_insert - sampled - self.min_diff
        n = max(0, min(most, math.floor(room / batch_size)))
        # can_sample decides at the edge, so float rounding never admits one more or less.
        while n < most and self.can_sample(inserted, sampled + n * batch_size, batch_size):
            n += 1
        while n > 0 and not self.can_sample(inserted, sampled + (n - 1) * batch_size, batch_size):
            n -= 1
        return n

    def can_insert(self, inserted: int, sampled: int, count: int) -> bool:
        """Whether inserting `count` more transitions keeps the ratio in the band."""
        _check_counts(inserted, sampled, count, "count")
        if inserted < self.min_size_to_sample:
            return True
        diff = (inserted + count) * self.samples_per_insert - sampled
        return diff <= self.max_diff

    def is_deadlock_free(self, batch_size: int, count: int) -> bool:
        """Whether sampling `batch_size` and inserting `count` at a time can never both block."""
        return 2 * self.error_buffer >= batch_size + count * self.samples_per_insert


def _check_counts(inserted: int, sampled: int, amount: int, amount_name: str) -> None:
    if inserted < 0 or sampled < 0:
        raise ValueError(f"counts must be >= 0, got inserted={inserted} sampled={sampled}")
    if amount < 1:
        raise ValueError(f"{amount_name} must be >= 1, got {amount}")
