"""The panel model of the actorq dashboard and the PromQL helpers its rows share
(panels_*.py define the rows, build_dashboard.py builds them with grafana-foundation-sdk).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Actor series carry their own instance label (actor-<n> or evaluator; scrape configs use
# honor_labels). Training panels leave the greedy evaluator out.
ACTORS = 'instance!="evaluator"'
WINDOW = "1m"  # rate window: >= 4 scrape intervals at the 5 s (compose) to 15 s (k8s) scrape


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    queries: list[Query]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""
    width: int = 12
    text_mode: str = "auto"  # stat panels: "name" shows the legend (an info metric's labels)


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr.replace("$w", WINDOW).replace("$a", ACTORS), legend)


def _quantiles(
    metric: str, legend: str, by: str = "", selector: str = "", qs: Iterable[float] = (0.5, 0.99)
) -> list[Query]:
    """histogram_quantile over a histogram's buckets, one query per quantile; `by` adds
    labels to keep beside `le`, `legend` follows "p50 " etc."""
    keep = ", ".join(["le", *([by] if by else [])])
    match = f"{{{selector}}}" if selector else ""
    return [
        _q(
            f"histogram_quantile({q}, sum by ({keep}) (rate({metric}_bucket{match}[$w])))",
            f"p{round(q * 100)} {legend}".rstrip(),
        )
        for q in qs
    ]


def _guard(measure: str, with_limit: bool = False) -> list[Query]:
    """One guard measure at each stage: before (plain quantized), broadcast (after
    fallback layers), lag (the previous fp32 version against this one)."""
    out = [
        _q(
            f'max by (stage) (actorq_quantizer_guard_divergence_ratio{{measure="{measure}"}})',
            f"{measure} {{{{stage}}}}",
        )
    ]
    if with_limit:
        out.append(_q("max(actorq_quantizer_guard_threshold_ratio)", "limit"))
    return out


GUARD_STAGES = (
    "Stages: before = the plain quantized policy; broadcast = what actors get, after "
    "fallback layers; lag = the previous version's fp32 policy against this one (what "
    "actors already live with). "
)
GUARD_LIMIT = (
    "The limit is max(fixed threshold, lag_scale x lag) and applies to the guarded "
    "measure (regret by default, or disagreement, for Q-networks; action_diff for tanh "
    "policies). "
)
EMPTY_ON_DQN = "Empty on DQN runs (on-policy learners only)."
