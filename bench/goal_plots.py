"""Pictures of the walking goals of issue #3: the time-to-walk curve and the 60-minute command sweep.

bench/time_to_walk.py draws both beside its JSON (curve.png, final_eval.png): one look tells which
goal a run met and when, where a table of fourteen columns does not. The figures take the rows that
script writes (curve.json rows; the final_eval dict) and draw each goal's bar as a dashed line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# issue #3: by 10 minutes >= 95 % of the episodes walk >= 5 m; by 20 minutes, in those episodes,
# clearance >= 8 cm, stance slip < 0.05 m/s, step frequency within 15 % of the gait's, double
# support < 25 %; by 60 minutes the command sweep tracked with a mean error < 0.1 m/s
WALK_FRACTION_GOAL = 0.95
CLEARANCE_GOAL_M = 0.08
STANCE_SLIP_GOAL_MPS = 0.05
STEP_FREQUENCY_TOLERANCE = 0.15
DOUBLE_SUPPORT_GOAL = 0.25
TRACKING_GOAL_MPS = 0.1
GOAL_MINUTES = (10, 20, 60)

_GOAL_STYLE = dict(color="tab:red", linestyle="--", linewidth=1.0)


def pyplot_for_files():
    """matplotlib.pyplot on the Agg backend (imported on first use: plotting is optional at run time)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training machine
    import matplotlib.pyplot as plt

    return plt


def _values(rows: list, *keys: str) -> np.ndarray:
    """rows[i][k0][k1]... as floats; NaN where a row lacks the value (no walking episode, older rows)."""
    out = []
    for row in rows:
        value = row
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        out.append(np.nan if value is None else float(value))
    return np.array(out, dtype=float)


def time_to_walk_figure(curve: list, x: str = "minutes", title: str | None = None):
    """Six panels over training (x: 'minutes' of training or PPO 'iterations'), one a goal: walking
    fraction (the 32 goal episodes and the confirmation sample with its 95 % interval), forward
    tracking error, and the four gait numbers of the walking episodes. Returns the Figure."""
    if x not in ("minutes", "iterations"):
        raise ValueError(f"x must be 'minutes' or 'iterations', got {x!r}")
    if not curve:
        raise ValueError("time_to_walk_figure: the curve has no rows")
    plt = pyplot_for_files()
    xs = _values(curve, "train_minutes" if x == "minutes" else "iterations")
    fig, axes = plt.subplots(2, 3, figsize=(13.0, 6.6), sharex=True)
    walk, track, clearance, slip, frequency, double = axes.ravel()

    walk.plot(xs, _values(curve, "walk_5m_fraction"), "o-", label="walk >= 5 m (goal episodes)")
    confirm = _values(curve, "confirm", "walk_5m_fraction")
    if np.isfinite(confirm).any():
        lo = np.array([r.get("confirm", {}).get("walk_5m_ci95", [np.nan] * 2)[0] for r in curve], dtype=float)
        hi = np.array([r.get("confirm", {}).get("walk_5m_ci95", [np.nan] * 2)[1] for r in curve], dtype=float)
        walk.errorbar(xs, confirm, yerr=[confirm - lo, hi - confirm], fmt="s", capsize=3,
                      label="walk >= 5 m (confirmation, 95 % interval)")
    walk.plot(xs, _values(curve, "fell_fraction"), "x:", color="tab:gray", label="fell")
    walk.axhline(WALK_FRACTION_GOAL, **_GOAL_STYLE, label="goal (10 min)")
    walk.set(title="walking at 0.6 m/s", ylabel="fraction of episodes", ylim=(-0.02, 1.02))
    walk.legend(fontsize=7, loc="lower right")

    track.plot(xs, _values(curve, "tracking_error_mps"), "o-", label="whole episode")
    track.plot(xs, _values(curve, "tracking_error_steady_mps"), "s--", label="steady state")
    track.axhline(TRACKING_GOAL_MPS, **_GOAL_STYLE, label="sweep goal (60 min)")
    track.set(title="forward tracking error", ylabel="m/s", ylim=(0.0, None))
    track.legend(fontsize=7)

    gait = "gait_in_walking_episodes"
    clearance.plot(xs, 100.0 * _values(curve, gait, "swing_clearance_m"), "o-")
    clearance.axhline(100.0 * CLEARANCE_GOAL_M, **_GOAL_STYLE)
    clearance.set(title="swing-foot clearance (>= 8 cm by 20 min)", ylabel="cm", ylim=(0.0, None))

    slip.plot(xs, _values(curve, gait, "stance_slip_mps"), "o-")
    slip.axhline(STANCE_SLIP_GOAL_MPS, **_GOAL_STYLE)
    slip.set(title="stance-foot slip (< 0.05 m/s by 20 min)", ylabel="m/s", ylim=(0.0, None))

    frequency.plot(xs, _values(curve, gait, "step_frequency_hz"), "o-", label="measured")
    period = _values(curve, "gait_period_s")
    if np.isfinite(period).any():
        target = 2.0 / period  # two steps per gait cycle
        # a bar per mark, not a band: the period can change between marks, and one mark is a point
        frequency.errorbar(xs, target, yerr=STEP_FREQUENCY_TOLERANCE * target, fmt="_", color="tab:red", alpha=0.6,
                           capsize=4, label="gait's +-15 %")
        frequency.legend(fontsize=7)
    frequency.set(title="step frequency (within 15 % by 20 min)", ylabel="Hz")

    double.plot(xs, _values(curve, gait, "double_support_fraction"), "o-")
    double.axhline(DOUBLE_SUPPORT_GOAL, **_GOAL_STYLE)
    double.set(title="double support (< 25 % by 20 min)", ylabel="fraction of time", ylim=(0.0, None))

    for ax in axes.ravel():
        ax.grid(alpha=0.3)
        if x == "minutes":
            for minutes in GOAL_MINUTES:
                if minutes <= np.nanmax(xs) * 1.05:
                    ax.axvline(minutes, color="tab:gray", linewidth=0.6, alpha=0.6)
    for ax in axes[1]:
        ax.set_xlabel("training minutes" if x == "minutes" else "PPO iterations")
    fig.suptitle(title or "time to walk (reference reward, domain randomisation on)")
    fig.tight_layout()
    return fig


def command_label(command) -> str:
    """Tick label of a sweep command (vx, vy, yaw rate) with its direction in words, since the sign
    conventions (REP 103: +y left, +yaw counter-clockwise) are not what a reader of a plot recalls."""
    vx, vy, yaw = (float(c) for c in command)

    def worded(value: float, positive: str, negative: str) -> str:
        return "" if value == 0 else f" ({positive if value > 0 else negative})"

    return (f"vx {vx:g}{worded(vx, 'fwd', 'back')}\nvy {vy:g}{worded(vy, 'left', 'right')}"
            f"\nyaw {yaw:g}{worded(yaw, 'left', 'right')}")


def command_sweep_figure(final: dict, title: str | None = None):
    """Bars of the tracking error per sweep command and on rough ground: with the push at 8 s, the
    same episodes' steady state, and without the push; the share of pushed episodes that fell is
    written over each group. Returns the Figure."""
    plt = pyplot_for_files()
    rows = list(final["command_sweep"])
    labels = [command_label(r["command"]) for r in rows]
    rough = final.get("rough_terrain")
    if rough:
        rows.append(rough)
        labels.append("rough\n0.6 m/s")
    series = (("tracking_error_mps", "with the push"), ("tracking_error_steady_mps", "steady state"),
              ("tracking_error_no_push_mps", "without the push"))
    fig, ax = plt.subplots(figsize=(1.15 * len(rows) + 2.0, 4.2))
    width = 0.8 / len(series)
    centres = np.arange(len(rows))
    for k, (key, label) in enumerate(series):
        ax.bar(centres + (k - 1) * width, np.nan_to_num(_values(rows, key)), width, label=label)
    for i, row in enumerate(rows):
        fell = row.get("fell_fraction") or 0.0
        if fell > 0:
            top = max(float(row.get(key) or 0.0) for key, _ in series)
            ax.annotate(f"{fell:.0%} fell", (centres[i], top), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7, color="tab:red")
    ax.axhline(TRACKING_GOAL_MPS, **_GOAL_STYLE, label="goal 0.1 m/s")
    tallest = np.nanmax(np.concatenate([_values(rows, key) for key, _ in series] + [[TRACKING_GOAL_MPS]]))
    ax.set_ylim(0.0, 1.25 * tallest)  # room for the legend and the fall labels above the bars
    ax.set_xticks(centres, labels, fontsize=8)
    ax.set_ylabel("tracking error, m/s")
    means = [final.get(k) for k in ("mean_tracking_error_mps", "mean_tracking_error_no_push_mps")]
    summary = " / ".join("-" if m is None else f"{m:.3f}" for m in means)
    ax.set_title(title or f"command sweep, {final.get('episodes', '?')} episodes per command: mean {summary} m/s "
                          "(with / without the push)", fontsize=10)
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | Path, dpi: int = 100) -> Path:
    plt = pyplot_for_files()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
