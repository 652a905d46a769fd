"""Returns and off-policy corrections for on-policy learners: GAE, V-trace, ratio statistics.

Every function takes time-major tensors [T, B] (T steps of B env copies) and handles both
ways a trajectory can stop inside a segment:
- `terminated[t]`: the episode ended at step t; nothing is bootstrapped after it.
- `truncated[t]` (time limit): the episode was cut at step t; its return is bootstrapped
  with `next_values[t]`, the value of the true last observation, and no trace flows into
  step t + 1, which belongs to the next episode.
`next_values[t]` is V(s_{t+1}) of the same episode (for t = T - 1 the segment's bootstrap
observation; at a truncation, the final observation's value).

References: GAE, Schulman et al. 2016 (arXiv:1506.02438); V-trace, Espeholt et al. 2018
(IMPALA, arXiv:1802.01561), eq. (1) and the recursion under Remark 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) [T, B]: A_t = sum_k (gamma lam)^k delta_{t+k} within an episode.

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t; returns = A + V.
    """
    not_terminal = 1.0 - terminated.float()
    not_done = not_terminal * (1.0 - truncated.float())
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = _backward_sum(deltas, gamma * lam * not_done)
    return advantages, advantages + values


def _backward_sum(deltas: torch.Tensor, coefs: torch.Tensor) -> torch.Tensor:
    """x_t = deltas_t + coefs_t * x_{t+1} for t = T-1 .. 0, with x_T = 0."""
    out = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        running = deltas[t] + coefs[t] * running
        out[t] = running
    return out


@dataclass(frozen=True)
class VTraceResult:
    vs: torch.Tensor
    """V-trace value targets v_s [T, B]."""
    pg_advantages: torch.Tensor
    """rho_s * (r_s + gamma * v_{s+1} - V(x_s)) [T, B]: the policy-gradient advantage."""
    clipped_rhos: torch.Tensor
    """min(rho_bar, pi / mu) [T, B]."""


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> VTraceResult:
    """V-trace targets for a behaviour policy mu and target policy pi, log_rhos = log pi/mu.

    v_s - V(x_s) = delta_s + gamma * c_s * (v_{s+1} - V(x_{s+1})) within an episode, with
    delta_s = rho_s (r_s + gamma V(x_{s+1}) - V(x_s)), rho_s = min(rho_bar, pi/mu) and
    c_s = lam * min(c_bar, pi/mu). `lam` is IMPALA's optional trace-cutting lambda.
    """
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=rho_bar)
    cs = lam * torch.clamp(rhos, max=c_bar)
    not_terminal = 1.0 - terminated.float()
    not_done = not_terminal * (1.0 - truncated.float())
    deltas = clipped_rhos * (rewards + gamma * not_terminal * next_values - values)
    vs = _backward_sum(deltas, gamma * cs * not_done) + values
    # v_{s+1}: the next step's target inside an episode; the bootstrap value at its end.
    vs_next = next_values.clone()
    vs_next[:-1] = torch.where(not_done[:-1] > 0, vs[1:], next_values[:-1])
    pg_advantages = clipped_rhos * (rewards + gamma * not_terminal * vs_next - values)
    return VTraceResult(vs=vs, pg_advantages=pg_advantages, clipped_rhos=clipped_rhos)


@dataclass(frozen=True)
class RatioStats:
    """What the learner corrected: pi_learner / mu_behaviour over one batch."""

    mean: float
    max: float
    mean_abs_deviation: float
    """mean |ratio - 1|: 0 when the actors ran exactly the learner's policy."""
    clipped_fraction: float
    """Share of samples whose ratio the objective clips or truncates."""
    ess: float
    """Normalised effective sample size (sum w)^2 / (n sum w^2), in (0, 1]."""

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}ratio_mean": self.mean,
            f"{prefix}ratio_max": self.max,
            f"{prefix}ratio_abs_dev": self.mean_abs_deviation,
            f"{prefix}clipped_fraction": self.clipped_fraction,
            f"{prefix}ess": self.ess,
        }


@torch.no_grad()
def ratio_stats(log_ratios: torch.Tensor, clipped: torch.Tensor) -> RatioStats:
    """Statistics of exp(log_ratios); `clipped` marks the samples the loss clipped."""
    w = torch.exp(log_ratios.double()).flatten()
    ess = float(w.sum() ** 2 / (w.numel() * (w * w).sum()))
    return RatioStats(
        mean=float(w.mean()),
        max=float(w.max()),
        mean_abs_deviation=float((w - 1.0).abs().mean()),
        clipped_fraction=float(clipped.float().mean()),
        ess=ess,
    )
