"""The benchmarks' generated text states its seed (issue 34 point 5): the monitor
benchmarks (benchmarks/monitor_overhead.py, benchmarks/monitor_frameworks.py) and the
default-solver block (benchmarks/stiff.py), from hand-built records."""

from benchmarks import monitor_frameworks, monitor_overhead, stiff


def test_the_overhead_table_states_its_seed():
    record = {
        "started": "2026-12-03 18:23:25 UTC",
        "machine": {"cpus": 2, "jax": "0", "devices": ["cpu:0"]},
        "load_average_start": [0.5, 0.4, 0.3],
        "load_1min_after_each_repeat": [1.6, 1.9],
        "steps": 300,
        "repeats": 3,
        "seed": 3,
        "loop_without_monitor_s": 13.3,
        "step_ms": 43.6,
        "observation_ms": 12.0,
        "rows": [{"every": 10, "loop_s": 13.5, "overhead": 0.017, "predicted": 0.027}],
    }
    text = monitor_overhead.table(record)
    assert "Seed 3, one configuration: the model from `jax.random.key(3)`" in text
    assert "`jax.random.fold_in(jax.random.key(3), 1)`" in text
    assert "| 10 | 13.50 | +1.7% | 2.7% |" in text
    # a record from before the seed was kept: the script's only seed, 0
    old = {k: v for k, v in record.items() if k != "seed"}
    assert "Seed 0, one configuration" in monitor_overhead.table(old)


def test_the_frameworks_table_states_its_seed():
    row = {
        "framework": "PyTorch",
        "step_ms": 20.1,
        "observation_ms": 10.0,
        "loop_without_s": 3.0,
        "loop_with_s": 3.2,
        "overhead": 0.048,
        "predicted": 0.05,
        "load_after_repeats": [0.7, 2.1],
    }
    record = {
        "started": "2026-12-03 15:56:41 UTC",
        "machine": {"cpus": 2, "jax": "0", "torch": "2", "torch_threads": 2},
        "load_average_start": [0.4, 0.3, 0.2],
        "steps": 150,
        "repeats": 6,
        "every": 10,
        "seed": 0,
        "runtime_s": 351.0,
        "rows": [row],
    }
    text = monitor_frameworks.table(record)
    assert "Seed 0, one configuration" in text
    assert "`torch.manual_seed(0)` (PyTorch, Hugging Face)" in text
    assert "`nnx.Rngs(0)` (Flax)" in text and "351 s in all." in text


def test_the_default_solver_block_states_its_seed():
    row = {
        "grad_evals": 19097,
        "grad_eval_ratio_vs_tsit5": 48.35,
        "rel_error_final": 1.7e-6,
        "wall_s": 0.325,
        "speedup_vs_tsit5": 42.24,
        "compile_s": 2.9,
        "load_average": 0.79,
    }
    record = {
        "machine": {"date": "2026-12-01", "cpus": 2, "processor": "x86_64", "jax": "0"},
        "seed": 0,
        "rtol": 1e-6,
        "t1": 3000.0,
        "solvers": {"auto": row},
    }
    text = stiff.block(record)
    assert "Default Markov flow from the initial weights of seed 0 (" in text
    assert "| 3000 | auto | 19,097 | 48.35 |" in text
