"""The GD-against-flow check of the ladder (experiments/ladder_flow.py): each rung's
``gflow train`` configuration, and the block read from hand-built cells."""

import json

import pytest

from experiments import ladder_flow as lf
from experiments import practical_ladder as pl
from gflow.runs.train import train_strategies


@pytest.mark.parametrize("rung", [name for name, _ in pl.RUNGS])
def test_each_rung_is_its_transformer(rung):
    cfg = lf.train_config(lf.Config(), "icl-markov", rung, seed=1, method="flow")
    model = train_strategies(cfg).model
    settings = dict(pl.RUNGS)[rung]
    assert (model.layers, model.heads) == (
        settings.get("n_layers", 1),
        settings.get("n_heads", 1),
    )
    assert model.layernorm == settings.get("layernorm", False)
    assert model.init_scale == settings.get("init_scale", 1e-3)
    assert model.positions == (32 if "max_len" in settings else None)
    assert (cfg.method, cfg.x64, cfg.seed, cfg.lr * cfg.steps) == ("flow", True, 1, 300)


def _cell(rung, seed, lam, flow_status, gd_heads, flow_heads=None):
    rec = {
        "data": "markov",
        "rung": rung,
        "seed": seed,
        "uptime": "up 1 min, load average: 0.50, 0.40, 0.30",
        "gd": {"lam_init": lam, "lam_end": lam / 10, "heads": gd_heads},
    }
    if flow_status is not None:
        rec["flow"] = {
            "status": flow_status,
            "t_reached": 300.0 if flow_status == "success" else 0.05,
            "grad_evals": 700,
            "heads": flow_heads or gd_heads,
            "distance": 0.01,
        }
    return rec


def test_the_block_counts_stages_agreement_and_stalls(tmp_path, monkeypatch):
    monkeypatch.setattr(lf, "OUT", tmp_path)
    cfg = lf.Config(datasets=("markov",), rungs=("0 paper", "4 +pre-LN"), seeds=(0, 1))
    focus = {"0,0": [["focus", 1]]}
    cells = [
        _cell("0 paper", 0, 0.4, "success", focus),
        _cell("0 paper", 1, 0.8, "success", focus, {"0,0": []}),
        _cell("4 +pre-LN", 0, 1000.0, "max_steps", {"0,0": [["dilution", 1]]}),
        _cell("4 +pre-LN", 1, 2000.0, None, {"0,0": []}),
    ]
    for rec in cells:
        path = lf._path(cfg, rec["data"], rec["rung"], rec["seed"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    text = lf.block(cfg)
    rows = {
        line.split(" | ")[1]: line for line in text.splitlines() if "| markov" in line
    }
    paper = rows["0 paper"].split(" | ")
    # η·λ/2 with η = 0.5: 0.1-0.2 at init; focus in both GD runs, one flow agrees
    assert paper[3:6] == [
        "0.1-0.2",
        "0.01-0.02",
        "2/2 reach t = 300, 700 gradients (median)",
    ]
    assert paper[6:9] == ["2/0/0 of 2", "1/0/0 of 2", "1/2"]
    ln = rows["4 +pre-LN"].split(" | ")
    assert ln[3] == "250-500" and ln[5].startswith("stalls: t = 0.05 of 300 (1 run)")
    assert ln[6] == "0/1/0 of 2" and ln[7] == "—"
