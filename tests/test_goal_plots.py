"""Goal pictures of bench/time_to_walk.py: what is drawn is the rows' numbers, against the goals' bars."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # bench/ scripts are not installed
from goal_plots import (CLEARANCE_GOAL_M, TRACKING_GOAL_MPS, WALK_FRACTION_GOAL, command_label,  # noqa: E402
                        command_sweep_figure, save_figure, time_to_walk_figure)


def curve_row(minutes, iterations, walk, clearance, period=0.7, confirm=None):
    row = {"train_minutes": minutes, "iterations": iterations, "walk_5m_fraction": walk, "fell_fraction": 1 - walk,
           "tracking_error_mps": 0.2 - 0.01 * minutes, "tracking_error_steady_mps": 0.1, "gait_period_s": period,
           "gait_in_walking_episodes": {"swing_clearance_m": clearance, "stance_slip_mps": 0.04,
                                        "step_frequency_hz": 2.9, "double_support_fraction": 0.05}}
    if confirm is not None:
        row["confirm"] = {"episodes": 256, "walk_5m_fraction": confirm, "walk_5m_ci95": [confirm - 0.03, confirm + 0.02]}
    return row


def panel(fig, title_start):
    (ax,) = [a for a in fig.axes if a.get_title().startswith(title_start)]
    return ax


def test_time_to_walk_figure_draws_the_rows_against_the_goals():
    curve = [curve_row(5, 300, 0.5, 0.06, confirm=0.55), curve_row(10, 620, 0.97, 0.075, confirm=0.93),
             curve_row(20, 1240, 1.0, None, period=0.6)]  # no walking episode's gait: a gap, not a crash
    fig = time_to_walk_figure(curve, x="iterations")
    walk = panel(fig, "walking")
    measured, = [l for l in walk.get_lines() if l.get_label().startswith("walk >= 5 m (goal")]
    assert list(measured.get_xdata()) == [300, 620, 1240] and list(measured.get_ydata()) == [0.5, 0.97, 1.0]
    goal, = [l for l in walk.get_lines() if l.get_label().startswith("goal")]
    assert list(goal.get_ydata()) == [WALK_FRACTION_GOAL] * 2
    clearance = panel(fig, "swing-foot clearance").get_lines()
    np.testing.assert_allclose(clearance[0].get_ydata(), [6.0, 7.5, np.nan])
    assert clearance[1].get_ydata()[0] == pytest.approx(100 * CLEARANCE_GOAL_M)
    # the step-frequency band follows each row's gait period: two steps per cycle, +-15 %
    bars = panel(fig, "step frequency").collections[0].get_segments()
    assert [tuple(np.round(seg[:, 1], 4)) for seg in bars] == [
        (round(2 / p * 0.85, 4), round(2 / p * 1.15, 4)) for p in (0.7, 0.7, 0.6)]
    # minutes on x: the 10/20/60-minute marks inside the range are drawn, 60 is not
    by_minutes = time_to_walk_figure(curve)
    marks = {l.get_xdata()[0] for l in panel(by_minutes, "double support").get_lines() if l.get_linewidth() == 0.6}
    assert marks == {10, 20}
    for bad in ({"curve": curve, "x": "seconds"}, {"curve": []}):
        with pytest.raises(ValueError):
            time_to_walk_figure(**bad)


def test_command_sweep_figure_bars_and_fall_labels(tmp_path):
    sweep = [{"command": [0.5, 0.0, 0.0], "tracking_error_mps": 0.12, "tracking_error_steady_mps": 0.07,
              "tracking_error_no_push_mps": 0.09, "fell_fraction": 0.25},
             {"command": [0.0, 0.3, 0.0], "tracking_error_mps": 0.08, "tracking_error_steady_mps": None,
              "tracking_error_no_push_mps": 0.06, "fell_fraction": 0.0}]
    final = {"command_sweep": sweep, "episodes": 4, "mean_tracking_error_mps": 0.1,
             "mean_tracking_error_no_push_mps": 0.075,
             "rough_terrain": {"tracking_error_mps": 0.15, "tracking_error_steady_mps": 0.1,
                               "tracking_error_no_push_mps": 0.11, "fell_fraction": 0.0}}
    fig = command_sweep_figure(final)
    ax = fig.axes[0]
    heights = [round(p.get_height(), 4) for p in ax.patches]
    # three series of three groups (two commands, rough ground); a missing steady figure is a zero bar
    assert heights == [0.12, 0.08, 0.15, 0.07, 0.0, 0.1, 0.09, 0.06, 0.11]
    assert [t.get_text() for t in ax.texts] == ["25% fell"]
    assert any(l.get_ydata()[0] == TRACKING_GOAL_MPS for l in ax.get_lines())
    assert "0.100 / 0.075" in ax.get_title() and ax.get_xticklabels()[-1].get_text().startswith("rough")
    assert [t.get_text() for t in ax.get_xticklabels()[:2]] == ["vx 0.5 (fwd)\nvy 0\nyaw 0", "vx 0\nvy 0.3 (left)\nyaw 0"]
    assert command_label((-0.5, -0.3, -1.0)) == "vx -0.5 (back)\nvy -0.3 (right)\nyaw -1 (right)"
    png = save_figure(fig, tmp_path / "sub" / "sweep.png")
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 300 and image.shape[1] > 400 and image[..., :3].std() > 0.05  # drawn, not blank
