"""ert as a ReFrame regression test: every ceiling of the nodes, aggregate and per host, against a reference.

    export SLURM_CONF=...            (where the site needs it)
    reframe -C jobs/reframe/local-cluster.py -c jobs/reframe/ert_check.py -r \\
        -S reference_file=results/accepted/ceilings.json -S nodes=2 -S ranks_per_node=2 -S config=configs/tiny.yaml

One job: ``ert-run CONFIG --out run`` on ``nodes`` nodes with ``ranks_per_node``
ranks each (the partition's launcher, srun on Slurm), then ``ert show run``.
Each ceiling of ``run/ceilings.json`` is a performance variable, named
``aggregate/<ceiling>`` (all ranks' bytes over the slowest rank's time) and
``<host>/<ceiling>`` (that host's own ranks; runs on 2+ hosts), e.g.
``node2/L2 fp64 read+write`` in GB/s.  References come from ``reference_file``, a
ceilings.json (a previous run, or a vendor's acceptance figures written in
ert's format; ``ert.consumers.compare.acceptance`` says which value each name is held
to); a value may be ``tolerance`` below its reference, any amount above (a
latency: the other way round).  A ceiling the reference has and the run lacks
fails the sanity check by name.  Without ``reference_file`` every ceiling is only
reported.  ``select`` (a regular expression) keeps the variables it matches.

Runs in the Python that has ert installed (ReFrame from ert's ``[reframe]``
extra); the job activates ``ert_venv`` (default: ``$ERT_VENV``, else that
Python's environment).  jobs/README.md says how a site adapts it.
"""

from __future__ import annotations

import json
import os
import re
import sys

if __name__ == "__main__":  # ReFrame loads this file; run as a script, it says how (without ReFrame installed too)
    print(__doc__.strip())
    sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)

import reframe as rfm  # noqa: E402
import reframe.utility.sanity as sn  # noqa: E402
from reframe.core.builtins import run_after, run_before, sanity_function, variable  # noqa: E402

from ert.consumers.compare.acceptance import missing, perf_values, references  # noqa: E402

RUN = "run"  # ert-run's output directory, inside the test's stage directory


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


@rfm.simple_test
class ert_check(rfm.RunOnlyRegressionTest):
    descr = "ert: every ceiling of the nodes (aggregate and per host) against a reference ceilings.json"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]

    #: ert config (a path, as ert-run takes it); empty: ert's packaged default
    config = variable(str, value="")
    nodes = variable(int, value=2)
    ranks_per_node = variable(int, value=2)
    #: reference ceilings.json; empty: report only
    reference_file = variable(str, value="")
    #: how far below its reference a ceiling may fall (0.10: 10 %)
    tolerance = variable(float, value=0.10)
    #: keep only the performance variables this regular expression finds (re.search); empty: all
    select = variable(str, value="")
    #: the environment with ert installed, activated by the job
    ert_venv = variable(str, value=os.environ.get("ERT_VENV") or sys.prefix)

    executable = "ert-run"
    exclusive_access = True
    time_limit = "30m"
    tags = {"ert", "roofline", "acceptance"}

    @run_after("init")
    def ert_paths(self):
        # Relative paths are the caller's (where reframe was started), as ert-run would read them.
        if self.config:
            self.config = os.path.abspath(self.config)
        if self.reference_file:
            self.reference_file = os.path.abspath(self.reference_file)
            if not os.path.isfile(self.reference_file):
                raise ValueError(f"ert_check: reference_file {self.reference_file}: no such file")

    @run_before("run")
    def ert_job(self):
        self.num_tasks_per_node = self.ranks_per_node
        self.num_tasks = self.nodes * self.ranks_per_node
        cpus = self.current_partition.processor.num_cpus
        if cpus:  # threads per rank: the node's cpus over its ranks, as jobs/slurm-cpu.sh gives them
            self.num_cpus_per_task = max(1, cpus // self.ranks_per_node)
        self.executable_opts = ([self.config] if self.config else []) + ["--out", RUN]
        # A rank that dies ends the step at once (ert's job scripts do the same); site options from the
        # partition's extras (e.g. srun's --mpi=pmi2 for the pip mpich wheel).
        self.job.launcher.options += list(self.current_partition.extras.get("launcher_options", []))
        self.prerun_cmds = [f"source {self.ert_venv}/bin/activate"]
        self.postrun_cmds = [f"ert show {RUN}"]

    @sanity_function
    def ert_ran(self):
        path = os.path.join(self.stagedir, RUN, "ceilings.json")
        sn.evaluate(sn.assert_true(os.path.isfile(path), f"ert-run wrote no {RUN}/ceilings.json"))
        doc = _load(path)
        hosts = (doc.get("metadata") or {}).get("hosts") or []
        sn.evaluate(sn.assert_eq(len(set(hosts)), self.nodes, f"ert-run ran on hosts {sorted(set(hosts))}"))
        if self.reference_file:
            gone = [name for name in missing(doc, _load(self.reference_file)) if self.ert_kept(name)]
            sn.evaluate(sn.assert_false(gone, f"ceilings of the reference missing in this run: {', '.join(gone)}"))
        return True

    def ert_kept(self, name: str) -> bool:
        return not self.select or re.search(self.select, name) is not None

    @run_before("performance")
    def ert_ceilings(self):
        doc = _load(os.path.join(self.stagedir, RUN, "ceilings.json"))
        values = {name: vu for name, vu in perf_values(doc).items() if self.ert_kept(name)}
        self.perf_variables = {name: sn.make_performance_function(sn.defer(value), unit)
                               for name, (value, unit) in values.items()}
        if self.reference_file:
            refs = references(doc, _load(self.reference_file), self.tolerance)
            self.reference = {"*": {name: ref for name, ref in refs.items() if name in values}}
