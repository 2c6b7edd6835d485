"""Names and constants defined once in minirl and repeated, as plain data, where torch may
not be imported (the monitor, the dashboard's forms): each copy must equal the original."""

from __future__ import annotations

from typing import get_args, get_type_hints

from minirl.clipping import EPS_HIGH, EPS_LOW
from minirl.is_weights import ICEPOP_BAND, IS_POLICIES, TIS_CAP, ISPolicy
from minirl.loss import LossConfig
from minirl.routing import REPLAY_MODES, ReplayMode
from monitor.config import RemediationConfig
from monitor.remediation import actions
from trainer.config import TrainConfig
from trainer.controls import Controls
from trainer.engines.config import WeightQuant
from trainer.engines.quant import rollout_bits


def test_the_monitor_names_the_modes_minirl_defines():
    assert actions.IS_POLICIES == IS_POLICIES == get_args(ISPolicy)
    assert actions.ROUTING_MODES == REPLAY_MODES == get_args(ReplayMode)
    assert get_args(WeightQuant) == actions.WEIGHT_QUANTS  # the rollout formats, finest first
    assert list(actions.QUANT_BITS) == list(actions.WEIGHT_QUANTS)
    assert rollout_bits("bf16", "none") == actions.QUANT_BITS["none"]


def test_the_trainer_uses_minirl_types_not_copies():
    assert get_type_hints(TrainConfig)["routing_replay"] is ReplayMode
    assert get_type_hints(Controls)["routing_replay"] is ReplayMode
    assert get_type_hints(Controls)["rollout_quant"] is WeightQuant
    assert get_type_hints(LossConfig)["is_policy"] is ISPolicy


def test_remediation_recipe_constants_are_the_papers():
    """The remediation policy turns on the same TIS cap, band and ε the loss defaults to."""
    loss, rem = LossConfig(), RemediationConfig()
    paper = (EPS_LOW, EPS_HIGH, TIS_CAP, ICEPOP_BAND)
    assert (loss.eps_low, loss.eps_high, loss.is_cap, loss.band) == paper
    assert (rem.eps_low, rem.eps_high, rem.tis_cap) == (EPS_LOW, EPS_HIGH, TIS_CAP)
    assert tuple(rem.icepop_band) == ICEPOP_BAND
