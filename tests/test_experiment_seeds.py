"""experiments/_seeds.py: a seed already run is read back, not run again; other
settings start over."""

from __future__ import annotations

from experiments import _seeds


def test_seeds_run_once_and_other_settings_start_over(tmp_path, capsys):
    path, calls = tmp_path / "out" / "seeds.json", []

    def run(seed):
        calls.append(seed)
        return {"value": seed * 10}

    first = _seeds.over_seeds(path, {"config": {"a": 1}}, [0, 1], run)
    assert calls == [0, 1] and first["seeds"] == {"0": {"value": 0}, "1": {"value": 10}}
    again = _seeds.over_seeds(path, {"config": {"a": 1}}, [0, 1, 2], run)
    assert calls == [0, 1, 2] and set(again["seeds"]) == {"0", "1", "2"}
    assert again["uptime_at_start"] == first["uptime_at_start"]
    other = _seeds.over_seeds(path, {"config": {"a": 2}}, [0], run)
    assert calls == [0, 1, 2, 0] and set(other["seeds"]) == {"0"}
    assert "seed 2:" in capsys.readouterr().out
