"""``gflow train --seeds K --lrs ...``: a sweep of training runs as one run
directory, over one process or several (``gflow.runs.train_sweep``)."""

from __future__ import annotations

import logging
import time

from gflow.cli.common import load_config_file, start_log
from gflow.cli.errors import UsageError


def _same_config(out, cfg, sweep) -> bool:
    """Whether ``out/config.json`` holds ``cfg`` and ``sweep``."""
    import json

    from gflow.runs.train_run import TrainConfig

    theirs = load_config_file(out / "config.json", TrainConfig, option="--out")
    theirs["pi"] = tuple(theirs.get("pi", TrainConfig.pi))
    doc = json.loads((out / "config.json").read_text())
    return TrainConfig(**theirs) == cfg and doc.get("sweep") == sweep.to_dict()


def run_sweep(args, cfg, sweep, out, processes) -> int:
    """Train this process's members; on process 0, gather every member from the
    checkpoints, write the run directory and print one line per member."""
    import jax

    from gflow.cli.processes import check_run_dir
    from gflow.runs.distributed import deal, total
    from gflow.runs.train_run import prepare
    from gflow.runs.train_sweep import (
        gather,
        run_members,
        write_sweep_config,
    )

    members = sweep.members(cfg)
    main = processes is None or processes.main
    count = 1 if processes is None else processes.count
    if main:
        try:
            data = prepare(members[0][1])
        except (FileNotFoundError, ValueError) as e:
            raise UsageError(f"data: {e}") from None
        start_log(out)
        if args.resume is None:
            write_sweep_config(out, cfg, sweep, data)
    if processes is not None:
        check_run_dir(out, lambda: _same_config(out, cfg, sweep), processes, "train")
    start = time.perf_counter()
    done = []

    def finished(name, traj):
        done.append(name)
        if main and not args.quiet:
            how = traj.stats["resumed_pieces"]
            print(f"[{len(done)}] {name} {traj.status} ({how} segment(s) read back)",
                  flush=True)  # fmt: skip

    resumed = run_members(cfg, sweep, out, processes=processes, finished=finished)
    members_s = time.perf_counter() - start
    if processes is not None:  # every member is on disk once this returns
        resumed = total(resumed, processes)
        jax.distributed.shutdown()  # process 0 goes on alone; the others are done
    if not main:
        return 0
    ran = {}
    for (name, _), p in zip(members, deal(len(members), count)):
        ran.setdefault(p, []).append(name)
    log = logging.getLogger("gflow")
    for p, names in sorted(ran.items()):
        log.info("members from process %d of %d: %s", p, count, ", ".join(names))
    log.info("members: %d process(es), %.2f s", count, members_s)
    return _write(out, cfg, sweep, gather(cfg, sweep, out, count), resumed, count,
                  start)  # fmt: skip


def _write(out, cfg, sweep, runs, resumed, count, start) -> int:
    """The run directory's files and figures; the summary lines."""
    from gflow.plotting.figures import train_figures
    from gflow.runs.train_sweep import write_sweep_run

    stages = write_sweep_run(out, sweep, runs)
    for name, (member, data, traj) in runs.items():
        folder = out / "figures" / name
        folder.mkdir(parents=True, exist_ok=True)
        train_figures(folder, member, data, traj, stages[name])
    for name, (_, _, traj) in runs.items():
        loss = traj.metrics["loss"]
        heads = {(s.layer, s.head) for s in stages[name] if s.layer >= 0}
        print(
            f"  {name} {traj.status}: t={traj.t[-1]:.4g}, loss {loss[0]:.4f} -> "
            f"{loss[-1]:.4f}, {len(stages[name])} stages in {len(heads)} heads"
        )
    print(
        f"train {cfg.optimizer}, {len(runs)} members: "
        + (f"{resumed} segment(s) resumed, " if resumed else "")
        + (f"{count} processes, " if count > 1 else "")
        + f"{time.perf_counter() - start:.1f} s -> {out}"
    )
    ok = all(traj.status == "success" for _, _, traj in runs.values())
    return 0 if ok else 1
