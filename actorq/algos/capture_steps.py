"""Each learner's update written as one capturable step (actorq.algos.capture runs it).

A step reads its batch from static tensors (`x`, filled with copy_ by the runner), runs
forward, loss, backward, clipping, the Adam step and the target update, and writes its
losses and |TD errors| into a static readback ring (`Readback`). Nothing in it syncs with
the host: no .item()/float() of a tensor, no Python branch on a tensor's value, no tensor
built from host data. What varies between updates on the host's schedule (TD3's delayed
actor, DQN's target sync every N updates) is a static `flag` of the step: the runner
captures one graph per flag value and picks the one the host counter asks for, which the
host knows without reading the device (see docs/learner-update-paths.md for why this and
not a device-side mask).

The maths calls the algorithms' own methods (`_critic_loss`, `td_target`, `sample`, ...)
so the captured step and today's update are the same code; only the optimizer step
differs in form: `torch._fused_adam_` on Adam's own state tensors (same kernel FastAdam
and Adam(fused=True) call), the learning rate a device tensor on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from actorq.algos.optim import clip_grad_norm


class AdamSlots:
    """Parameter and state lists of a one-group Adam, for `torch._fused_adam_`.

    State tensors are Adam's own (created here as Adam creates them when missing), so
    checkpoints, `state_dict` and a switch back to the eager path see every step. The
    learning rate lives in `lr` ([k] float32 on the device, one per update of a replay)
    when `tensor_lr`, as a Python float otherwise (CPU eager: bit-identical to FastAdam).
    """

    def __init__(
        self, opt: torch.optim.Optimizer, k: int, tensor_lr: bool, fused: bool = True
    ) -> None:
        if len(opt.param_groups) != 1:
            raise ValueError(
                f"captured update needs one parameter group, got {len(opt.param_groups)}"
            )
        group = opt.param_groups[0]
        if group.get("amsgrad") or group.get("weight_decay") or group.get("maximize"):
            raise ValueError("captured update supports Adam without amsgrad/weight decay/maximize")
        self.opt, self.group = opt, group
        self.params: list[torch.Tensor] = list(group["params"])
        device = self.params[0].device
        for p in self.params:
            state = opt.state[p]
            if "exp_avg" not in state:  # what Adam's _init_group creates (fused: step on device)
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif state["step"].device != p.device:
                state["step"] = state["step"].to(p.device)  # a graph cannot read host memory
        if device.type == "cuda":
            group["fused"], group["foreach"] = True, False  # eager Adam then takes device steps
        if getattr(opt, "_cache", None) is not None:
            setattr(opt, "_cache", None)  # FastAdam's cached lists may hold replaced steps  # noqa: B010
        self.exp_avgs = [opt.state[p]["exp_avg"] for p in self.params]
        self.exp_avg_sqs = [opt.state[p]["exp_avg_sq"] for p in self.params]
        self.steps = [opt.state[p]["step"] for p in self.params]
        self.tensor_lr, self.fused = tensor_lr, fused
        self.lr_host = [float(group["lr"])] * k
        self.lr = torch.full((k,), float(group["lr"]), dtype=torch.float32, device=device)

    def current(self) -> bool:
        """Whether Adam still holds these state tensors (load_state_dict replaces them)."""
        state = self.opt.state.get(self.params[0], {})
        return state.get("exp_avg") is self.exp_avgs[0] and state.get("step") is self.steps[0]

    def set_lr(self, i: int) -> bool:
        """Take the group's learning rate for update i of a replay; True when it changed."""
        lr = float(self.group["lr"])
        changed = lr != self.lr_host[i]
        self.lr_host[i] = lr
        return changed

    def push_lr(self) -> None:
        """Copy the host learning rates to the device tensor (outside any graph)."""
        self.lr.copy_(torch.tensor(self.lr_host, dtype=torch.float32))

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], i: int = 0) -> None:
        beta1, beta2 = self.group["betas"]
        torch._foreach_add_(self.steps, 1)
        if not self.fused:
            self._math_step(grads, self.lr[i], beta1, beta2)
            return
        torch._fused_adam_(
            self.params,
            grads,
            self.exp_avgs,
            self.exp_avg_sqs,
            [],
            self.steps,
            amsgrad=False,
            lr=self.lr[i] if self.tensor_lr else self.lr_host[i],
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=self.group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )

    def _math_step(self, grads: list[torch.Tensor], lr: torch.Tensor, beta1: float, beta2: float):
        """Adam written out in tensor ops (torch.compile has no fake kernel for the fused
        op with a tensor lr); the fused kernel's maths, equal to float rounding."""
        eps = self.group["eps"]
        for p, g, m, v, step in zip(
            self.params, grads, self.exp_avgs, self.exp_avg_sqs, self.steps, strict=True
        ):
            m.lerp_(g, 1.0 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            step_size = lr / (1.0 - torch.pow(beta1, step))
            denom = (v.sqrt() / torch.sqrt(1.0 - torch.pow(beta2, step))).add_(eps)
            p.sub_(step_size * m / denom)


class Readback:
    """Static output ring: per update a row of scalars and (optionally) |TD error| [B].

    The slot index is a device tensor advanced inside the step, so a captured graph
    writes a different row on each replay; the host mirrors it with a plain counter.
    """

    def __init__(self, names: tuple[str, ...], slots: int, batch: int, device: torch.device):
        self.names, self.slots = names, slots
        self.stats = torch.zeros((slots, len(names)), dtype=torch.float32, device=device)
        self.td = torch.zeros((slots, batch), dtype=torch.float32, device=device)
        self.slot = torch.zeros(1, dtype=torch.int64, device=device)

    @torch.no_grad()
    def write(self, values: list[torch.Tensor], td_abs: torch.Tensor | None) -> None:
        row = torch.stack([v.detach().reshape(()).float() for v in values]).unsqueeze(0)
        self.stats.index_copy_(0, self.slot, row)
        if td_abs is not None:
            self.td.index_copy_(0, self.slot, td_abs.detach().unsqueeze(0))
        self.slot.add_(1).remainder_(self.slots)

    def tensors(self) -> list[torch.Tensor]:
        return [self.stats, self.td, self.slot]


def _grads(loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    # Gradients of `params` only, as backward_step's loss.backward(inputs=params).
    return list(torch.autograd.grad(loss, params))


def _nan(like: torch.Tensor) -> torch.Tensor:
    return torch.full((), float("nan"), device=like.device)


class Program:
    """One algorithm's capturable step plus the host-side schedule around it."""

    names: tuple[str, ...] = ("loss", "q_mean", "grad_norm")
    keys: tuple[str, ...] = ("obs", "action", "reward", "next_obs", "done", "steps", "weights")
    counts_updates = True  # each step is one of the algorithm's updates (not PPO's minibatches)

    def __init__(self, algo: Any, k: int, tensor_lr: bool, fused: bool = True) -> None:
        self.algo = algo
        self.opts = [AdamSlots(o, k, tensor_lr, fused) for o in self.optimizers()]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def flag(self, n: int) -> bool:
        """Static flag of update number n (1-based, after the increment)."""
        return False

    def prepare(self, n: int) -> None:
        """Host work before update n (DQN's learning-rate schedule)."""

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        raise NotImplementedError

    def state_tensors(self) -> list[torch.Tensor]:
        """Everything a step mutates (warm-up before a capture is undone with these)."""
        tensors = [p for o in self.opts for p in o.params]
        for o in self.opts:
            tensors += o.exp_avgs + o.exp_avg_sqs + o.steps
        return tensors + self.extra_state()

    def extra_state(self) -> list[torch.Tensor]:
        return []

    def generators(self) -> list[torch.Generator]:
        rng = getattr(self.algo, "rng", None)
        return [rng] if isinstance(rng, torch.Generator) else []


class DQNProgram(Program):
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.algo.optimizer]

    def flag(self, n: int) -> bool:  # target sync after this update
        return n % self.algo.config.target_update_every == 0

    def prepare(self, n: int) -> None:
        saved = self.algo._num_updates
        self.algo._num_updates = n - 1  # the schedule reads the count before the update
        self.algo._apply_lr_schedule()
        self.algo._num_updates = saved

    def extra_state(self) -> list[torch.Tensor]:
        return list(self.algo.target.parameters())

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        algo, (opt,) = self.algo, self.opts
        w = x["weights"]
        if algo._manual_grad:
            q, target, loss = algo._backward_manual(x, w)
        else:
            q, target, loss = algo._backward_autograd(x, w)
        grads = [p.grad for p in opt.params if p.grad is not None]  # every one has one
        grad_norm = clip_grad_norm(grads, algo.config.max_grad_norm)
        opt.step(grads, i)
        if flag:
            _sync(list(algo.target.parameters()), opt.params, algo.config.tau)
        out.write([loss, q.mean(), grad_norm], (target - q).abs())


@torch.no_grad()
def _sync(targets: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    if tau == 1.0:
        torch._foreach_copy_(targets, online)  # exact, as DQNLearner.sync_target
    else:
        torch._foreach_lerp_(targets, online, tau)


class DDPGProgram(Program):
    """DDPG, TD3 and D4PG: critic step every update, actor + targets when `flag`."""

    names = ("loss", "q_mean", "grad_norm", "actor_loss")

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.algo.critic_opt, self.algo.actor_opt]

    def flag(self, n: int) -> bool:  # the algorithm's own rule (TD3: n % policy_delay == 0)
        algo = self.algo
        saved, algo._num_updates = algo._num_updates, n
        try:
            return bool(algo._actor_due())
        finally:
            algo._num_updates = saved

    def extra_state(self) -> list[torch.Tensor]:
        algo = self.algo
        return [*algo.actor_target.parameters(), *algo.critics_target.parameters()]

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        algo, (critic_opt, actor_opt) = self.algo, self.opts
        max_norm = algo.config.max_grad_norm
        loss, q, td_abs = algo._critic_loss(x, x["weights"])
        grads = _grads(loss, critic_opt.params)
        grad_norm = clip_grad_norm(grads, max_norm)
        critic_opt.step(grads, i)
        actor_loss = _nan(loss)
        if flag:
            obs = x["obs"]
            actor_loss = -algo._actor_q(obs, algo.actor(obs)).mean()
            grads = _grads(actor_loss, actor_opt.params)
            clip_grad_norm(grads, max_norm)
            actor_opt.step(grads, i)
            with torch.no_grad():
                targets = [*algo.actor_target.parameters(), *algo.critics_target.parameters()]
                online = [*algo.actor.parameters(), *algo.critics.parameters()]
                torch._foreach_lerp_(targets, online, algo.config.tau)
        out.write([loss, q.mean(), grad_norm, actor_loss], td_abs)


class SACProgram(Program):
    names = ("loss", "q_mean", "grad_norm", "actor_loss")

    def optimizers(self) -> list[torch.optim.Optimizer]:
        algo = self.algo
        return [algo.critic_opt, algo.actor_opt, algo.alpha_opt]

    def extra_state(self) -> list[torch.Tensor]:
        return list(self.algo.critics_target.parameters())

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        algo, (critic_opt, actor_opt, alpha_opt) = self.algo, self.opts
        cfg = algo.config
        alpha = algo.log_alpha.exp().detach()
        target = algo.td_target(x, alpha)
        qs = [critic(x["obs"], x["action"]) for critic in algo.critics]
        critic_loss = (sum((q - target).pow(2) for q in qs) * x["weights"]).mean()
        grads = _grads(critic_loss, critic_opt.params)
        grad_norm = clip_grad_norm(grads, cfg.max_grad_norm)
        critic_opt.step(grads, i)
        action, log_prob = algo.sample(x["obs"])
        q_pi = torch.stack([c(x["obs"], action) for c in algo.critics]).min(dim=0).values
        actor_loss = (alpha * log_prob - q_pi).mean()
        grads = _grads(actor_loss, actor_opt.params)
        clip_grad_norm(grads, cfg.max_grad_norm)
        actor_opt.step(grads, i)
        if cfg.autotune:
            alpha_loss = -(algo.log_alpha * (log_prob.detach() + algo.target_entropy)).mean()
            alpha_opt.step(_grads(alpha_loss, alpha_opt.params), i)
        with torch.no_grad():
            online, targets = (
                list(algo.critics.parameters()),
                list(algo.critics_target.parameters()),
            )
            torch._foreach_lerp_(targets, online, cfg.tau)
        q0 = qs[0].detach()
        out.write([critic_loss, q0.mean(), grad_norm, actor_loss], (target - q0).abs())


class OnPolicyProgram(Program):
    """PPO/APPO/A2C: one minibatch step (OnPolicyLearner._step) on static minibatch tensors."""

    names = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm")
    keys = ("obs", "action", "behaviour_logp", "advantage", "target")
    counts_updates = False

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.algo.optimizer]

    def generators(self) -> list[torch.Generator]:
        return []  # the minibatch order is drawn on the host, outside the step

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        algo, (opt,) = self.algo, self.opts
        cfg = algo.config
        logp_all = F.log_softmax(algo._forward(algo.policy, x["obs"]), dim=-1)
        logp = logp_all.gather(-1, x["action"].unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - x["behaviour_logp"])
        adv = x["advantage"]
        if cfg.clip:
            from actorq.algos.ppo import clipped_surrogate_loss

            policy_loss = clipped_surrogate_loss(ratio, adv, cfg.clip).mean()
        elif cfg.loss == "vtrace":
            policy_loss = -(logp * adv).mean()
        else:
            policy_loss = -(ratio * adv).mean()
        values = algo._forward(algo.value, x["obs"]).squeeze(-1)
        value_loss = 0.5 * (values - x["target"]).pow(2).mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        grads = _grads(loss, opt.params)
        norm = clip_grad_norm(grads, cfg.max_grad_norm)
        opt.step(grads, i)
        out.write([loss, policy_loss, value_loss, entropy, norm], None)


def program_for(algo: Any) -> Callable[..., Program]:
    """The Program class of an algorithm object (ValueError for anything else)."""
    from actorq.algos.ddpg import DDPGLearner
    from actorq.algos.dqn import DQNLearner
    from actorq.algos.ppo import OnPolicyLearner
    from actorq.algos.sac import SACLearner

    for cls, program in (
        (DQNLearner, DQNProgram),
        (DDPGLearner, DDPGProgram),  # TD3 and D4PG subclass it
        (SACLearner, SACProgram),
        (OnPolicyLearner, OnPolicyProgram),
    ):
        if isinstance(algo, cls):
            return program
    raise ValueError(f"no captured update for {type(algo).__name__}")
