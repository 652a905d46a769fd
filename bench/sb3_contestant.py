"""One Stable-Baselines3 run on CartPole-v1 or Pendulum-v1, timed like `actorq run`.

A contestant of bench/bench_solve.py (SB3 is installed into the bench venv by `make
bench-solve`, never a runtime dependency of actorq). Hyperparameters are the RL Baselines3
Zoo's for these tasks. Prints one JSON line: seconds from `--launched` (the unix time the
parent started this process, so interpreter and import time count) to

- "first_eval": the first greedy evaluation (10 episodes, every 5,000 env steps) whose
  mean reaches the target;
- "train100": the first time the mean of the last 100 training episodes reaches it.

    .venv/bin/python bench/sb3_contestant.py --algo ppo --env CartPole-v1 --seed 1
"""

from __future__ import annotations

import argparse
import json
import time


def zoo_model(algo: str, env_id: str, seed: int):  # type: ignore[no-untyped-def]
    from stable_baselines3 import DQN, PPO, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    if algo == "ppo" and env_id == "CartPole-v1":
        env = make_vec_env(env_id, n_envs=8, seed=seed)
        return PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=lambda f: 1e-3 * f,
            clip_range=lambda f: 0.2 * f,
            seed=seed,
            device="cpu",
            verbose=0,
        )
    if algo == "dqn" and env_id == "CartPole-v1":
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        return DQN(
            "MlpPolicy",
            env,
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs={"net_arch": [256, 256]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
    if algo == "td3" and env_id == "Pendulum-v1":
        import numpy as np

        env = make_vec_env(env_id, n_envs=1, seed=seed)
        noise = NormalActionNoise(np.zeros(1), 0.1 * np.ones(1))
        return TD3(
            "MlpPolicy",
            env,
            learning_rate=1e-3,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            gradient_steps=1,
            train_freq=1,
            action_noise=noise,
            policy_kwargs={"net_arch": [400, 300]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
    raise SystemExit(f"no zoo settings for {algo} on {env_id}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=("ppo", "dqn", "td3"), required=True)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--max-steps", type=int, default=500_000)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--launched", type=float, default=0.0, help="unix time of the launch")
    args = p.parse_args()
    launched = args.launched or time.time()

    import torch

    torch.set_num_threads(1)
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    model = zoo_model(args.algo, args.env, args.seed)
    eval_env = make_vec_env(args.env, n_envs=1, seed=args.seed + 10_000)
    found: dict[str, float | int | None] = {"first_eval": None, "train100": None}

    class Timer(BaseCallback):
        next_eval = 5_000

        def _on_step(self) -> bool:
            now = time.time() - launched
            buf = self.model.ep_info_buffer
            full = found["train100"] is None and len(buf) == 100
            if full and sum(e["r"] for e in buf) / 100 >= args.target:
                found["train100"], found["train100_steps"] = now, self.num_timesteps
            if found["first_eval"] is None and self.num_timesteps >= self.next_eval:
                self.next_eval += 5_000
                mean, _ = evaluate_policy(self.model, eval_env, 10, deterministic=True)
                if mean >= args.target:
                    found["first_eval"] = time.time() - launched
                    found["first_eval_steps"] = self.num_timesteps
            done = found["first_eval"] is not None and found["train100"] is not None
            return not done and now < args.max_seconds

    model.learn(total_timesteps=args.max_steps, callback=Timer())
    print(json.dumps({"algo": f"sb3-{args.algo}", "seed": args.seed, **found}))


if __name__ == "__main__":
    main()
