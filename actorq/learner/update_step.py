"""Learner updates as the service runs them, several a call: sample rows from the mirror,
weight them (n-step correction), measure the behaviour gap, run the algorithm's update (or
queue it on its captured runner), write priorities back, count."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from actorq import metrics
from actorq.algos.capture import captured_runner
from actorq.algos.dqn_update import BATCH_KEYS
from actorq.learner.captured import LaggedSubmit
from actorq.learner.counters import LearnerCounters
from actorq.learner.device_feed import DeviceFeed
from actorq.replay import ReplayStorage
from actorq.replay.sampler import SampleResult

METRICS_EVERY = 10  # updates between Prometheus writes (a scrape sees at most this stale)
# Batches drawn and gathered at once where the sampler can (uniform replay): a draw costs
# ~50 us whatever its size up to a few thousand rows (RNG call, six gathers, Python), and
# DQN 64x64's numpy-flat update takes ~0.13 ms, so 8 batches a draw left ~6 us of it per
# update, 64 under 1 us (with dqn_update.multi_step's cheaper test, +5-7% updates/s in the
# service, BENCHMARKS 20l). A block is bounded in bytes too: rows a batch of pixels take
# make fewer batches a draw (ALE DQN: 2, not 8).
MAX_BATCHES_PER_DRAW = 64
DRAW_BLOCK_BYTES = 4 << 20
# What those blocks gather: the update's columns. The bookkeeping ones (policy version,
# behaviour) are read for the few batches that are measured: in the service each row and
# column of a random gather is a cache miss, and they were 4 of 10 columns.
UPDATE_COLUMNS = (*BATCH_KEYS, "steps")
# A host-sampled call runs up to this many updates back to back (as many as the rate
# limiter admits), and stops early once it has run this long: the loop's per-turn checks
# (stop, replay size, limiter, publication, progress) were ~8% of a 0.3 ms DQN update's
# turn (py-spy, 2 cores), and a slow update (pixels, wide nets) still ends its turn soon.
HOST_UPDATES_PER_CALL = 8
HOST_CALL_SECONDS = 0.005


class UpdateStep:
    """Calls of one update each; what they need is fixed when the learner is built."""

    def __init__(
        self,
        algo: Any,
        storage: ReplayStorage,
        sampler: Any,
        batch_size: int,
        counters: LearnerCounters,
        rng: np.random.Generator,
        rlx2: Any = None,
        correction: Any = None,
        behaviour: Any = None,
    ) -> None:
        self.algo, self.storage, self.sampler = algo, storage, sampler
        self.batch_size, self.counters, self.rng = batch_size, counters, rng
        self.rlx2, self.correction, self.behaviour = rlx2, correction, behaviour
        self._submit_captured = LaggedSubmit()  # a captured path: priorities one update late
        self._flushed_updates = 0  # updates already counted in the Prometheus counters
        self.feed: DeviceFeed | None = None
        self.k = 1  # updates per call on a device feed (always exactly k)
        self.last_call = 0  # updates the last call ran
        self._q_mean = float("nan")  # of the newest update read back
        # Prioritized replay draws per update (its priorities change with every update),
        # RLx2 gathers n-step rows itself: both keep the one-batch draw.
        self.draws: SampledBatches | None = None
        if rlx2 is None and correction is None and hasattr(sampler, "sample_batches"):
            count = batches_per_draw(storage, batch_size)
            self.draws = SampledBatches(sampler, storage, batch_size, count, rng, UPDATE_COLUMNS)

    def use_feed(self, feed: DeviceFeed) -> None:
        """Sample on the device from now on, `feed.k` updates per call."""
        self.feed, self.k = feed, feed.k

    def passed(self, every: int) -> bool:
        """Whether the last call's updates passed a multiple of `every` (0 = never)."""
        done = self.last_call
        return crossed(self.counters.updates - done, done, every)

    def __call__(self, newest_version: int | None, most: int = 1) -> int:
        """Up to `most` host-sampled updates back to back, fewer once HOST_CALL_SECONDS
        have passed (k with a device feed, whatever `most`); returns how many ran.
        `newest_version` is the newest published one (None off rank 0)."""
        if self.feed is not None:
            self._device_sampled(self.feed, newest_version)
            self.last_call = self.k
            return self.k
        done, ends = 0, time.perf_counter() + HOST_CALL_SECONDS
        while True:
            self._host_update(newest_version)
            done += 1
            if done >= most or time.perf_counter() > ends:
                self.last_call = done
                return done

    def _host_update(self, newest_version: int | None) -> None:
        """One update on a batch sampled on the host."""
        started = time.perf_counter()
        if self.draws is not None:
            sample, batch = self.draws.next()
        else:
            sample = self.sampler.sample(self.storage, self.batch_size, self.rng)
            if self.rlx2 is not None:
                batch = self.rlx2.gather(self.storage, sample.indices, self.correction is not None)
            else:
                batch = self.storage.get(sample.indices)
        self.counters.sample_seconds += time.perf_counter() - started
        weights = sample.weights
        if self.correction is not None:  # truncated IS of the n-step return's actions
            weights = weights * self.correction.weights(batch)
        if self.behaviour is not None and self.behaviour.due():  # before the update
            self.behaviour.measure(self._bookkeeping_rows(sample, batch, None), newest_version)
        runner = captured_runner(self.algo)
        started = time.perf_counter()
        if runner is not None and self.rlx2 is None:
            reported = self._submit_captured(runner, self.sampler, sample, batch, weights)
            if reported is not None:
                self._report_loss(*reported)
        else:
            result = self.algo.update(batch, weights)
            if self.rlx2 is not None:
                self.rlx2.after_update()
            self.sampler.update_priorities(sample.indices, result.td_abs, sample.generations)
            self._report_loss(result.loss, result.q_mean)
        self.counters.update_seconds += time.perf_counter() - started
        self.counters.updates += 1
        self.counters.sampled += self.batch_size
        if self.counters.updates % METRICS_EVERY == 0:
            self.flush_metrics(
                self._bookkeeping_rows(sample, batch, ("policy_version",)), newest_version
            )

    def _bookkeeping_rows(
        self, sample: SampleResult, batch: dict[str, np.ndarray], columns: tuple[str, ...] | None
    ) -> dict:
        """`batch`, or where it holds only the update's columns its rows' `columns` (None:
        every column) read again, each row as it is now: a row the ring overwrote since is
        measured as the newer transition, never as a mix of two."""
        if "policy_version" in batch:
            return batch
        return self.storage.get(sample.indices, columns)

    def _device_sampled(self, feed: DeviceFeed, newest_version: int | None) -> None:
        """k updates on batches the device draws from its ring; a host sample only when
        the behaviour gap or the sample lag is due."""
        started = time.perf_counter()
        feed.catch_up()
        self.counters.sample_seconds += time.perf_counter() - started
        before, k = self.counters.updates, self.k
        host_batch = None
        gap_due = self.behaviour is not None and self.behaviour.due(k)
        if gap_due or crossed(before, k, METRICS_EVERY):
            sample = self.sampler.sample(self.storage, self.batch_size, self.rng)
            host_batch = self.storage.get(sample.indices)
        if gap_due:
            self.behaviour.measure(host_batch, newest_version)
        started = time.perf_counter()
        reported = feed.run()
        self.counters.update_seconds += time.perf_counter() - started
        if self.rlx2 is not None:  # dense: FLOPs accounting only (sparse RLx2 is refused)
            for _ in range(k):
                self.rlx2.after_update()
        if reported is not None:
            self._report_loss(*reported)
        self.counters.updates += k
        self.counters.sampled += k * self.batch_size
        if crossed(before, k, METRICS_EVERY):
            self.flush_metrics(host_batch, newest_version)

    def flush_metrics(self, batch: Any = None, newest_version: int | None = None) -> None:
        """Prometheus counters, the newest loss and mean Q, and the sample lag, every
        METRICS_EVERY updates: per update they cost a few microseconds of a ~200 us
        update, under the GIL ingest shares."""
        done = self.counters.updates - self._flushed_updates
        self._flushed_updates = self.counters.updates
        metrics.LEARNER_UPDATES.inc(done)
        metrics.LEARNER_REPLAY_SAMPLED.inc(done * self.batch_size)
        metrics.LEARNER_LOSS.set(self.counters.last_loss)
        metrics.LEARNER_Q_MEAN.set(self._q_mean)
        if batch is not None and newest_version is not None:
            lag = newest_version - float(batch["policy_version"].mean())
            metrics.LEARNER_SAMPLE_LAG.set(lag)

    def _report_loss(self, loss: float, q_mean: float) -> None:
        """Keep the newest loss and mean Q; flush_metrics writes them to the gauges."""
        self.counters.last_loss, self._q_mean = loss, q_mean


class SampledBatches:
    """Batches for the next `count` updates, drawn and gathered in one go and handed out
    one at a time: the same distribution as a draw per update, less Python per update.
    A batch's rows are at most `count - 1` updates older than a fresh draw's would be."""

    def __init__(
        self, sampler: Any, storage: ReplayStorage, batch_size: int, count: int,
        rng: np.random.Generator, columns: tuple[str, ...] | None = None,
    ) -> None:  # fmt: skip
        self.sampler, self.storage, self.rng = sampler, storage, rng
        self.batch_size, self.count, self.columns = batch_size, count, columns
        self._sample: SampleResult | None = None
        self._rows: dict[str, np.ndarray] = {}
        self._next = count  # the block's next batch; count = drawn out

    def next(self) -> tuple[SampleResult, dict[str, np.ndarray]]:
        """The next batch: its sample (indices, weights) and its rows (views of the block)."""
        if self._next == self.count:
            self._sample = self.sampler.sample_batches(
                self.storage, self.batch_size, self.count, self.rng
            )
            self._rows = self.storage.get(self._sample.indices, self.columns)
            self._next = 0
        assert self._sample is not None
        rows = slice(self._next * self.batch_size, (self._next + 1) * self.batch_size)
        self._next += 1
        drawn = self._sample
        sample = SampleResult(indices=drawn.indices[rows], weights=drawn.weights[rows])
        return sample, {name: column[rows] for name, column in self._rows.items()}


def batches_per_draw(storage: ReplayStorage, batch_size: int) -> int:
    """How many batches one draw gathers: MAX_BATCHES_PER_DRAW, fewer where their rows of
    the update's columns would pass DRAW_BLOCK_BYTES, at least one."""
    batch_bytes = batch_size * storage.row_nbytes(UPDATE_COLUMNS)
    return max(1, min(MAX_BATCHES_PER_DRAW, DRAW_BLOCK_BYTES // batch_bytes))


def crossed(before: int, k: int, every: int) -> bool:
    """Whether counting from `before` to `before + k` passes a multiple of `every`
    (0 = never): what `updates % every == 0` means when updates come k at a time."""
    return every > 0 and (before + k) // every > before // every
