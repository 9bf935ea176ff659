"""The per-gradient block of the standard block: ratios against the bare gradient
timed on a quiet machine, and nothing published that was timed at a load above 1.5."""

from benchmarks.deep_overhead import block


def _pass(bare_us, bare_load, rows):
    return {
        "bare_fused_us": bare_us,
        "bare_python_call_us": 2 * bare_us,
        "bare_load_1min": bare_load,
        **{
            name: {
                "grad_evals": 100,
                "wall_s": per * 1e-4,
                "us_per_grad_eval": per,
                "load_1min": load,
            }
            for name, (per, load) in rows.items()
        },
    }


def test_ratios_use_the_quiet_bare_gradient_and_withhold_loud_rows():
    record = {
        "when": "2026-12-05T00:00:00+00:00",
        "cpus": 2,
        "jax": "0",
        "t1": 1.0,
        "repeats": 3,
        "n_bare": 200,
        "rows": {
            # a faster bare time taken at a load above 1.5 must not be the divisor
            "2 saves": _pass(500.0, 1.6, {"tsit5": (1100.0, 1.0), "auto": (9e9, 1.7)}),
            "201 saves": _pass(1000.0, 1.0, {"tsit5": (1300.0, 1.2)}),
        },
    }
    text = block(record)
    rows = {
        tuple(c.strip() for c in line.split("|")[1:3]): [
            c.strip() for c in line.split("|")[3:-1]
        ]
        for line in text.splitlines()
        if line.startswith("| 2") and "saves" in line
    }
    assert "bare times of the 201 saves pass (fused 1.00 ms" in text
    assert rows[("2 saves", "tsit5")][3] == "1.10 (met)"
    assert rows[("2 saves", "tsit5")][4] == "0.55"  # ÷ the Python-called 2 ms
    assert rows[("201 saves", "tsit5")][3] == "1.30 (**missed**)"
    assert rows[("2 saves", "auto")][1].startswith("withheld")
    assert rows[("2 saves", "bare fused gradient")][2].startswith("withheld")
    quiet = {**record, "rows": {"2 saves": record["rows"]["2 saves"]}}
    assert block(quiet).startswith("Withheld")
