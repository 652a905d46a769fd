"""Single-process synchronous DQN on a gymnasium vector env: the reference for tuning defaults.

One loop does what the distributed system spreads over processes: M envs step with an
epsilon-greedy policy from the learner's net, transitions go into a tiny local replay, and
the learner runs `updates-per-step` updates per env transition. A separate greedy vector env
plays `eval-episodes` episodes every `eval-every` updates. Two solve times are reported: the
first evaluation whose mean reaches `--solve-at` ("solved"; early ones can be luck), and the
first time the last 100 evaluation episodes average that much ("solved100", what the
distributed evaluator reports). The run goes on until `after-solve` updates past "solved"
(and at least until "solved100"), so the stability of the solved policy is measured too.

    .venv/bin/python bench/dqn_inprocess.py --envs 16 --hidden 128,128 --seed 1

Exploration (`--eps`):
    linear:START:END:STEPS   one epsilon for all envs, decayed over STEPS env transitions
    apex:BASE:ALPHA:GROUPS   fixed Ape-X epsilons; envs split into GROUPS equal actors
                             (GROUPS == envs gives every env its own epsilon)
    const:EPS                one fixed epsilon
The last line printed is a JSON summary for collecting tables.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from actorq.actor.stepper import VectorStepper
from actorq.algos.capture import use_default_path
from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.config import LearnerSettings
from actorq.envs import describe_env, make_vector_env
from actorq.exploration import LinearSchedule, apex_epsilon, epsilon_greedy
from actorq.models.mlp import MLPSpec, QNetwork


class Replay:
    """Uniform ring buffer of (obs, action, reward, next_obs, done) in numpy arrays."""

    def __init__(self, capacity: int, obs_dim: int, seed: int) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, np.float32)
        self.size = 0
        self._pos = 0
        self._rng = np.random.default_rng(seed)

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        done: np.ndarray,
    ) -> None:
        if len(action) == 0:
            return
        idx = (self._pos + np.arange(len(action))) % self.capacity
        self.obs[idx], self.action[idx], self.reward[idx] = obs, action, reward
        self.next_obs[idx], self.done[idx] = next_obs, done
        self._pos = int(idx[-1] + 1) % self.capacity
        self.size = min(self.size + len(action), self.capacity)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        idx = self._rng.integers(0, self.size, size=batch_size)
        return {
            "obs": self.obs[idx],
            "action": self.action[idx],
            "reward": self.reward[idx],
            "next_obs": self.next_obs[idx],
            "done": self.done[idx],
        }


def make_epsilon(spec: str, num_envs: int) -> Callable[[int], np.ndarray]:
    """Parse `--eps` into a function env_steps -> per-env epsilons [num_envs]."""
    kind, *args = spec.split(":")
    if kind == "linear":
        sched = LinearSchedule(float(args[0]), float(args[1]), int(float(args[2])))
        return lambda t: np.full(num_envs, sched(t))
    if kind == "const":
        return lambda t: np.full(num_envs, float(args[0]))
    if kind == "apex":
        base, alpha, groups = float(args[0]), float(args[1]), int(args[2])
        per_group = [apex_epsilon(g, groups, base, alpha) for g in range(groups)]
        fixed = np.array([per_group[i * groups // num_envs] for i in range(num_envs)])
        return lambda t: fixed
    raise ValueError(f"unknown --eps {spec!r}; expected linear:, const: or apex:")


class GreedyEvaluator:
    """Runs `episodes` greedy episodes in parallel, one per env of its own vector env."""

    def __init__(self, env_id: str, episodes: int, seed: int) -> None:
        self.envs = make_vector_env(env_id, episodes, seed)
        self.episodes = episodes

    def __call__(self, net: QNetwork) -> np.ndarray:
        obs, _ = self.envs.reset()
        returns = np.zeros(self.episodes)
        running = np.ones(self.episodes, dtype=bool)
        while running.any():
            with torch.no_grad():
                actions = net(torch.as_tensor(obs, dtype=torch.float32)).argmax(1).numpy()
            obs, reward, term, trunc, _ = self.envs.step(actions)
            returns += reward * running
            running &= ~(term | trunc)
        return returns


@dataclass
class Stats:
    """Counters and evaluation history of one run."""

    env_steps: int = 0
    train_episodes: list[float] = field(default_factory=list)
    evals: list[tuple[int, int, float, float]] = field(default_factory=list)
    eval_returns: list[float] = field(default_factory=list)  # after the first solve
    all_eval_returns: list[float] = field(default_factory=list)
    eval_seconds: float = 0.0
    solved: dict[str, float] | None = None  # first evaluation with mean >= solve-at
    solved100: dict[str, float] | None = None  # last 100 eval episodes average >= solve-at


def parse_args() -> argparse.Namespace:
    d = DQNConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", type=int, default=16, help="envs in the acting vector env")
    p.add_argument("--hidden", default="128,128", help="comma-separated hidden widths")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--batch", type=int, default=d.batch_size)
    p.add_argument("--gamma", type=float, default=d.gamma)
    p.add_argument(
        "--updates-per-step",
        type=float,
        default=LearnerSettings().samples_per_insert / d.batch_size,
        help="learner updates per env transition (samples per insert / batch)",
    )
    p.add_argument("--huber-delta", type=float, default=d.huber_delta)
    p.add_argument("--adam-eps", type=float, default=d.adam_eps)
    p.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm)
    p.add_argument("--target-update", type=int, default=d.target_update_every)
    p.add_argument("--tau", type=float, default=d.tau)
    p.add_argument("--learning-starts", type=int, default=d.learning_starts)
    p.add_argument("--buffer", type=int, default=50_000, help="replay capacity")
    p.add_argument("--eps", default="apex:0.4:7:16")
    p.add_argument(
        "--publish-every",
        type=int,
        default=0,
        help="refresh the actors' copy of the net every N updates (0: act with the online net)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=300_000, help="env transitions")
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--eval-every", type=int, default=500, help="learner updates")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--solve-at", type=float, default=475.0)
    p.add_argument("--after-solve", type=int, default=5000, help="updates to run after solving")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args()


def build(args: argparse.Namespace) -> tuple[DQNLearner, DQNConfig]:
    info = describe_env(args.env)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    spec = MLPSpec(info.obs_dim, info.num_actions, hidden)
    config = DQNConfig(
        lr=args.lr,
        gamma=args.gamma,
        batch_size=args.batch,
        target_update_every=args.target_update,
        tau=args.tau,
        huber_delta=args.huber_delta,
        adam_eps=args.adam_eps,
        max_grad_norm=args.max_grad_norm,
        learning_starts=args.learning_starts,
    )
    # numpy-flat on one CPU thread, as make_algorithm (and the learner's auto path) gives
    return use_default_path(DQNLearner(spec, config, seed=args.seed)), config


def evaluate(
    args: argparse.Namespace,
    learner: DQNLearner,
    evaluator: GreedyEvaluator,
    stats: Stats,
    start: tuple[float, float],
) -> None:
    """Greedy evaluation; records when the solve threshold is first reached.

    Two criteria: one evaluation's mean (can be luck early on), and the mean of the last 100
    evaluation episodes, which is what the distributed evaluator reports.
    """
    t0 = time.perf_counter()
    returns = evaluator(learner.online)
    stats.eval_seconds += time.perf_counter() - t0
    mean = float(returns.mean())
    stats.evals.append((learner.num_updates, stats.env_steps, time.perf_counter() - start[0], mean))
    stats.all_eval_returns.extend(returns.tolist())
    if stats.solved is not None:
        stats.eval_returns.extend(returns.tolist())
    elif mean >= args.solve_at:
        stats.solved = milestone(learner, stats, start)
    last100 = stats.all_eval_returns[-100:]
    if stats.solved100 is None and len(last100) == 100 and np.mean(last100) >= args.solve_at:
        stats.solved100 = milestone(learner, stats, start)
    if not args.quiet:
        recent = stats.train_episodes[-20:]
        train_mean = float(np.mean(recent)) if recent else float("nan")
        print(
            f"upd {learner.num_updates:6d} steps {stats.env_steps:7d} "
            f"wall {stats.evals[-1][2]:6.1f}s eval {mean:6.1f} train20 {train_mean:6.1f}",
            flush=True,
        )


def milestone(learner: DQNLearner, stats: Stats, start: tuple[float, float]) -> dict[str, float]:
    """Where the run stands now: env steps, updates, wall and CPU seconds."""
    wall = time.perf_counter() - start[0]
    return {
        "steps": stats.env_steps,
        "updates": learner.num_updates,
        "wall_s": wall,
        "cpu_s": time.process_time() - start[1],
        "train_wall_s": wall - stats.eval_seconds,
    }


class Acting:
    """The actor side: vector env + epsilon-greedy on a (possibly stale) copy of the net."""

    def __init__(self, args: argparse.Namespace, learner: DQNLearner) -> None:
        # Native vectorized env + VectorStepper: the same stepping path as the actors.
        self.stepper = VectorStepper(make_vector_env(args.env, args.envs, args.seed))
        self.obs = self.stepper.reset()
        self.epsilon = make_epsilon(args.eps, args.envs)
        self.rng = np.random.default_rng(args.seed)
        self.net = learner.online
        if args.publish_every > 0:  # a stale copy, as actors hold between policy versions
            self.net = QNetwork(learner.spec)
            self.net.load_state_dict(learner.online.state_dict())
        self.ep_return = np.zeros(args.envs)

    def step(self, replay: Replay, stats: Stats) -> int:
        """One vector step; stores the real transitions and returns how many there were."""
        with torch.no_grad():
            q = self.net(torch.from_numpy(self.obs)).numpy()
        actions = epsilon_greedy(q, self.epsilon(stats.env_steps), self.rng)
        out = self.stepper.step(actions)
        v = out.valid
        replay.add(self.obs[v], actions[v], out.rewards[v], out.next_obs[v], out.terminated[v])
        self.obs = out.obs
        self.ep_return += out.rewards * v
        for i in np.flatnonzero(out.ended):
            stats.train_episodes.append(float(self.ep_return[i]))
            self.ep_return[i] = 0.0
        stats.env_steps += int(v.sum())
        return int(v.sum())


def run(args: argparse.Namespace) -> dict[str, object]:
    torch.set_num_threads(1)
    learner, config = build(args)
    acting = Acting(args, learner)
    evaluator = GreedyEvaluator(args.env, args.eval_episodes, args.seed + 10_000)
    replay = Replay(args.buffer, learner.spec.obs_dim, args.seed)
    stats = Stats()
    credit = 0.0
    start = (time.perf_counter(), time.process_time())
    stop_at_update = None
    while stats.env_steps < args.max_steps:
        inserted = acting.step(replay, stats)
        if replay.size < config.learning_starts:
            continue
        credit += inserted * args.updates_per_step
        while credit >= 1.0:
            credit -= 1.0
            learner.update(replay.sample(config.batch_size))
            if args.publish_every > 0 and learner.num_updates % args.publish_every == 0:
                acting.net.load_state_dict(learner.online.state_dict())
            if learner.num_updates % args.eval_every == 0:
                evaluate(args, learner, evaluator, stats, start)
                if stats.solved100 is not None and stop_at_update is None:
                    stop_at_update = stats.solved["updates"] + args.after_solve
        if stop_at_update is not None and learner.num_updates >= stop_at_update:
            break
        if time.perf_counter() - start[0] > args.max_seconds:
            break
    return summarize(args, learner, stats, start)


def summarize(
    args: argparse.Namespace, learner: DQNLearner, stats: Stats, start: tuple[float, float]
) -> dict[str, object]:
    """One JSON-able record: when it solved and how stable the greedy policy was after."""
    after = [m for (u, _, _, m) in stats.evals if stats.solved and u > stats.solved["updates"]]
    last100 = stats.eval_returns[-100:]
    return {
        "config": {k: v for k, v in vars(args).items() if k not in ("quiet",)},
        "solved": stats.solved,
        "solved100": stats.solved100,
        "total_wall_s": time.perf_counter() - start[0],
        "total_steps": stats.env_steps,
        "total_updates": learner.num_updates,
        "eval_seconds": stats.eval_seconds,
        "after_evals": len(after),
        "after_frac_solved": float(np.mean([m >= args.solve_at for m in after])) if after else None,
        "after_min_mean": min(after) if after else None,
        "after_last100_mean": float(np.mean(last100)) if last100 else None,
        "evals": [[u, s, round(w, 2), m] for (u, s, w, m) in stats.evals],
    }


def main() -> None:
    args = parse_args()
    result = run(args)
    solved = result["solved"]
    if solved:
        print(
            f"SOLVED at {solved['steps']} env steps, {solved['updates']} updates, "
            f"{solved['wall_s']:.1f}s wall ({solved['train_wall_s']:.1f}s without eval)"
        )
    else:
        print(f"not solved in {result['total_steps']} env steps, {result['total_wall_s']:.1f}s")
    solved100 = result["solved100"]
    if solved100:
        print(
            f"last-100 eval mean >= {args.solve_at} at {solved100['steps']} env steps, "
            f"{solved100['updates']} updates, {solved100['wall_s']:.1f}s wall"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
